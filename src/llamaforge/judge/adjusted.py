"""The interval a family's verdict used: each judgement's interval at the level Holm's method tested it at.

:func:`.family.control` keeps a ``differs`` (``same``) claim only where its p-value survives Holm's step-down over
the family; the verdict is then no longer the one the 95 % interval alone would give, so printing that interval
beside it ("1.31× [1.17, 1.46] inconclusive") shows a claim the verdict did not make. Holm tests the hypothesis
of rank r (smallest p first) at α/(m − r) while the step-down goes on, and every hypothesis from the first one it
keeps on at the level of that stop. Since a judgement's p-value is below a level exactly when its interval at
that level clears the margin (:func:`.verdict._decide`), the interval at the level Holm tested it at is the one
the verdict used:

* **differs** — at its level in the ``differs`` family: the interval clears ±E;
* **same** — at its level in the ``same`` family: the interval lies inside ±E;
* **inconclusive** — at the smaller of its two levels (the wider interval): it neither clears ±E nor lies inside.

:func:`controlled` is :func:`.family.control` with those intervals: every renderer that prints
:meth:`.verdict.Judgement.ratio_text` or ``fmt`` then prints the interval its verdict used, and
``adjusted`` names the adjustment (``Holm, 12 comparisons``). A judgement with fewer than 3 starts on a side
prints the range of its start ratios, not an interval, and is left as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from .estimate import t_quantile
from .family import METHODS, control
from .verdict import DIFFERS, SAME, Judgement

T = TypeVar("T")


def holm_levels(ps: Sequence[float], alpha: float) -> list[float]:
    """The level Holm's step-down tested each hypothesis at: α/(m − r) for rank r (smallest p first) while it
    rejects, and the level of the first hypothesis it keeps for that one and every later one."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [alpha / m] * m
    stop = None
    for rank, i in enumerate(order):
        level = alpha / (m - rank) if stop is None else stop
        out[i] = level
        if stop is None and ps[i] > level:
            stop = level
    return out


def verdict_levels(verdicts: Sequence[str], p_differs: Sequence[float], p_same: Sequence[float],
                   alpha: float) -> list[float]:
    """Per verdict of a Holm family (the verdicts after the adjustment), the level its interval is shown at: its
    ``differs`` level, its ``same`` level, or for an inconclusive one the smaller of the two (module doc)."""
    ld, ls = holm_levels(p_differs, alpha), holm_levels(p_same, alpha)
    return [d if v == DIFFERS else s if v == SAME else min(d, s) for v, d, s in zip(verdicts, ld, ls, strict=True)]


def at_level(j: T, level: float) -> T:
    """``j`` (a :class:`~.verdict.Judgement` or a :class:`~.pooled.PooledEffect`) with its interval at ``level``
    instead of ``j.alpha`` (same centre, same standard error and df)."""
    if j.small or not (j.low > 0 and j.high > 0) or level == j.alpha:
        return j
    half = (math.log(j.high) - math.log(j.low)) / 2
    if half <= 0:
        return j
    d = math.log(j.ratio)
    half *= t_quantile(j.df, 1 - level) / t_quantile(j.df, 1 - j.alpha)
    return replace(j, low=math.exp(d - half), high=math.exp(d + half))


def note(method: str, m: int) -> str:
    """``Holm, 12 comparisons``: the adjustment, named as the interval beside a verdict says it."""
    return f"{METHODS[method]}, {m} comparisons"


def controlled(judgements: Sequence[Judgement | None], *, alpha: float | None = None) -> list[Judgement | None]:
    """:func:`.family.control` (Holm) with each judgement's interval the one its verdict used (module doc) and
    ``adjusted`` naming the adjustment; a family of one is left as it is (the 95 % interval is the one used)."""
    out = control(judgements, alpha=alpha)
    present = [j for j in judgements if j is not None]
    m = len(present)
    if m <= 1:
        return out
    a = alpha if alpha is not None else present[0].alpha
    after = [j for j in out if j is not None]
    levels = iter(verdict_levels([j.verdict for j in after], [j.p_differs for j in present],
                                 [j.p_same for j in present], a))
    return [None if j is None else replace(at_level(j, next(levels)), adjusted=note("holm", m)) for j in out]


def selected_intervals(after: Sequence[Judgement | None], p_differs: Sequence[float], selected: Sequence[bool], *,
                       method: str, alpha: float) -> list[Judgement | None]:
    """A screen's judgements (``after``: the family's verdicts, :func:`.family.control` with ``method``) with the
    interval of each ``selected`` one (a claim the screen reports, e.g. an anomaly) at the level it was kept at:
    Holm's level for its rank, or for Benjamini–Hochberg α·R/m over the R claims of the m comparisons — the
    false-coverage-rate interval of Benjamini and Yekutieli (2005), which is what a 95 % interval chosen for being
    far from 1 does not give. ``p_differs``: the p-values the family was controlled on, in the order of ``after``
    (present entries only)."""
    present = [j for j in after if j is not None]
    m = len(present)
    if m <= 1:
        return list(after)
    r = sum(1 for j, s in zip(after, selected, strict=True) if j is not None and s)
    levels = iter(holm_levels(p_differs, alpha) if method == "holm" else [alpha * max(r, 1) / m] * m)
    name = f"{note(method, m)}, {'FCR-adjusted' if method != 'holm' else 'at its level'}"
    out: list[Judgement | None] = []
    for j, s in zip(after, selected, strict=True):
        if j is None:
            out.append(None)
            continue
        level = next(levels)
        out.append(replace(at_level(j, level), adjusted=name) if s else j)
    return out
