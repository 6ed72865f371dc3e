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

``--launches auto`` uses it (:mod:`.sequential`): from half the budget on, a verdict that no true difference
within :data:`OPTIMISM` standard errors of the measured one would settle within :data:`FUTILITY` ×
``--max-launches`` starts (:meth:`Needs.futile`)
stops adding starts (unresolved, with the number said); stopping for futility never makes a "differs" or a
"same" more likely, so the error rates of the sequential looks are kept. (With the measured ratio alone as
the guide, 7 % of real 15 % steps at a 5 % spread were given up at half a budget of 10.)
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
#: ``--launches auto`` stops an open verdict early when it would need more than this × the maximum starts …
FUTILITY = 2.0
#: … even were the true difference this many standard errors more favourable than measured (:meth:`Needs.futile`)
OPTIMISM = 1.0


@dataclass(frozen=True)
class Needs:
    """The starts per side that would likely settle an inconclusive verdict (``k`` None: more than ``cap``)."""

    k: int | None
    verdict: str             # same | differs: how the measured ratio would settle
    min_effect: float
    power: float = POWER
    cap: int = NEEDS_CAP
    s2: float = 0.0          # the per-start variances of the two sides, summed (log scale)
    alpha: float = 0.05
    k_now: int = 2
    d: float = 0.0           # the measured log difference

    def text(self) -> str:
        """``same within ±5 % needs ≈ K=23`` (:func:`.wording.needs_text`)."""
        return wording.needs_text(self.verdict, self.min_effect, self.k, cap=self.cap)

    def beyond(self, max_starts: int, factor: float = FUTILITY) -> bool:
        """Whether settling would take more than ``factor`` × ``max_starts`` starts per side."""
        return self.k is None or self.k > factor * max_starts

    def futile(self, max_starts: int, factor: float = FUTILITY) -> bool:
        """Whether no true difference within :data:`OPTIMISM` standard errors of the measured one (either side,
        and the one nearest no difference) would settle the verdict with probability :attr:`power` within
        ``factor`` × ``max_starts`` starts per side: a hopeful reading of what the starts have shown (the
        measured ratio alone is too rough a guide at a few starts: a real change read low is given up)."""
        if self.s2 <= 0:
            return False
        ks = np.arange(max(2, self.k_now), int(factor * max_starts) + 1)
        if not ks.size:
            return True
        se = math.sqrt(self.s2 / max(2, self.k_now))
        lo, hi = self.d - OPTIMISM * se, self.d + OPTIMISM * se
        for d in (lo, hi, min(max(0.0, lo), hi)):
            p = settle_probability(d, self.s2, ks, min_effect=self.min_effect, alpha=self.alpha)
            if float(p.max()) >= self.power:
                return False
        return True

    def to_dict(self) -> dict:
        return {"k": self.k, "verdict": self.verdict, "min_effect": self.min_effect, "power": self.power,
                "cap": self.cap, "alpha": self.alpha, "s2": self.s2, "k_now": self.k_now, "d": self.d,
                "text": self.text()}

    @classmethod
    def from_dict(cls, d: dict) -> Needs:
        return cls(d.get("k"), str(d.get("verdict") or "same"), float(d.get("min_effect") or 0.05),
                   float(d.get("power") or POWER), int(d.get("cap") or NEEDS_CAP), float(d.get("s2") or 0.0),
                   float(d.get("alpha") or 0.05), int(d.get("k_now") or 2), float(d.get("d") or 0.0))


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
        return Needs(lo, verdict, min_effect, power, cap, s2, alpha, lo, d)
    return Needs(_first_k(d, s2, lo, cap, min_effect=min_effect, alpha=alpha, power=power), verdict, min_effect,
                 power, cap, s2, alpha, lo, d)


def _first_k(d: float, s2: float, lo: int, cap: int, *, min_effect: float, alpha: float, power: float) -> int | None:
    """The first K in [lo, cap] with P(settled) ≥ ``power``: a coarse geometric grid, then every K between the
    last grid point below and the first one above (P(settled) grows with K but for a ripple at a few starts)."""
    grid = np.unique(np.geomspace(lo, cap, 48).astype(int))
    ok = np.nonzero(settle_probability(d, s2, grid, min_effect=min_effect, alpha=alpha) >= power)[0]
    if not ok.size:
        return None
    if ok[0] == 0:
        return int(grid[0])
    ks = np.arange(int(grid[ok[0] - 1]) + 1, int(grid[ok[0]]) + 1)
    fine = np.nonzero(settle_probability(d, s2, ks, min_effect=min_effect, alpha=alpha) >= power)[0]
    return int(ks[fine[0]])
