"""File helpers shared across llamaforge: streaming sha256, atomic JSON writes, advisory locks."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20


def sha256_hash(path: Path) -> hashlib._Hash:
    """The running sha256 of a file's bytes (callers may ``update`` it further, e.g. on resume)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h


def sha256_file(path: Path) -> str:
    return sha256_hash(path).hexdigest()


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON to a temporary sibling, fsync, rename: readers see the old or the new file, never half."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)   # disk full or interrupted: no half-written file stays behind
        raise


@contextlib.contextmanager
def file_lock(path: Path, waiting_notice: str | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; if another process holds it, say ``waiting_notice`` and wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting_notice:
                from .console import notice

                notice(waiting_notice)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
