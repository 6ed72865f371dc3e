"""A sweep's report: the common sections (:mod:`..contents`; its Summary section is the verdict) and two of
its own — the replication and drift section (:mod:`..replication`), and the line that says whether the sweep's
numbers survived a re-measurement. Every kind without a module here (``fitmap``, ``fleet`` …) uses this
module's ``lead`` and ``plots``, but only a sweep gets the sweep's sections."""

from __future__ import annotations

from pathlib import Path

from ...store import Run, Store
from ..data import ReportData
from ..plots import Plot
from ..replication import replication_section
from ..sections import Section


def lead(store: Store, run: Run) -> str | None:  # noqa: ARG001 - every kind has this interface
    return None


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:  # noqa: ARG001
    return []


def sections(data: ReportData) -> list[Section]:
    """The sweep's own sections, placed after the points tables: replication and drift."""
    return [replication_section(data)] if data.run.kind == "sweep" else []


def remeasure_line(data: ReportData) -> str | None:
    """Whether this sweep's numbers survived a re-measurement, said where the report starts: a run that no
    ``reproduce`` run measured again says so (its numbers rest on one session's server starts)."""
    if data.run.kind != "sweep" or any(v["child"] == data.run.id for v in data.reproductions):
        return None
    if any(v["parent"] == data.run.id for v in data.reproductions):
        return ("Re-measured: llamaforge reproduce measured points of this run again; the Reproduction section "
                "says which held and which did not.")
    return ("Not re-measured: no reproduce run of this run is in the store, so every number below rests on "
            "this run's own server starts (one session, one machine); sessions can differ by more than starts do. "
            f"'llamaforge reproduce {data.run.id}' measures it again and judges each point.")
