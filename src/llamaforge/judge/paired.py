"""A factor measured inside each start: two variants alternated in one server start (or one llama-bench process).

Alternating two request variants inside one start (the server's default sampler chain and a greedy one;
llama-bench's tg at two depths in one process) cancels what the start shares: memory placement, thread
pinning, clocks, compiled pipelines. Their ratio inside a start is therefore much tighter than either
variant's level across starts. The unit of replication stays the start:

* per start, the ratio of the two variants' **medians** (B / A);
* over starts, those ratios are estimated the way a point's level is (:func:`.estimate.estimate`): the
  geometric mean, a 95 % t-interval with K ≥ 3 starts, the range of the two with K = 2, the one value
  (spread unknown) with K = 1.

Because the centre is a geometric mean of per-start ratios, factors measured on the same starts multiply
exactly: (B/A) · (C/B) = C/A, which is what lets :mod:`llamaforge.report.engine_gap` split a ratio into
factors whose product is the whole.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .estimate import Estimate, estimate
from .starts import Starts


def start_ratios(a: Sequence[Sequence[float | None]], b: Sequence[Sequence[float | None]]) -> list[float]:
    """Per start, median(B) / median(A) over its positive values; starts where either side has none are skipped.
    ``a`` and ``b`` are aligned by start (``a[k]`` and ``b[k]`` come from the same start)."""
    if len(a) != len(b):
        raise ValueError(f"paired variants need the same starts ({len(a)} vs {len(b)})")
    out = []
    for ga, gb in zip(a, b, strict=True):
        xa = [float(v) for v in ga if v is not None and float(v) > 0]
        xb = [float(v) for v in gb if v is not None and float(v) > 0]
        if xa and xb:
            out.append(statistics.median(xb) / statistics.median(xa))
    return out


def paired(a: Sequence[Sequence[float | None]], b: Sequence[Sequence[float | None]]) -> Estimate | None:
    """The factor B/A measured inside each start, estimated over starts (``None`` without a start that has both)."""
    return estimate(Starts.of_centres(start_ratios(a, b)))


__all__ = ["paired", "start_ratios"]
