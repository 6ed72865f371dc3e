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
    a = alpha if alpha is not None else present[0].alpha

    def p_diff(j: Judgement) -> float:
        wrong_way = direction and (j.ratio - 1) * direction <= 0
        return 1.0 if wrong_way else j.p_differs

    verdicts = iter(surviving([j.verdict for j in present], [p_diff(j) for j in present],
                              [j.p_same for j in present], method=method, alpha=a))
    note = f"{METHODS[method]} over {m} comparisons"
    return [None if j is None else with_verdict(j, next(verdicts), note) for j in judgements]


def surviving(verdicts: Sequence[str], p_differs: Sequence[float], p_same: Sequence[float], *,
              method: str, alpha: float) -> list[str]:
    """A family's verdicts after ``method``: a ``differs`` (``same``) claim whose p-value does not survive
    over the family becomes ``inconclusive``; the rest stay as they are."""
    reject = holm_reject if method == "holm" else bh_reject
    keep_diff, keep_same = reject(p_differs, alpha), reject(p_same, alpha)
    return [INCONCLUSIVE if (v == DIFFERS and not kd) or (v == SAME and not ks) else v
            for v, kd, ks in zip(verdicts, keep_diff, keep_same, strict=True)]
