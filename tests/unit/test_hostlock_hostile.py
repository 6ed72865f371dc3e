"""The host lock and the run locks against a hostile local user: a planted symlink (or hard link, or a
file of another user) is never followed, changed or truncated; the default lock folder is private to
the user; a held lock is reported with its holder's PID, user and command. Real processes hold the
locks; files of "another user" are made with chown (the suite runs as root in CI; skipped otherwise)."""

from __future__ import annotations

import getpass
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from llamaforge import hostlock
from llamaforge.errors import BenchError, LlamaforgeError
from llamaforge.hostlock import LOCK_NAME, HostLock
from llamaforge.locks import exclusive_lock, run_lock_path

NOBODY = 65534


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.conf"
    v.write_text("precious\n")
    v.chmod(0o600)
    return v


def _unchanged(v: Path) -> None:
    assert v.read_text() == "precious\n" and stat.S_IMODE(v.stat().st_mode) == 0o600


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    d = tmp_path / "locks"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("LLAMAFORGE_LOCK_DIR", str(d))
    return d


def test_a_planted_symlink_is_not_followed_nor_its_target_changed(lock_dir, tmp_path):
    victim = _victim(tmp_path)
    (lock_dir / LOCK_NAME).symlink_to(victim)
    with pytest.raises(BenchError) as e:
        HostLock("sweep").acquire()
    _unchanged(victim)
    assert "is a symbolic link" in e.value.message and "not followed" in e.value.message
    assert (lock_dir / LOCK_NAME).is_symlink()          # left as it is


def test_a_planted_hard_link_is_not_truncated(lock_dir, tmp_path):
    victim = _victim(tmp_path)
    os.link(victim, lock_dir / LOCK_NAME)
    with pytest.raises(BenchError, match="another hard link"):
        HostLock("sweep").acquire()
    _unchanged(victim)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file of another user")
def test_a_lock_file_of_another_user_is_refused_naming_the_owner(lock_dir):
    f = lock_dir / LOCK_NAME
    f.write_text("theirs")
    os.chown(f, NOBODY, NOBODY)
    f.chmod(0o600)
    with pytest.raises(BenchError) as e:
        HostLock("sweep").acquire()
    assert "belongs to nobody" in e.value.message or f"uid {NOBODY}" in e.value.message
    assert f.read_text() == "theirs" and stat.S_IMODE(f.stat().st_mode) == 0o600


def test_the_lock_file_is_not_made_world_writable(lock_dir):
    with HostLock("sweep"):
        mode = stat.S_IMODE((lock_dir / LOCK_NAME).stat().st_mode)
    assert not mode & 0o022


def test_the_default_lock_folder_is_private_to_the_user(tmp_path, monkeypatch):
    monkeypatch.delenv("LLAMAFORGE_LOCK_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = tmp_path / f"llamaforge-{os.geteuid()}"
    assert hostlock.lock_dir() == d
    with HostLock("sweep"):
        st = d.stat()
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


@pytest.mark.parametrize("plant", ["symlink", "open", "other-user"])
def test_a_planted_default_lock_folder_is_refused(tmp_path, monkeypatch, plant):
    if plant == "other-user" and os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user")
    monkeypatch.delenv("LLAMAFORGE_LOCK_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = tmp_path / f"llamaforge-{os.geteuid()}"
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o777)
    if plant == "symlink":
        d.symlink_to(elsewhere)
    else:
        d.mkdir()
        d.chmod(0o777 if plant == "open" else 0o700)
        if plant == "other-user":
            os.chown(d, NOBODY, NOBODY)
    with pytest.raises(BenchError) as e:
        HostLock("sweep").acquire()
    assert f"the lock folder {d}" in e.value.message and "LLAMAFORGE_LOCK_DIR" in e.value.fix
    assert not (elsewhere / LOCK_NAME).exists() and not (d / LOCK_NAME).exists()


_HOLD = ("import sys, time\n"
         "from llamaforge.hostlock import HostLock\n"
         "with HostLock('holder-sweep'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(120)\n")


def test_a_lock_held_by_another_process_names_its_pid_user_and_command(lock_dir):
    p = subprocess.Popen([sys.executable, "-c", _HOLD, "bench", "--name", "night-run"], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "LLAMAFORGE_LOCK_DIR": str(lock_dir)})
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        with pytest.raises(BenchError) as e:
            HostLock("second").acquire()
        msg = e.value.message
        assert f"PID {p.pid}" in msg and f"user {getpass.getuser()}" in msg and "bench --name night-run" in msg
    finally:
        p.kill()
        p.wait(timeout=30)
    with HostLock("third"):   # the holder died: free again
        assert hostlock.holder(lock_dir / LOCK_NAME)["what"] == "third"


def test_holder_does_not_read_through_a_symlink(lock_dir, tmp_path):
    target = tmp_path / "secret.json"
    target.write_text('{"pid": 1, "command": "secret"}')
    (lock_dir / LOCK_NAME).symlink_to(target)
    assert hostlock.holder(lock_dir / LOCK_NAME) == {}


def test_a_run_lock_never_follows_a_symlink_committed_in_results(tmp_path):
    victim = _victim(tmp_path)
    path = run_lock_path(tmp_path / "results" / "llamaforge.sqlite", "r1")
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    with pytest.raises(LlamaforgeError, match="symbolic link"):
        with exclusive_lock(path, what="run r1"):
            pass
    _unchanged(victim)


def test_a_run_lock_folder_that_is_a_symlink_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "locks").symlink_to(elsewhere)
    with pytest.raises(LlamaforgeError, match="symbolic link"):
        with exclusive_lock(run_lock_path(tmp_path / "results" / "s.sqlite", "r1"), what="run r1"):
            pass
    assert list(elsewhere.iterdir()) == []
