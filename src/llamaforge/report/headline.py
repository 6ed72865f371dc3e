"""The headline a user acts on: the first table of a sweep report.

Per pair of series (earlier over later in the fixed backend order: CUDA/Vulkan) and metric, in words:

* the **direction**, from the judge's verdicts only (Holm over every point of every pair and metric): "CUDA
  generates faster than Vulkan at 13/15 points (judged differs), every start faster at 12; same within ±5 % at
  1, not proven either way at 1" — a point whose verdict is *same* or *inconclusive* is never counted for a
  direction, and without a "differs" there is no direction at all;
* the **magnitude**: the range of the ratio over the points, and at the first common point the ratio
  with its 95 % CI (or, below 3 starts a side, the range of start ratios — never a CI);
* the **between-start spread** of a series where it is above 10 % (pooled over the series' points),
  because then no single start says much.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..findings.prose import NOT_PROVEN, same_within
from ..judge import DIFFERS, INCONCLUSIVE, SAME, assumptions_note, judge
from ..judge.adjusted import controlled
from ..judge.wording import span_text
from ..metrics import LABELS
from .data import ReportData, Row, Series
from .format import fmt_judged, precision_of
from .sections import Section, Table

SPREAD_NOTE = 0.10
_VERB = {"tg": "generates", "pp": "processes prompts"}


def _pairs(data: ReportData) -> list[tuple[Series, Series]]:
    return [(a, b) for i, a in enumerate(data.series) for b in data.series[i + 1:]]


def _common(a: Series, b: Series, metric: str) -> list[tuple[Row, Row]]:
    bx = {(r.offload, r.other): r for r in b.ok_rows if r.starts(metric)}
    return [(r, bx[(r.offload, r.other)]) for r in sorted(a.ok_rows, key=lambda r: (r.offload, r.other))
            if r.starts(metric) and (r.offload, r.other) in bx]


def _judged(data: ReportData, min_effect: float) -> list[tuple[Series, Series, str, list]]:
    """Per (pair, metric): [(row a, row b, judgement a over b)], the whole headline one family (Holm)."""
    raw = []
    for a, b in _pairs(data):
        for metric in ("tg", "pp"):
            rows = _common(a, b, metric)
            js = [judge(rb.starts(metric), ra.starts(metric), min_effect=min_effect, prior_a=b.prior(metric),
                        prior_b=a.prior(metric)) for ra, rb in rows]
            raw.append((a, b, metric, rows, js))
    flat = iter(controlled([j for *_x, js in raw for j in js]))
    return [(a, b, metric, [(ra, rb, next(flat)) for (ra, rb), _j in zip(rows, js, strict=True)])
            for a, b, metric, rows, js in raw]


def _direction_text(a: Series, b: Series, metric: str, cells: list) -> tuple[str, str]:
    """The direction in words from the verdicts' classes (module doc), and the verdicts counted."""
    n = len(cells)
    up = [c for c in cells if c[2].verdict == DIFFERS and c[2].ratio > 1]
    down = [c for c in cells if c[2].verdict == DIFFERS and c[2].ratio < 1]
    lead, other, held, against = (a, b, up, down) if len(up) >= len(down) else (b, a, down, up)
    verdicts = [c[2].verdict for c in cells]
    rest = [f"{same_within(cells[0][2].min_effect)} at {verdicts.count(SAME)}" if SAME in verdicts else "",
            f"{NOT_PROVEN} at {verdicts.count(INCONCLUSIVE)}" if INCONCLUSIVE in verdicts else ""]
    if not held:
        text = f"no point judged faster ({n} point{'s' if n != 1 else ''}: " + ", ".join(x for x in rest if x) + ")"
    else:
        # "every start" says something only where each side has several starts: one start each always "separates"
        several = sum(1 for c in held if min(c[2].a.k, c[2].b.k) >= 2)
        every = sum(1 for c in held if c[2].separated and min(c[2].a.k, c[2].b.k) >= 2)
        text = (f"{lead.name} {_VERB[metric]} faster than {other.name} at {len(held)}/{n} points (judged differs)"
                + (f", every start faster at {every}" if every else "")
                + (f" (of {several} with ≥ 2 starts a side)" if every and several < len(held) else "")
                + (f"; {other.name} faster at {len(against)}" if against else "")
                + "".join(f"; {x}" for x in rest if x))
    counts = ", ".join(f"{k} {v}" for k, v in ((verdicts.count(DIFFERS), DIFFERS), (verdicts.count(SAME), SAME),
                                                (verdicts.count(INCONCLUSIVE), INCONCLUSIVE)) if k)
    return text, counts


def _magnitude_text(data: ReportData, a: Series, b: Series, cells: list) -> str:
    """``CPU 112–118× faster over the points; at ncmoe 0: CPU 115× faster [80, 161] differs`` (the ratio
    a/b, said as :mod:`llamaforge.judge.wording` says it)."""
    ratios = sorted(c[2].ratio for c in cells)
    ra, rb, j = cells[0]
    where = f"{data.axis} {ra.x_label}"
    span = f"{span_text(ratios[0], ratios[-1], num=a.name, den=b.name)} over the points; " if len(ratios) > 1 else ""
    return span + f"at {where}: {fmt_judged(j, a.name, b.name, (ra, rb), precision_of(data))}"


def _spread_notes(data: ReportData) -> list[str]:
    out = []
    for s in data.series:
        for metric in ("tg", "pp"):
            pr = s.prior(metric)
            if not pr.assumed and pr.sd > SPREAD_NOTE:
                out.append(f"{s.name} {LABELS[metric]}: starts of one point vary by {pr.sd:.0%} (SD of log start "
                           f"medians, {pr.df} df): a single server start says little; quote intervals, not starts.")
    return out


def first_screen(sections: Sequence[Section]) -> list[str]:
    """What a command that just measured prints of its report (``inv demo``): one line per headline row —
    ``Vulkan / CPU generation t/s: CPU generates faster than Vulkan at 3/3 points (3 differs); CPU 107–113×
    faster over the points; …`` — and one per sweet spot, in the report's own words."""
    out = []
    for sec in sections:
        for t in sec.tables if sec.id in ("headline", "sweet-spots") else ():
            for row in t.rows:
                if sec.id == "headline":
                    out.append(f"{row[0]} {row[1]}: {row[2]} ({row[3]}); {row[4]}")
                else:
                    out.append(f"sweet spot, {row[0]}: {row[2]}")
    return out


def headline_section(data: ReportData, min_effect: float) -> Section | None:
    """``None`` for a run with fewer than two series (nothing to compare)."""
    if len(data.series) < 2:
        return None
    judged = _judged(data, min_effect)
    n = sum(len(c) for *_x, c in judged)
    t = Table(["series", "metric", "direction (how often it held)", "verdicts", "magnitude (ratio first/second)"],
              title="Headline",
              note=(f"Judged on server starts: differs = the ratio's interval lies beyond ±{min_effect:.0%}, same = "
                    f"within it, inconclusive ({NOT_PROVEN}) = it spans both; Holm's method over this table's "
                    f"comparisons (Holm, {n} comparisons), each interval shown the one its verdict used (at the "
                    "level Holm tested it at: wider than a single 95 % CI). A direction is claimed only where the "
                    "verdict is differs. "
                    "A verdict marked * has fewer than 3 starts on a side: no CI, it assumes a between-start spread."))
    for a, b, metric, cells in judged:
        if not cells:
            continue
        direction, counts = _direction_text(a, b, metric, cells)
        t.rows.append([f"{a.name} / {b.name}", LABELS[metric], direction, counts, _magnitude_text(data, a, b, cells)])
        t.data.append({"num": a.name, "den": b.name, "metric": metric, "points": len(cells),
                       "judgements": [{"x": ra.x, **j.to_dict()} for ra, _rb, j in cells]})
    if not t.rows:
        return None
    sec = Section("headline", "Headline", tables=[t])
    if note := assumptions_note([j for *_x, cells in judged for *_r, j in cells]):
        sec.notes.append(f"* {note}.")
    sec.notes += _spread_notes(data)
    return sec
