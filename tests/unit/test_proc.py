"""proc.run against real child processes: output that is not UTF-8, far more output than a pipe
holds, and a log on a full filesystem must neither kill the reader (the child would then block on
a full pipe until its timeout) nor lose the error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from llamaforge import proc
from mounts import tmpfs

# ~8 MiB of output, far beyond a pipe's 64 KiB: a dead reader leaves the child blocked until the timeout
_LOUD = ("import sys\n"
         "out = sys.stdout.buffer\n"
         "out.write(b'before \\xff\\xfe bad bytes \\xc3\\n')\n"
         "for i in range(200000):\n"
         "    out.write(b'line %d of forty-ish bytes ......\\n' % i)\n"
         "out.write(b'split \\xc3')\n"
         "out.flush()\n"
         "out.write(b'\\xa9 done\\n')\n")
_TIMEOUT = 120.0


def _loud(tmp_path: Path) -> list[str]:
    script = tmp_path / "loud.py"
    script.write_text(_LOUD)
    return [sys.executable, str(script)]


def test_invalid_utf8_and_lots_of_output_are_drained(tmp_path):
    lines: list[str] = []
    r = proc.run(_loud(tmp_path), timeout=_TIMEOUT, log_path=tmp_path / "log", on_line=lines.append)
    assert not r.timed_out
    assert r.returncode == 0
    assert r.output.startswith("before \ufffd\ufffd bad bytes \ufffd\n")
    assert "line 199999 of forty-ish bytes" in r.output
    assert r.output.endswith("split \u00e9 done\n")   # a character split across two reads is decoded whole
    assert len(lines) == 200002 and lines[-1] == "split \u00e9 done\n"
    assert r.log_error is None
    assert (tmp_path / "log").read_bytes().startswith(b"before \xff\xfe bad bytes \xc3\n")  # the raw bytes are logged


def test_on_line_that_raises_does_not_stop_the_drain(tmp_path):
    def boom(line: str) -> None:
        raise RuntimeError(line)

    r = proc.run(_loud(tmp_path), timeout=_TIMEOUT, on_line=boom)
    assert r.ok and r.output.endswith("done\n")


def test_log_on_dev_full_keeps_draining_and_reports_the_error(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    r = proc.run(_loud(tmp_path), timeout=_TIMEOUT, log_path=Path("/dev/full"))
    assert not r.timed_out and r.returncode == 0
    assert "line 199999 of forty-ish bytes" in r.output
    assert r.log_error and "No space left on device" in r.log_error


def test_log_on_a_real_full_filesystem(tmp_path):
    with tmpfs(tmp_path, "size=64k") as mnt:
        log = mnt / "build.log"
        r = proc.run(_loud(tmp_path), timeout=_TIMEOUT, log_path=log)
        assert not r.timed_out and r.returncode == 0
        assert r.output.endswith("done\n")
        assert r.log_error and "No space left on device" in r.log_error
        assert 0 < log.stat().st_size <= 64 * 1024


def test_build_step_with_an_unwritable_log_is_a_clear_build_error(tmp_path):
    from llamaforge.backends import get as get_backend
    from llamaforge.builds import builder
    from llamaforge.errors import BuildError

    r = proc.run(_loud(tmp_path), timeout=_TIMEOUT, log_path=Path("/dev/full"))
    with pytest.raises(BuildError) as ei:
        builder._check_step("build", get_backend("cpu"), r, Path("/dev/full"))
    assert "could not be written" in ei.value.message and "No space left" in ei.value.message
    assert "free disk space" in (ei.value.fix or "")


def test_timeout_still_kills_a_silent_child(tmp_path):
    r = proc.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1.0, log_path=tmp_path / "log")
    assert r.timed_out and not r.ok
    assert r.log_error is None
