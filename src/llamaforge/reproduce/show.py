"""A re-run's verdict in the terminal: per point and metric, the first run, the re-run, their ratio with its
interval and the verdict, then the one-line verdict (the report shows the same verdicts,
:mod:`llamaforge.report.remeasurement`)."""

from __future__ import annotations

from rich.table import Table

from ..console import console, esc, info
from ..findings.reproduction import Verdict


def verdict_table(v: Verdict) -> Table:
    t = Table(title=esc(f"run {v.child} reproduces run {v.parent}?"))
    for col in ("point", "metric", "first run", "re-run", "re-run / first", "verdict"):
        t.add_column(col)
    for pc in v.points:
        for m in pc.metrics or [None]:
            j = m.judgement if m else None
            t.add_row(esc(pc.name), esc(m.metric) if m else "–", j.a.fmt() if j else "–", j.b.fmt() if j else "–",
                      esc(j.ratio_text("re-run", "first run")) if j else "–",
                      esc(j.verdict if j else pc.status) + (esc(f" ({pc.note})") if pc.note else ""))
    return t


def print_verdict(v: Verdict) -> None:
    """The table and the one-line verdict, with where the report is."""
    console.print(verdict_table(v))
    info(f"[bold]{esc(v.line())}[/]  " + esc(f"(report: `llamaforge report {v.child}`)"))
