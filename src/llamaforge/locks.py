"""Exclusive locks that name their holder: one measurement of a run at a time (``run_lock``), and the
building block for other "only one at a time" rules (:func:`exclusive_lock`, e.g. a host-wide bench lock).

A lock is an ``flock`` on a small file that holds the holder's PID while it is held. The kernel
drops an ``flock`` when its process dies (even on ``kill -9``), so a lock left by a dead process is
simply taken over — with a notice naming the PID that is gone. Lock files are never deleted (that
would race with a process that just opened one); a released lock file is empty.

Lock files are opened by :func:`open_lock_file`: never through a symbolic link (``O_NOFOLLOW``), and
only a regular file of our own with no other hard link is used (a ``results/locks`` folder can come
from a repository; a lock folder can be shared). Anything else is refused, left untouched, naming
its owner.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import LlamaforgeError
from .pathsafe import component


def user_name(uid: int) -> str:
    """The login name of ``uid`` (``uid N`` when it has none)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"


def open_lock_file(path: Path, *, create: bool = True, error: type[LlamaforgeError] = LlamaforgeError,
                   fix: str | None = None) -> int:
    """A read-write descriptor of the lock file ``path`` — never through a symlink, and only of a regular
    file that belongs to us and has no other hard link; otherwise ``error`` (the file is left untouched)."""
    fix = fix or f"remove it (`rm {path}`) if no llamaforge is running, then try again"
    if Path(path).parent.is_symlink():
        raise error(f"the folder of the lock file {path} is a symbolic link; it was not followed", fix)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise error(f"the lock file {path} is a symbolic link (another user may have planted it); "
                        "it was not followed", fix) from None
        raise error(f"cannot open the lock file {path}: {e.strerror}", fix) from None
    st = os.fstat(fd)
    problem = (None if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1 else
               "is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"belongs to {user_name(st.st_uid)}, not to you" if st.st_uid != os.geteuid() else
               "has another hard link (another user may have planted it)")
    if problem:
        os.close(fd)
        raise error(f"the lock file {path} {problem}; it was left as it is", fix)
    return fd


def _holder(f) -> int | None:  # noqa: ANN001 - an open text file
    f.seek(0)
    text = f.read(64).strip()
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def exclusive_lock(path: Path, *, what: str, error: type[LlamaforgeError] = LlamaforgeError,
                   fix: str = "wait for it to finish, or stop it", wait: bool = False,
                   waiting_notice: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for ``what`` (e.g. "run 2026…-ab12").

    Held by another live process: raise ``error`` naming its PID (``wait=False``), or print
    ``waiting_notice`` and wait (``wait=True``). A lock whose holder died is taken over."""
    from .console import notice

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path, error=error)   # opening must not erase the holder's PID (no truncation)
    with os.fdopen(fd, "r+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(f)
            who = f"process {pid}" if pid else "another process"
            if not wait:
                raise error(f"{what} is in use by {who} (lock {path})", fix) from None
            notice(waiting_notice or f"waiting for {who}, which holds {what}")
            fcntl.flock(f, fcntl.LOCK_EX)
        stale = _holder(f)
        if stale and stale != os.getpid() and not _alive(stale):
            notice(f"taking over {what} from process {stale}, which is gone")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                f.seek(0)
                f.truncate()
                f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def run_lock_path(store_path: Path, run_id: str) -> Path:
    """``locks/run-<id>.lock`` beside the store (the id made safe as a file name)."""
    return Path(store_path).parent / "locks" / f"run-{component(run_id)}.lock"


@contextlib.contextmanager
def run_lock(store_path: Path, run_id: str) -> Iterator[None]:
    """One process measures a run at a time: a second ``bench --resume RUN`` is refused."""
    from .errors import BenchError

    with exclusive_lock(run_lock_path(store_path, run_id), what=f"run {run_id}", error=BenchError,
                        fix="wait until that process is done (or stop it), then resume again"):
        yield
