"""The host-wide measurement lock: one llamaforge sweep measures on a machine at a time.

Two sweeps on one host (or one GPU) measure each other. :class:`HostLock` is an ``fcntl.flock``
on ``<lock dir>/llamaforge-measure.lock`` — ``$LLAMAFORGE_LOCK_DIR``, else the system temp folder
(``/tmp``), so every user's sweeps see it — holding the holder's PID, command and start time as
JSON. The kernel drops the lock when its holder dies (``kill -9`` included), so a stale file never
blocks. A second sweep refuses at once with who holds it, or waits up to ``wait_s`` seconds.
``allow_busy`` measures anyway; the caller records that.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from .errors import BenchError

LOCK_NAME = "llamaforge-measure.lock"


def lock_dir() -> Path:
    return Path(os.environ.get("LLAMAFORGE_LOCK_DIR") or tempfile.gettempdir())


def holder(path: Path) -> dict:
    """What the lock file says about its holder (``{}`` when unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def describe(info: dict) -> str:
    if not info:
        return "another llamaforge process"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"PID {info.get('pid')} ({str(info.get('command') or '?')[:120]}, since {since})"


class HostLock:
    """``with HostLock(run_id): ...`` — raises BenchError when another sweep holds it."""

    def __init__(self, what: str = "", *, wait_s: float = 0.0, path: Path | None = None) -> None:
        self.path = path or lock_dir() / LOCK_NAME
        self.what = what
        self.wait_s = wait_s
        self._f: IO[str] | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o666)  # other users' sweeps must be able to take it too
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv), "what": self.what,
                            "since": time.time()}))
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
