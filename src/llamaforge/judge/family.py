"""Many verdicts at once: control the error rate over the family, and say so.

A report judges every point of every pair of series, and anomalies test every adjacent pair of
points on two metrics: at α = 0.05 each, one in twenty true nulls would be called a difference.
:func:`control` adjusts the family's ``differs`` claims (and, separately, its ``same`` claims) with
Holm's step-down (family-wise error ≤ α) or Benjamini–Hochberg (false discovery rate ≤ α); a claim
that does not survive becomes ``inconclusive`` and every judgement records the adjustment.
"""

from __future__ import annotations

from collections.abc import Sequence

from .verdict import DIFFERS, INCONCLUSIVE, SAME, Judgement, with_verdict

METHODS = {"holm": "Holm", "bh": "Benjamini–Hochberg"}


def holm_reject(ps: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise ``alpha``."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [False] * m
    for rank, i in enumerate(order):
        if ps[i] > alpha / (m - rank):
            break
        out[i] = True
    return out


def bh_reject(ps: Sequence[float], alpha: float) -> list[bool]:
    """Benjamini–Hochberg step-up: which hypotheses are rejected at false discovery rate ``alpha``."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    k = 0
    for rank, i in enumerate(order, start=1):
        if ps[i] <= alpha * rank / m:
            k = rank
    out = [False] * m
    for i in order[:k]:
        out[i] = True
    return out


def control(judgements: Sequence[Judgement | None], *, method: str = "holm", alpha: float | None = None,
            direction: int = 0) -> list[Judgement | None]:
    """The family's judgements with ``differs``/``same`` claims kept only where they survive ``method``
    over the family (``None`` entries pass through). A family of one is left as it is.

    ``direction`` (+1 / −1): only differences that way are claims (an anomaly search asks "faster?"); a
    difference the other way counts in the family with p = 1, so the many "slower" neighbours of a falling
    series cannot lift Benjamini–Hochberg's bar for the few "faster" ones."""
    present = [j for j in judgements if j is not None]
    m = len(present)
    if m <= 1:
        return list(judgements)
    name = METHODS[method]
    a = alpha if alpha is not None else present[0].alpha
    reject = holm_reject if method == "holm" else bh_reject
    def p_diff(j: Judgement) -> float:
        wrong_way = direction and (j.ratio - 1) * direction <= 0
        return 1.0 if wrong_way else j.p_differs

    keep_diff = dict(zip(map(id, present), reject([p_diff(j) for j in present], a), strict=True))
    keep_same = dict(zip(map(id, present), reject([j.p_same for j in present], a), strict=True))
    note = f"{name} over {m} comparisons"
    out: list[Judgement | None] = []
    for j in judgements:
        if j is None:
            out.append(None)
            continue
        v = j.verdict
        if (v == DIFFERS and not keep_diff[id(j)]) or (v == SAME and not keep_same[id(j)]):
            v = INCONCLUSIVE
        out.append(with_verdict(j, v, note))
    return out
