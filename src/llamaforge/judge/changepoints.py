"""Steps in a series of commits, judged at the start level: a segmentation proposes, the judge confirms.

A history is a sequence of commits, each measured in K server starts. A **step** is a place where the
level changes and stays changed. Two stages:

1. **Propose** (optimal partitioning): the segmentation of the commits that minimises the squared
   deviations of each commit's *median* log start centre from its segment's mean plus a penalty per
   boundary (``2·σ²·ln n``, σ² the variance of a commit's median — from the between-start variance
   measured *inside* commits — and n the number of commits). Medians keep a commit whose starts were
   partly disturbed (a load spike on the machine) from pulling a boundary onto the wrong side of it.
   Commits are never split: a segment is a run of whole commits.
2. **Confirm** (the judge): each boundary compares the starts of the segment before it with those of
   the segment after it (:func:`.verdict.judge`: Welch on start centres, the minimum effect as margin).
   Its p-value is multiplied by the number of places a boundary could have been put (n − 1: the position
   was chosen by looking at the data), then Holm's step-down runs over the boundaries of the series. The
   weakest boundary that does not survive is moved one commit either way if that makes it differ (a
   commit with disturbed starts may sit on the wrong side), else removed — its segments merge — and the
   rest are judged again, until every boundary left is a confirmed "differs".

What a segment's starts mean: all starts of the commits between two steps, pooled — the segmentation's
hypothesis is that those commits perform alike. A boundary between two measured commits with unmeasured
commits between them says only that the change lies in that gap (bisect it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .family import holm_reject
from .starts import Starts
from .verdict import ALPHA, DIFFERS, MIN_EFFECT, Judgement, judge

#: the penalty per boundary, in units of σ²·ln N (BIC-like; stage 2 is the real guard)
PENALTY = 2.0


@dataclass(frozen=True)
class Boundary:
    """A confirmed change before commit ``index`` (0-based in the series given)."""

    index: int
    judgement: Judgement           # segment after vs segment before
    p: float                       # the judge's p of "differs by more than the minimum effect"
    p_adjusted: float              # × (n − 1) positions, then Holm over the boundaries left
    segment_before: tuple[int, int]   # [first, last] commit index of each segment
    segment_after: tuple[int, int]
    adjusted: str


def _within_var(xs: Sequence[np.ndarray]) -> float | None:
    """Pooled variance of the log start centres inside commits (``None`` without a commit of K ≥ 2)."""
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in xs if len(x) >= 2)
    df = sum(len(x) - 1 for x in xs if len(x) >= 2)
    return ss / df if df else None


def _successive_var(xs: Sequence[np.ndarray]) -> float:
    """Without replicates: half the median squared successive difference of commit means (robust)."""
    means = np.array([x.mean() for x in xs])
    d = np.diff(means)
    return float(np.median(d ** 2) / 2) if len(d) else 0.0


def propose(xs: Sequence[np.ndarray], sigma2: float) -> list[int]:
    """Boundaries (indices of the first commit of each segment after the first) minimising the squared
    deviations of the commits' median log start centres from their segment's mean + penalty·(boundaries);
    ``sigma2``: the variance of one commit's median (see the module doc)."""
    m = np.array([float(np.median(x)) for x in xs])
    n = len(m)
    s1 = np.concatenate([[0.0], np.cumsum(m)])
    s2 = np.concatenate([[0.0], np.cumsum(m ** 2)])

    def cost(i: int, j: int) -> float:            # commits i..j-1
        return float(s2[j] - s2[i] - (s1[j] - s1[i]) ** 2 / (j - i))

    beta = PENALTY * max(sigma2, 1e-12) * math.log(max(n, 2))
    best = [0.0] + [math.inf] * n
    prev = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            v = best[i] + cost(i, j) + (beta if i else 0.0)
            if v < best[j]:
                best[j], prev[j] = v, i
    out, j = [], n
    while j > 0:
        if prev[j]:
            out.append(prev[j])
        j = prev[j]
    return sorted(out)


def median_var(xs: Sequence[np.ndarray]) -> float:
    """The variance of one commit's median log start centre: π/2 · σ²/k with σ² the between-start variance
    inside commits and k the median starts per commit (without replicates: from successive differences)."""
    within = _within_var(xs)
    if within is None:
        return _successive_var(xs)
    k = float(np.median([len(x) for x in xs]))
    return math.pi / 2 * within / max(k, 1.0)


def _pool(levels: Sequence[Starts], lo: int, hi: int) -> Starts:
    return Starts(tuple(g for s in levels[lo:hi] for g in s.groups))


def _judge_all(levels: Sequence[Starts], cps: Sequence[int], min_effect: float, alpha: float
               ) -> list[tuple[int, Judgement, float, tuple[int, int], tuple[int, int]]]:
    edges = [0, *cps, len(levels)]
    out = []
    for k, c in enumerate(cps):
        lo, hi = edges[k], edges[k + 2]
        j = judge(_pool(levels, lo, c), _pool(levels, c, hi), min_effect=min_effect, alpha=alpha)
        if j is not None:
            p = 1.0 if j.small else j.p_differs
            out.append((c, j, p, (lo, c - 1), (c, hi - 1)))
    return out


def _shifted(levels: Sequence[Starts], cps: list[int], k: int, min_effect: float, alpha: float,
             tried: set[tuple[int, ...]]) -> list[int] | None:
    """``cps`` with boundary ``k`` moved one commit either way (to where the judge's p is smallest), if that
    boundary then differs and the set was not tried before; else ``None``."""
    edges = [0, *cps, len(levels)]
    best: tuple[float, list[int]] | None = None
    for d in (-1, 1):
        c = cps[k] + d
        if not edges[k] < c < edges[k + 2]:
            continue
        moved = [*cps[:k], c, *cps[k + 1:]]
        if tuple(moved) in tried:
            continue
        j = judge(_pool(levels, edges[k], c), _pool(levels, c, edges[k + 2]), min_effect=min_effect, alpha=alpha)
        if j is not None and j.verdict == DIFFERS and not j.small and (best is None or j.p_differs < best[0]):
            best = (j.p_differs, moved)
    return best[1] if best else None


def confirm(levels: Sequence[Starts], cps: Sequence[int], *, min_effect: float = MIN_EFFECT,
            alpha: float = ALPHA) -> list[Boundary]:
    """Stage 2 of the module doc: the boundaries of ``cps`` that survive. The weakest failing one is first
    moved one commit either way (a commit whose starts were disturbed can sit on the wrong side of it), and
    removed when that does not make it differ."""
    positions = max(len(levels) - 1, 1)
    cps = list(cps)
    tried = {tuple(cps)}
    while cps:
        rows = _judge_all(levels, cps, min_effect, alpha)
        padj = [min(1.0, r[2] * positions) for r in rows]
        keep = holm_reject(padj, alpha)
        ok = [r[1].verdict == DIFFERS and kept for r, kept in zip(rows, keep, strict=True)]
        if rows and all(ok) and len(rows) == len(cps):
            m = len(rows)
            holm = _holm_adjusted(padj)
            note = f"p × {positions} positions, Holm over {m} step{'s' if m > 1 else ''}"
            return [Boundary(c, j, p, h, sb, sa, note) for (c, j, p, sb, sa), h in zip(rows, holm, strict=True)]
        if len(rows) != len(cps):            # a side without starts: drop that boundary
            cps = [r[0] for r in rows]
            continue
        weakest = max(range(len(rows)), key=lambda i: (not ok[i], padj[i]))
        moved = _shifted(levels, cps, weakest, min_effect, alpha, tried)
        if moved is not None:
            cps = moved
        else:
            cps.pop(weakest)
        tried.add(tuple(cps))
    return []


def _holm_adjusted(ps: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone)."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def candidates(levels: Sequence[Starts], found: Sequence[Boundary], *, min_effect: float = MIN_EFFECT,
               alpha: float = ALPHA) -> list[Boundary]:
    """The boundaries stage 1 proposes that stage 2 could not confirm from these levels (``found``: the
    confirmed ones), each judged segment against segment between its neighbours among all of them. A
    candidate is not a step: it is what a **fresh re-measurement** of its two commits may confirm
    (``llamaforge.bisect.confirm``) — selected by looking at these data, it is tested on new ones, so no
    positions penalty applies to that test. Its ``p_adjusted`` is 1 (not shown here)."""
    if len(levels) < 2:
        return []
    xs = [np.asarray(s.log_centres, dtype=float) for s in levels]
    have = {b.index for b in found}
    cps = sorted(set(propose(xs, median_var(xs))) | have)
    return [Boundary(c, j, p, 1.0, sb, sa, "proposed, not confirmed by these levels: re-measure to decide")
            for c, j, p, sb, sa in _judge_all(levels, cps, min_effect, alpha) if c not in have]


def steps(levels: Sequence[Starts], *, min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> list[Boundary]:
    """The confirmed steps of a series of commits given as their starts (commits without starts must be
    left out by the caller)."""
    if len(levels) < 2:
        return []
    xs = [np.asarray(s.log_centres, dtype=float) for s in levels]
    return confirm(levels, propose(xs, median_var(xs)), min_effect=min_effect, alpha=alpha)
