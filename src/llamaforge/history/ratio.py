"""Two backends side by side over time: per commit measured on both, B/A of their start-level centres with
the judge's interval and verdict (:func:`llamaforge.judge.judge`), and one sentence from first to last."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from ..backends import rank as backend_rank
from ..judge import judge
from ..judge.wording import ratio_text
from .model import RatioRow, RatioSeries, Series


def _rank(backend: str) -> int:
    """Which backend is the numerator: the first of a pair in the backends' order (``rank``: "cuda/vulkan 1.6×"
    is the gap)."""
    return backend_rank(backend)


def ratio_series(a: Series, b: Series) -> RatioSeries:
    """``a``'s level over ``b``'s at every commit both measured (in ``a``'s order)."""
    rows = []
    for la in a.measured():
        lb = b.level(la.sha)
        if lb is None or lb.status != "ok" or not lb.starts:
            continue
        j = judge(lb.starts_of(), la.starts_of(), min_effect=a.min_effect)
        if j is None:
            continue
        rows.append(RatioRow(la.sha, la.label, j.ratio, j.low, j.high, j.verdict, j.b.k, j.a.k,
                             "95 % CI" if not j.small else f"assumed spread ({j.interval_text()})"))
    return RatioSeries(a.key, b.key, rows, _sentence(a, b, rows))


def _sentence(a: Series, b: Series, rows: Sequence[RatioRow]) -> str:
    name = f"{a.key.backend}/{b.key.backend} {a.key.metric} at {a.key.point} ({a.key.model}, {a.key.machine})"
    if not rows:
        return f"{name}: no commit measured on both"
    first, last = rows[0], rows[-1]

    def fmt(r: RatioRow) -> str:
        return f"{ratio_text(r.ratio, r.low, r.high, num=a.key.backend, den=b.key.backend)} at {r.label}"

    if first is last:
        return f"{name}: {fmt(first)} (one commit)"
    return f"{name}: {fmt(first)} → {fmt(last)} over {len(rows)} commits"


def ratios(series: Sequence[Series]) -> list[RatioSeries]:
    """Every pair of backends whose series share machine, model, point, metric and setup."""
    groups: dict[tuple, list[Series]] = {}
    for s in series:
        groups.setdefault(s.key.pair_key(), []).append(s)
    out = []
    for group in groups.values():
        for x, y in combinations(sorted(group, key=lambda s: (_rank(s.key.backend), s.key.backend)), 2):
            if x.key.backend != y.key.backend:
                out.append(ratio_series(x, y))
    return out
