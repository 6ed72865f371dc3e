"""A metric's values per server start, the judge's input: a registry metric's estimator applied to the
requests of each start (:mod:`llamaforge.metrics` declares the estimator; only the judge computes one).

``median`` keeps every request value (the judge takes each start's median, :class:`~.starts.Starts`); a
percentile (``p95``) gives one value per start, the 95th percentile of its requests, and only for a start
with at least :attr:`~llamaforge.metrics.Metric.min_requests` of them: the 95th percentile of four
requests is their maximum, and is never shown as a p95.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..metrics import Metric, launch_value

if TYPE_CHECKING:
    from ..store import Point


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` with linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of nothing")
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


#: the fewest values a 95th percentile is taken of (of fewer it is their maximum, and never shown as a p95)
MIN_FOR_P95 = 20


def tail_of(xs: Sequence[float], q: float = 0.95, least: int = MIN_FOR_P95) -> float | None:
    """The ``q`` percentile of ``xs`` (one request's inter-token gaps), or None when there are fewer than
    ``least`` of them."""
    vals = [float(v) for v in xs if v is not None and math.isfinite(float(v)) and float(v) >= 0]
    return percentile(vals, q) if len(vals) >= least else None


def start_values(m: Metric, requests: Sequence[float]) -> list[float]:
    """The judge's values of one start from its requests' values of ``m`` (``[]``: this start gives none)."""
    xs = [float(v) for v in requests if v is not None and math.isfinite(float(v)) and float(v) > 0]
    q = m.quantile
    if q is None:
        return xs
    if len(xs) < m.min_requests:
        return []
    return [percentile(xs, q)]


def groups(m: Metric, p: Point, test: str | None = None) -> list[list[float]]:
    """A point's values of ``m`` per server start, the judge's input (``Starts.of``); starts with too few
    requests for the estimator are left out (:func:`shortfall` says so). A start metric (``per="start"``)
    gives one value per start that ran to its end."""
    if not m.measures(p.engine):
        return []
    if m.per == "start":
        return [[float(v)] for r in p.launches if r.ok and (v := launch_value(r, m.field))]
    return [v for g in p.launch_groups(m.field, test) if (v := start_values(m, g))]


def shortfall(m: Metric, p: Point) -> str | None:
    """Why a point that measured ``m`` has no value for it (too few requests a start for the percentile),
    in words; None when it has values or measured nothing of it."""
    raw = [g for g in p.launch_groups(m.field) if g]
    if not raw or groups(m, p):
        return None
    most = max(len(g) for g in raw)
    return (
        f"{m.name}: a {m.estimator} needs ≥ {m.min_requests} requests a start; "
        f"this point has {len(raw)}×{most} (raise --repeats)"
    )
