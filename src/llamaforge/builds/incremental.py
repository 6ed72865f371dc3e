"""Incremental builds for bisection: ONE mirror worktree and ONE CMake build tree per backend.

They live under ``<build root>/bisect-<backend>/`` (``tree/`` and ``build/``) and are reused by every
bisect session of that backend (a lock in :mod:`llamaforge.bisect.session` serialises sessions).
Each probe moves the worktree to its commit through the sources API
(:func:`llamaforge.sources.moved_tree`: ``checkout --detach --force``, so git rewrites only the
files that differ and ninja recompiles only those, plus the build-info object and the links) and
builds with ``build(..., tree=..., build_dir=<that dir>)``, which publishes the binaries under the
commit's key directory: a later probe of the same commit is a cache hit. The first build of a fresh
session dir is cold (CMake configure and every object from scratch, fed by ccache when it has the files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Pin
from ..sources import SourceTree, moved_tree
from .builder import BuildOptions, build


class IncrementalBuilder:
    """One worktree + one build tree per backend, moved from commit to commit (see the module doc)."""

    def __init__(self, paths: Any, backend: str, opts: BuildOptions | None = None, *, root: Path | None = None) -> None:
        self.paths = paths
        self.backend = backend
        self.opts = opts or BuildOptions()
        self.root = root or Path(paths.builds) / f"bisect-{backend}"
        self.tree_dir = self.root / "tree"
        self.build_dir = self.root / "build"
        self.cold_at_start = not (self.build_dir / "out" / "CMakeCache.txt").exists()

    def tree(self, sha: str) -> SourceTree:
        return moved_tree(self.paths, sha, self.tree_dir, origin="bisect")

    def __call__(self, sha: str) -> Any:
        """Build ``sha`` (or reuse its published build); raises BuildError when it does not build."""
        t = self.tree(sha)
        pin = Pin(name=sha[:9], commit=sha, sources=())
        return build(self.paths, pin, self.backend, self.opts, tree=t, build_dir=self.build_dir)


def build_facts(b: Any, started: float) -> tuple[bool, bool | None, float | None]:
    """(cached, incremental, compile seconds) of a Build returned by ``build()`` at ``started``."""
    m = b.manifest or {}
    cached = float(m.get("built_at") or 0) < started
    t = m.get("timings") or {}
    secs = (t.get("configure_s") or 0) + (t.get("build_s") or 0) if t else None
    return cached, (None if cached else bool(t.get("incremental"))), secs
