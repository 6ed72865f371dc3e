"""What ``history.run`` and ``history.show`` print: per series its latest level, its steps, and the ratios."""

from __future__ import annotations

from rich.table import Table

from ..console import console, esc
from ..judge.estimate import signed_pct
from .model import History, Series, Step


def step_line(series: Series, st: Step) -> str:
    """``tg −14 % [−17, −11] between abc123 and def456 (2 commits between) → culprit 0123456 subject``."""
    gap = ("adjacent" if st.between == 0 else "releases" if st.between < 0
           else f"{st.between} commit{'s' if st.between != 1 else ''} between")
    where = f"{signed_pct(st.ratio)} % [{signed_pct(st.low)}, {signed_pct(st.high)}] between {st.before[:9]} and " \
            f"{st.after[:9]} ({gap}; {st.k_before} vs {st.k_after} starts, p_adj {st.p_adjusted:.2g})"
    if st.status == "refuted":
        r = st.remeasured or {}
        tail = (f" → REFUTED: the bisect re-measured both ends interleaved and they did not differ that way "
                f"({signed_pct(r.get('ratio') or 1.0)} % [{signed_pct(r.get('low') or 1.0)}, "
                f"{signed_pct(r.get('high') or 1.0)}], {r.get('verdict')}): drift or noise, not a change")
    elif st.culprit:
        tail = f" → {st.culprit[:9]} {st.culprit_subject or ''}".rstrip()
        if st.confirmation and st.confirmation.get("line"):
            tail += f" (confirmed: {st.confirmation['line']})"
    elif st.status == "undecided" and (st.confirmation or {}).get("line"):
        tail = f" → {st.confirmation['line']}: no commit named"
    elif st.status == "unconfirmed":
        tail = (f" → the change lies in {st.before[:9]}..{st.after[:9]}, not yet re-measured against each other "
                "(history.run --bisect confirms it)")
    elif st.bisect_status:
        tail = f" → bisect {st.bisect_status}" + (f": {st.bisect_note}" if st.bisect_note else "")
    else:
        tail = " (not located: run with --bisect)" if st.between > 0 else ""
    return f"{series.key.metric} {where}{tail}"


def print_history(h: History) -> None:
    if not h.series:
        console.print("no history stored yet: `llamaforge history.run --range A..B` measures one")
        return
    t = Table(title="performance history", show_lines=False)
    for col in ("machine", "backend", "model", "point", "metric", "commits", "latest", "steps"):
        t.add_column(col, justify="right" if col in ("commits", "steps") else "left")
    for s in h.series:
        lv = s.measured()
        est = lv[-1].estimate() if lv else None
        latest = f"{est.fmt()} {s.metric.unit} @ {lv[-1].label}" if est else "–"
        t.add_row(*(esc(x) for x in (s.key.machine, s.key.backend, s.key.model, s.key.point, s.key.metric,
                                     f"{len(lv)}/{len(s.levels)}", latest, str(len(s.steps)))))
    console.print(t)
    for s in h.series:
        for st in s.steps:
            console.print(esc(f"step: {s.key.backend} {s.key.point} " + step_line(s, st)))
    for r in h.ratios:
        console.print(esc(f"ratio: {r.summary}"))
