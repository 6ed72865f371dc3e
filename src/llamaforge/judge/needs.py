"""What an inconclusive verdict would take: the starts per side that would likely settle it.

An inconclusive verdict's interval spans the margin ±δ (δ = log(1 + E), E = ``--min-effect``). Taking the
measured ratio and the measured between-start spread as the truth (a plug-in, hence "≈"), the verdict
with K starts per side is settled when its interval lies inside ±δ (**same**) or clears it (**differs**);
:func:`starts_to_resolve` is the fewest K at which that happens with probability :data:`POWER`:

    d̂ ~ N(d, se_K),  se_K = √((s_a² + s_b²) / K),  interval d̂ ± t(2K − 2, 1 − α/2)·se_K

which verdict it would settle as is the side of the margin the measured ratio lies on. Near the margin
(|d| ≈ δ) no K settles it; beyond :data:`NEEDS_CAP` starts it says "more than". Identical builds at a CV
of 5 % need about K = 23 for "same within ±5 %" (K = 28 at the α/2 of a sequential look); at K = 10 "same"
comes out in about 6 % of trials, and never at the α/2 of a sequential look.

``--launches auto`` uses the number (:mod:`.sequential`): a verdict that would need more than
:data:`FUTILITY` × ``--max-launches`` stops adding starts now (unresolved, with the number said), since
the starts left could not settle it; stopping for futility never makes a "differs" or a "same" more likely,
so the error rates of the sequential looks are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import wording

#: the probability with which K starts per side settle the verdict ("would likely resolve it")
POWER = 0.8
#: the most starts per side searched; beyond: "more than"
NEEDS_CAP = 1000
#: ``--launches auto`` stops an open verdict early when it would need more than this × the maximum starts
FUTILITY = 2.0


@dataclass(frozen=True)
class Needs:
    """The starts per side that would likely settle an inconclusive verdict (``k`` None: more than ``cap``)."""

    k: int | None
    verdict: str             # same | differs: how the measured ratio would settle
    min_effect: float
    power: float = POWER
    cap: int = NEEDS_CAP

    def text(self) -> str:
        """``same within ±5 % needs ≈ K=23`` (:func:`.wording.needs_text`)."""
        return wording.needs_text(self.verdict, self.min_effect, self.k, cap=self.cap)

    def beyond(self, max_starts: int, factor: float = FUTILITY) -> bool:
        """Whether settling would take more than ``factor`` × ``max_starts`` starts per side."""
        return self.k is None or self.k > factor * max_starts

    def to_dict(self) -> dict:
        return {"k": self.k, "verdict": self.verdict, "min_effect": self.min_effect, "power": self.power,
                "cap": self.cap, "text": self.text()}


def settle_probability(d: float, s2: float, k: np.ndarray, *, min_effect: float, alpha: float) -> np.ndarray:
    """P(settled) with ``k`` starts per side (an array), for a true log difference ``d`` and per-start
    variances summing to ``s2`` (both sides)."""
    from scipy.special import ndtr, stdtrit

    k = np.asarray(k, dtype=float)
    se = np.sqrt(s2 / k)
    h = stdtrit(np.maximum(2 * k - 2, 1.0), 1 - alpha / 2) * se
    delta = math.log1p(min_effect)
    same = np.where(delta > h, ndtr((delta - h - d) / se) - ndtr((-delta + h - d) / se), 0.0)
    differs = 1 - ndtr((delta + h - d) / se) + ndtr((-delta - h - d) / se)
    return same + differs


def starts_to_resolve(d: float, sd_a: float, sd_b: float, *, min_effect: float, alpha: float = 0.05,
                      k_now: int = 2, power: float = POWER, cap: int = NEEDS_CAP) -> Needs:
    """The fewest starts per side (≥ ``k_now``, ≤ ``cap``) that settle a verdict with probability ``power``
    when the log difference is ``d`` and the sides' between-start SDs (log) are ``sd_a`` and ``sd_b`` (see
    the module doc)."""
    verdict = "same" if abs(d) < math.log1p(min_effect) else "differs"
    s2 = sd_a ** 2 + sd_b ** 2
    lo = max(2, int(k_now))
    if s2 <= 0:
        return Needs(lo, verdict, min_effect, power, cap)
    ks = np.arange(lo, cap + 1)
    ok = np.nonzero(settle_probability(d, s2, ks, min_effect=min_effect, alpha=alpha) >= power)[0]
    return Needs(int(ks[ok[0]]) if ok.size else None, verdict, min_effect, power, cap)
