"""A stored compare run in the terminal: the table of both sides' estimates, B/A with its interval, p and the
verdict, and how the verdicts were reached (the same words as the report's lead, :mod:`llamaforge.report.kinds.compare`,
through :mod:`llamaforge.findings.comparison`)."""

from __future__ import annotations

from rich.table import Table

from ..console import console, esc, notice
from ..findings.comparison import ci_header, compare_note, fmt_cmp, fmt_side
from ..records import CompareSection, CompareSide, CompareSummary
from ..store import Run, Store

_VERDICT = {"better": "[green]better[/]", "worse": "[red]worse[/]", "same": "same",
            "inconclusive": "[yellow]inconclusive[/]"}


def compare_table(run: Run) -> Table:
    """The rich table of a stored compare run (medians with 95 % CI and n, ratio B/A with the interval its verdict
    used, p, mark)."""
    c = run.plan.compare or CompareSection()
    a, b = c.a or CompareSide(), c.b or CompareSide()
    t = Table(title=esc(f"compare {run.id}: A = {a.text()} vs B = {b.text()}"))
    for col in ("ncmoe", "metric", "A t/s (starts×req)", "B t/s (starts×req)",
                ci_header(run.summary_as(CompareSummary)), "p (starts)", "verdict"):
        t.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for r in run.summary_as(CompareSummary).comparisons:
        ratio, p, verdict = fmt_cmp(r["comparison"])
        t.add_row(str(r["ncmoe"]) + ("" if r["ngl"] == -1 else f" ngl={r['ngl']}"), esc(r["metric"]), fmt_side(r["A"]),
                  fmt_side(r["B"]), ratio, p, _VERDICT[verdict])
    return t


def print_compare(store: Store, run_id: str) -> None:
    run = store.get_run(run_id, "compare")
    console.print(compare_table(run))
    s = run.summary_as(CompareSummary)
    console.print(esc(compare_note(s)))
    if s.failed:
        notice(f"{s.failed} of {s.points} measured points failed (see `llamaforge runs {run.id} --failed`)")
