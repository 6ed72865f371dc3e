"""Exclusive locks that name their holder: one measurement of a run at a time (``run_lock``), and the
building block for other "only one at a time" rules (:func:`exclusive_lock`, e.g. a host-wide bench lock).

A lock is an ``flock`` on a small file that holds the holder's PID while it is held. The kernel
drops an ``flock`` when its process dies (even on ``kill -9``), so a lock left by a dead process is
simply taken over — with a notice naming the PID that is gone. Lock files are never deleted (that
would race with a process that just opened one); a released lock file is empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import LlamaforgeError
from .pathsafe import component


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
    with open(path, "a+") as f:   # "a+": opening must not erase the holder's PID
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
