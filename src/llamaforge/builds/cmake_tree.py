"""A reused CMake build tree must build what its build key says.

CMake keeps every ``-D`` it was ever given in ``CMakeCache.txt``: a later configure that no longer passes a
variable does not unset it. A build tree reused across builds (a bisection's incremental tree, a history's,
``bisect-run``'s checkout) therefore keeps a define from an earlier build whose key had it — and compiles the
next commit with it, under a key that says otherwise. Seen here: ``CMAKE_CXX_FLAGS_RELEASE=-O1`` from one
experiment stayed in a bisection's tree for a day, so every probe was an ``-O1`` build (text 7.8 MB) judged
against ``-O3`` endpoints (9.5 MB) cached before it, 4–10 % faster; good probes came out between good and bad.

So each configure records its ``-D`` arguments in ``out/`` (:data:`STAMP`); before the next configure of that
tree, a different set (or no record: a tree of unknown history) removes the CMake cache, and CMake configures
afresh. The compiled objects stay: ninja rebuilds only what a changed command line touches, and ccache
serves what it has seen.

:func:`effective_flags` reads the compiler flags the cache ended with, for the manifest: what the binaries
were compiled with, not only what was asked for.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

#: the record of the last configure's ``-D`` arguments, in the CMake tree
STAMP = "llamaforge-configure.json"
#: the cache entries :func:`effective_flags` reports
FLAG_ENTRIES = ("CMAKE_BUILD_TYPE", "CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS")


def defines(argv: list[str]) -> list[str]:
    """The ``-D`` arguments of a configure command line, sorted."""
    return sorted(a for a in argv if a.startswith("-D"))


def reset_if_changed(out: Path, argv: list[str]) -> str | None:
    """Remove the CMake cache of ``out`` unless its last configure had exactly these ``-D`` arguments; returns
    why it was removed (None: kept, or no cache to keep). The record is removed too, until :func:`record`."""
    cache = out / "CMakeCache.txt"
    stamp = out / STAMP
    if not cache.exists():
        return None
    try:
        before = json.loads(stamp.read_text())["defines"]
    except (OSError, ValueError, KeyError, TypeError):
        before = None
    now = defines(argv)
    if before == now:
        return None
    if before is None:
        why = "the tree's earlier defines are not recorded"
    else:
        changed = sorted(set(before) ^ set(now))
        why = "its defines changed: " + " ".join(changed[:6]) + (" …" if len(changed) > 6 else "")
    cache.unlink()
    shutil.rmtree(out / "CMakeFiles", ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        stamp.unlink()
    return f"configured afresh ({why})"


def record(out: Path, argv: list[str]) -> None:
    """Record a successful configure's ``-D`` arguments (see the module doc)."""
    (out / STAMP).write_text(json.dumps({"defines": defines(argv)}, indent=1) + "\n")


def cache_value(cmake_cache: str, name: str) -> str | None:
    """One entry of a ``CMakeCache.txt`` text (``NAME:TYPE=value``), stripped; None when absent."""
    m = re.search(rf"^{re.escape(name)}:\w+=(.*)$", cmake_cache, re.M)
    return m.group(1).strip() if m else None


def effective_flags(cmake_cache: str) -> dict[str, str]:
    """The build type and the C/C++ flags the cache holds (the general ones and the build type's)."""
    build_type = cache_value(cmake_cache, "CMAKE_BUILD_TYPE") or ""
    names = [*FLAG_ENTRIES]
    if build_type:
        names += [f"CMAKE_C_FLAGS_{build_type.upper()}", f"CMAKE_CXX_FLAGS_{build_type.upper()}"]
    values = {n: cache_value(cmake_cache, n) for n in names}
    return {n: v for n, v in values.items() if v is not None}


__all__ = ["STAMP", "cache_value", "defines", "effective_flags", "record", "reset_if_changed"]
