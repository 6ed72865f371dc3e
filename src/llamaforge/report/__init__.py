"""Reports: a pure function of stored data (no measuring).

``write_report(store, run_id, out_dir)`` loads the run (:mod:`.data`), finds sweet spots, anomalies
and the roofline (:mod:`.analysis`), lays the content out as renderer-neutral sections
(:mod:`.contents`), draws PNGs (:mod:`.plots`) and renders them twice: one self-contained HTML file
(:mod:`.html`) and a Markdown file for a README or an issue (:mod:`.markdown`). What a run kind
adds (a compare's A/B verdicts, a bisection's first bad commit and plot) comes from :mod:`.kinds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..files import write_problem
from ..store import Store
from . import html, kinds, markdown
from .adaptive import adaptive_section
from .contents import build_sections
from .data import ReportData, ReportError, load
from .headline import first_screen
from .plots import make_plots
from .sections import Section
from .sessions import load_sessions, sessions_section

__all__ = ["ReportError", "ReportPaths", "write_report", "build_report"]


@dataclass(frozen=True)
class ReportPaths:
    md: Path
    html: Path
    pngs: list[Path]
    summary: list[str] = field(default_factory=list)   # the headline and sweet spots in lines (headline.first_screen)


def build_report(store: Store, run_id: str, out_dir: Path, *, min_effect: float = 0.05,
                 sessions: Sequence[str] = ()) -> tuple[ReportData, list[Section]]:
    """Load the run, draw its plots into ``out_dir`` and return the data and the sections; with ``sessions``
    (other runs of the same plan) a cross-session section follows the headline (:mod:`.sessions`)."""
    if not 0 <= min_effect < 1:
        raise ReportError(f"--min-effect {min_effect} is out of range", "give a fraction such as 0.05 (5 %)")
    data = load(store, run_id)
    others = load_sessions(store, [run_id, *sessions])[1:] if sessions else []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"cannot create report folder {out_dir}: {e.strerror}", "pick another --out") from e
    plots = make_plots(data, out_dir) + kinds.plots(store, data.run, out_dir)
    sections = build_sections(data, plots, min_effect=min_effect)
    after_summary = next((i + 1 for i, s in enumerate(sections) if s.id == "summary"), 1)
    adaptive = adaptive_section(data)
    if adaptive is not None:   # right after the summary
        sections.insert(after_summary, adaptive)
    if others:                 # right after the headline
        sections.insert(1 if sections and sections[0].id == "headline" else 0, sessions_section(store, [data, *others], min_effect))
    return data, sections


def write_report(store: Store, run_id: str, out_dir: Path, *, min_effect: float = 0.05,
                 sessions: Sequence[str] = ()) -> ReportPaths:
    """Write ``report.md``, ``report.html`` and the PNGs for one run into ``out_dir``.

    Raises StoreError for an unknown run and ReportError for a run that cannot be reported.
    """
    out_dir = Path(out_dir)
    try:   # every file goes through a temporary one: a full disk leaves none half-written
        data, sections = build_report(store, run_id, out_dir, min_effect=min_effect, sessions=sessions)
        md = markdown.write(data, sections, out_dir / "report.md", lead=kinds.lead(store, data.run))
        page = html.write(data, sections, out_dir / "report.html")
    except OSError as e:
        raise ReportError(*write_problem(out_dir, e)) from None
    pngs = [Path(p.path) for s in sections for p in s.plots]
    return ReportPaths(md=md, html=page, pngs=pngs, summary=first_screen(sections))
