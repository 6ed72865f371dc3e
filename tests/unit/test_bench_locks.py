"""Serialised measurements: one process measures a run at a time (a second --resume is refused
naming the holder; a dead holder's lock is taken over), and a resume cannot add a series of other
builds (another --bin-dir) to a run. Real processes hold the locks; the server is the fake one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench_sweep import _plan, fake_build  # noqa: F401 - fixture

from llamaforge.bench.sweep import run_sweep
from llamaforge.errors import BenchError
from llamaforge.locks import exclusive_lock, run_lock_path

_HOLDER = ("import sys, time\n"
           "from pathlib import Path\n"
           "from llamaforge.locks import run_lock\n"
           "with run_lock(Path(sys.argv[1]), sys.argv[2]):\n"
           "    print('held', flush=True)\n"
           "    time.sleep(120)\n")


def _hold(store_path: Path, run_id: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(store_path), run_id], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _stop(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if p.poll() is None:
        os.kill(p.pid, sig)
    p.wait(timeout=30)


def test_a_second_resume_of_a_run_is_refused_naming_the_holder(fake_build, store):  # noqa: F811
    good = fake_build("good")
    plan = _plan("0:1", repeats=1)
    run = run_sweep(plan, [good], store, progress=False)
    store.db.execute("DELETE FROM points WHERE run_id=? AND ncmoe=1", (run,))
    holder = _hold(store.path, run)
    try:
        with pytest.raises(BenchError) as ei:
            run_sweep(plan, [good], store, resume_run=run, progress=False)
        assert f"run {run} is in use by process {holder.pid}" in ei.value.message
        assert len(store.points(run)) == 1          # nothing measured twice
    finally:
        _stop(holder)
    # the holder died (kill -9): its lock is taken over and the resume measures what is missing
    run_sweep(plan, [good], store, resume_run=run, progress=False)
    assert len(store.points(run)) == 2
    assert run_lock_path(store.path, run).read_text() == ""   # released


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_notice(tmp_path, capsys):
    holder = _hold(tmp_path / "s.sqlite", "r1")
    _stop(holder)
    path = run_lock_path(tmp_path / "s.sqlite", "r1")
    assert path.read_text().strip() == str(holder.pid)       # the dead holder's PID is still written there
    with exclusive_lock(path, what="run r1"):
        assert path.read_text().strip() == str(os.getpid())
    assert f"from process {holder.pid}, which is gone" in " ".join(capsys.readouterr().err.split())


def test_run_lock_file_names_are_safe(tmp_path):
    p = run_lock_path(tmp_path / "s.sqlite", "../../etc/x y")
    assert p.parent == tmp_path / "locks" and "/" not in p.name and " " not in p.name


def test_resume_with_other_builds_is_refused(fake_build, store):  # noqa: F811
    a, other = fake_build("ext-cpu-aaa"), fake_build("ext-cpu-bbb")
    plan = _plan("0:1", repeats=1)
    run = run_sweep(plan, [a], store, progress=False)
    with pytest.raises(BenchError) as ei:
        run_sweep(plan, [other], store, resume_run=run, progress=False)
    assert "ext-cpu-bbb" in ei.value.message and "would add a series" in ei.value.message
    assert {p.build_key for p in store.points(run)} == {"ext-cpu-aaa"}
    assert [b["key"] for b in store.builds_for_run(run)] == ["ext-cpu-aaa"]
    assert store.get_run(run).status == "done"
