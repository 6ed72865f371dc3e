"""A small tmpfs for tests of full or read-only disks (not collected: no ``test_`` prefix)."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(tmp_path: Path, opts: str) -> Iterator[Path]:
    """A tmpfs mounted with ``opts`` (``size=64k``, ``ro,size=64k`` …) in a new folder of ``tmp_path``,
    unmounted afterwards; the test is skipped where it cannot be mounted (not root, no mount)."""
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    try:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)
