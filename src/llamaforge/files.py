"""File helpers shared across llamaforge: streaming sha256, atomic writes (JSON, text, any file a
library writes: :func:`atomic_path`), the one line for a failed write (:func:`write_problem`) or an unusable folder (:func:`folder_problem`),
advisory locks."""

from __future__ import annotations

import contextlib
import errno
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
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling of ``path`` (same suffix) to write; renamed onto ``path`` when the block ends
    normally, removed when it fails (a full disk leaves no half-written file behind)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` (UTF-8) into ``path`` through :func:`atomic_path`, flushed to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_problem(path: Path, e: OSError) -> tuple[str, str]:
    """(message, fix) for a write to ``path`` that failed with ``e``: one line, the cause first."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"cannot write {path}: the disk is full ({e.strerror})",
                "free disk space, or write somewhere else; nothing half-written was left behind")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {e.strerror}", "pick a folder you can write to"
    if e.errno == errno.EISDIR:
        return f"cannot write {path}: it is a folder", "give a file name"
    return f"cannot write {path}: {e.strerror or e}", "pick another place to write to"


#: a folder to write into on a filesystem with less free space than this is refused up front
MIN_FREE = 1 << 20


def folder_problem(d: Path, *, need_free: bool = True) -> tuple[str, str] | None:
    """Why ``d`` cannot be a folder to write into (it is created when missing), as (what is wrong, said after
    its name, e.g. ``": /x is not writable (read-only or not yours)"``; the fix), or None when it can be: not a
    file, not under a file, in a folder this user may write to, on a filesystem with at least :data:`MIN_FREE`
    free when ``need_free`` (a disk that fills up while writing still shows then, as one line; a cache that is
    mostly read, such as the builds, stays usable on a full disk)."""
    if d.exists() and not d.is_dir():
        return " is a file, not a folder", "name a folder (it is created if missing)"
    near = d
    while not near.exists() and near != near.parent:
        near = near.parent
    if not near.is_dir():
        return f": {near} is a file, not a folder", "name a folder that is not under a file"
    if not os.access(near, os.W_OK | os.X_OK):
        return f": {near} is not writable (read-only or not yours)", "name a folder you may write to"
    st = os.statvfs(near)
    if need_free and st.f_bavail * st.f_frsize < MIN_FREE:
        return (f": the filesystem of {near} is full ({st.f_bavail * st.f_frsize // 1024} KiB free)",
                "free space there, or name a folder on another filesystem")
    return None


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
