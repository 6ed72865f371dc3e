"""A sweep's report (and that of every kind without a module here) adds nothing to the common
sections: its Summary section is the verdict (:mod:`..tables`)."""

from __future__ import annotations

from pathlib import Path

from ...store import Run, Store
from ..plots import Plot


def lead(store: Store, run: Run) -> str | None:  # noqa: ARG001 - every kind has this interface
    return None


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:  # noqa: ARG001
    return []
