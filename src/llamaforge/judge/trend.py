"""Which way a series goes with offload, and which points break that trend — one rule, judged by starts.

Used by the report's Anomalies table and by the adaptive sweep (its refinement and conclusions), so
the two can never disagree on what an anomaly is. A series is a mapping from the offload step ``x``
(a larger x means more of the model on the host) to the point's :class:`~llamaforge.judge.Starts`.

* :func:`direction` — ``RISES`` / ``FALLS`` / ``FLAT``, from the two ends (the widest span there is):
  one way only where the judge says the ends *differ*; same or inconclusive ends make the series flat,
  so noise can never pick a side.
* :func:`reference_neighbours` — the measured neighbours the trend says are at least as fast: the one
  with less offload on a falling series, the one with more on a rising series, both on a flat one.
* :func:`breaks` — points faster than every reference neighbour, each verdict "differs" after the
  family of all those comparisons is controlled (Benjamini–Hochberg by default: an anomaly search is a
  screen over many neighbour pairs, where a false discovery rate of 5 % keeps the power that Holm's
  family-wise bound would spend; ``method="holm"`` for the strict one): an anomaly is a fact, not one
  of the comparisons that α = 0.05 lets through by chance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .adjusted import selected_intervals
from .family import control
from .spread import Spread
from .starts import Starts
from .verdict import DIFFERS, Judgement, judge

FALLS, FLAT, RISES = -1, 0, 1
MIN_EFFECT = 0.05


def direction(series: Mapping[int, Starts], *, min_effect: float = MIN_EFFECT, prior: Spread | None = None) -> int:
    """The series' direction from its two ends (see the module doc)."""
    xs = sorted(x for x, s in series.items() if s)
    if len(xs) < 2:
        return FLAT
    j = judge(series[xs[0]], series[xs[-1]], min_effect=min_effect, prior_a=prior, prior_b=prior)
    if j is None or j.verdict != DIFFERS:
        return FLAT
    return RISES if j.ratio > 1 else FALLS


def reference_neighbours(xs: Sequence[int], x: int, trend: int) -> list[int]:
    """The measured neighbours of ``x`` (``xs`` sorted) that ``trend`` says are at least as fast
    (``[]`` where one is missing on a flat series: an end of a flat series breaks nothing)."""
    i = xs.index(x)
    lower = [xs[i - 1]] if i > 0 else []
    upper = [xs[i + 1]] if i + 1 < len(xs) else []
    if trend == FALLS:
        return lower
    if trend == RISES:
        return upper
    return lower + upper if lower and upper else []


@dataclass(frozen=True)
class Break:
    """``x`` is faster than its reference ``neighbour`` (``judgement``: the point over the neighbour)."""

    series: str
    metric: str
    x: int
    neighbour: int
    judgement: Judgement


@dataclass(frozen=True)
class SeriesInput:
    name: str
    metric: str
    points: Mapping[int, Starts]
    prior: Spread | None = None
    trend: int | None = None      # None: :func:`direction`


def breaks(inputs: Sequence[SeriesInput], *, min_effect: float = MIN_EFFECT,
           method: str | None = "bh") -> list[Break]:
    """Every point of every input that is faster than each of its reference neighbours, with the whole
    family of neighbour comparisons controlled by ``method``; for a point with two references the one
    it beats least is reported. ``method=None``: each comparison alone, uncontrolled (the adaptive sweep's
    *suspects*, which only decide where to measure next, never a conclusion)."""
    tests: list[tuple[SeriesInput, int, int, Judgement | None]] = []
    for si in inputs:
        pts = {x: s for x, s in si.points.items() if s}
        xs = sorted(pts)
        trend = direction(pts, min_effect=min_effect, prior=si.prior) if si.trend is None else si.trend
        for x in xs:
            for nb in reference_neighbours(xs, x, trend):
                j = judge(pts[nb], pts[x], min_effect=min_effect, prior_a=si.prior, prior_b=si.prior)
                tests.append((si, x, nb, j))
    controlled = control([t[3] for t in tests], method=method, direction=1) if method else [t[3] for t in tests]
    if method:    # each anomaly's interval at the level the screen kept it at (not the 95 % one it was picked by)
        present = [t[3] for t in tests if t[3] is not None]
        if present:
            p_faster = [1.0 if j.ratio <= 1 else j.p_differs for j in present]
            controlled = selected_intervals(controlled, p_faster,
                                            [j is not None and j.verdict == DIFFERS and j.ratio > 1 for j in controlled],
                                            method=method, alpha=present[0].alpha)
    by_point: dict[tuple[str, str, int], list[tuple[int, Judgement | None]]] = {}
    for (si, x, nb, _j), j in zip(tests, controlled, strict=True):
        by_point.setdefault((si.name, si.metric, x), []).append((nb, j))
    out = []
    for (name, metric, x), refs in by_point.items():
        if all(j is not None and j.verdict == DIFFERS and j.ratio > 1 for _nb, j in refs):
            nb, j = min(refs, key=lambda r: r[1].ratio)   # type: ignore[union-attr]
            out.append(Break(name, metric, x, nb, j))     # type: ignore[arg-type]
    return sorted(out, key=lambda b: (b.series, b.metric, b.x))
