"""Finding a program and its version: what the toolchain probe of every backend uses."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
from dataclasses import dataclass

from .. import proc


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: str


def version_of(exe: str, args: tuple[str, ...] = ("--version",), pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str:
    try:
        r = proc.run([exe, *args], timeout=20)
    except OSError:
        return "unknown"
    m = re.search(pattern, r.output)
    return m.group(1) if m else (r.output.strip().splitlines() or ["unknown"])[0][:80]


@functools.cache
def find_exe(name: str, explicit: str | None = None, version_pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> Tool | None:
    path = explicit or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        return None
    return Tool(name, path, version_of(path, pattern=version_pattern))


def first_file(patterns: tuple[str, ...]) -> str | None:
    """The first file any of ``patterns`` (globs, in order) matches; None when none does."""
    for pat in patterns:
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    return None
