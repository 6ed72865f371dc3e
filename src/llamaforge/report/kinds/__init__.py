"""Per run kind, what its report adds to the common sections: a ``lead`` (Markdown above them), its own
``plots`` and its own ``sections`` — one module per kind, chosen by the run's kind, so commands only call
:func:`llamaforge.report.write_report`.

- :mod:`.sweep` (also every kind without a module of its own: ``fitmap``, ``fleet``, ...): a sweep's
  replication and drift section and whether it was re-measured;
- :mod:`.compare`: the A/B table with verdicts;
- :mod:`.bisect`: the first bad commit, endpoints, probes, and the metric over the commits.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ...store import Run, Store
from ..data import ReportData
from ..plots import Plot
from ..sections import Section
from . import bisect, compare, sweep

KINDS: dict[str, ModuleType] = {"sweep": sweep, "compare": compare, "bisect": bisect}


def module_for(kind: str) -> ModuleType:
    return KINDS.get(kind, sweep)


def lead(store: Store, run: Run) -> str | None:
    """Markdown that leads the report of ``run`` (None: the common sections say it all)."""
    return module_for(run.kind).lead(store, run)


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:
    """The run kind's own plots, drawn into ``out_dir``."""
    return module_for(run.kind).plots(store, run, out_dir)


def sections(data: ReportData) -> list[Section]:
    """The run kind's own sections, placed after the points tables."""
    return module_for(data.run.kind).sections(data)
