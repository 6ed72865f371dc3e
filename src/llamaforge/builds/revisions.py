"""Builds of revisions of the user's llama.cpp checkout (``HEAD``, a branch, ``WORKTREE``): each from a mirror
worktree of the revision (:mod:`llamaforge.sources.localrepo`), so the checkout itself is never touched, and
cached by key like any pin's build (the same commit gives the same key, whatever it was called)."""

from __future__ import annotations

from collections.abc import Sequence

from ..backends import Backend
from ..config import Pin
from ..paths import Paths
from ..sources.localrepo import Checkout, source_tree
from .builder import BuildOptions, build
from .manifest import Build


def build_revisions(paths: Paths, co: Checkout, revs: Sequence[str], backends: Sequence[Backend | str],
                    opts: BuildOptions | None = None) -> list[Build]:
    """Build (or reuse) every backend for every revision; the build's pin name is the revision as given."""
    out = []
    for rev in revs:
        tree = source_tree(co, rev, paths)
        pin = Pin(name=rev, commit=tree.commit, sources=(co.spec,),
                  description=f"{rev} of {co.root}" + (" (uncommitted changes)" if tree.dirty else ""))
        out += [build(paths, pin, b, opts, tree=tree) for b in backends]
    return out
