"""The host-wide measurement lock: one llamaforge sweep measures on a machine at a time.

Two sweeps on one host (or one GPU) measure each other. :class:`HostLock` is an ``fcntl.flock`` on
``<lock dir>/llamaforge-measure.lock`` holding the holder's PID, user, command and start time as JSON.
The kernel drops the lock when its holder dies (``kill -9`` included), so a stale file never blocks. A
second sweep refuses at once naming who holds it, or waits up to ``wait_s`` seconds. ``allow_busy``
measures anyway; the caller records that.

The lock folder is ``$LLAMAFORGE_LOCK_DIR``, else a private folder per user in the system temp folder
(``/tmp/llamaforge-<uid>``, mode 0700, checked to be ours and not a symlink). A lock in a folder every
user can write would let any local user plant a symlink there (so that root's sweep changes and
overwrites the file it points to) or simply hold the lock and block every sweep. The file itself is
opened by :func:`llamaforge.locks.open_lock_file`: never through a symlink, only a regular file of our
own. Another user's sweep is therefore not seen by the lock; its GPU work is (the busy-GPU check).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from .errors import BenchError
from .locks import open_lock_file, user_name

LOCK_NAME = "llamaforge-measure.lock"
_FIX = "remove it if no llamaforge is running, or set LLAMAFORGE_LOCK_DIR to a folder of your own"


def lock_dir() -> Path:
    env = os.environ.get("LLAMAFORGE_LOCK_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"llamaforge-{os.geteuid()}"


def _dir_problem(st: os.stat_result, private: bool) -> str | None:
    """What makes a lock folder unsafe (``private``: the default per-user folder, which must be 0700)."""
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to {user_name(st.st_uid)}"
    if private and st.st_mode & 0o077:
        return f"is open to other users ({mode})"
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        return f"is writable by other users without the sticky bit ({mode})"
    return None


def _check_dir(d: Path) -> None:
    """Create the lock folder (0700) if needed; it must be a real folder of ours (or root's), and the
    default per-user folder closed to other users; else one line naming what is wrong."""
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700, parents=True)
    problem = _dir_problem(os.lstat(d), private=not os.environ.get("LLAMAFORGE_LOCK_DIR"))
    if problem:
        raise BenchError(f"the lock folder {d} {problem} (another user may have planted it); it was left as it is",
                         _FIX)


def holder(path: Path) -> dict:
    """What the lock file says about its holder (``{}`` when unreadable); read without following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        info = json.loads(os.read(fd, 1 << 16).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    return info if isinstance(info, dict) else {}


def describe(info: dict) -> str:
    """``PID 123 (user ann: llamaforge bench …, since 10:02:03)``."""
    if not info:
        return "another llamaforge process"
    since = info.get("since")
    when = time.strftime("%H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "?"
    cmd = " ".join(str(info.get("command") or "?").split())[:120]
    return f"PID {info.get('pid')} (user {info.get('user') or '?'}: {cmd}, since {when})"


class HostLock:
    """``with HostLock(run_id): ...`` — raises BenchError when another sweep holds it."""

    def __init__(self, what: str = "", *, wait_s: float = 0.0, path: Path | None = None) -> None:
        self.path = path or lock_dir() / LOCK_NAME
        self.what = what
        self.wait_s = wait_s
        self._f: IO[str] | None = None

    def try_acquire(self) -> bool:
        _check_dir(self.path.parent)
        f = os.fdopen(open_lock_file(self.path, error=BenchError, fix=_FIX), "r+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "user": user_name(os.geteuid()), "command": " ".join(sys.argv),
                            "what": self.what, "since": time.time()}))
        f.flush()
        self._f = f
        return True

    def acquire(self) -> HostLock:
        deadline = time.monotonic() + self.wait_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise BenchError(f"another llamaforge sweep is measuring on this host: {describe(holder(self.path))}"
                                 f" holds {self.path}",
                                 "wait for it to finish, or pass --allow-busy to measure anyway (recorded "
                                 "in the run; its numbers and this run's will disturb each other)")
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        return self

    def release(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.seek(0)
                self._f.truncate()
                fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)
            self._f.close()
            self._f = None

    def __enter__(self) -> HostLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
