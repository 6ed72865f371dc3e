"""One effect over several points: a knob's ratio pooled across the points where it behaves alike.

The variant matrix states a knob's effect "where it holds" ("flash attention: tg +4 % [+2, +6] at ncmoe 0–4,
no difference beyond"). Each point's ratio B/A and its variance come from the start centres exactly as in
(Welch, the build's borrowed spread below 3 starts); the points are pooled with a **fixed-effect** weighted
mean of their log ratios::

    d = Σ wᵢ dᵢ / Σ wᵢ,   wᵢ = 1 / (1/Kaᵢ + 1/Kbᵢ),   Var(d) = Σ (wᵢ/Σw)² (Var(aᵢ) + Var(bᵢ))

with Welch–Satterthwaite degrees of freedom over every side's variance. The weights are the inverse variance
under one common between-start spread (they depend on the starts only): weighting by each point's *estimated*
variance, from 3 starts a side, gave the noisiest-looking points too much weight and called identical sides
"different" in 13 % of 400 simulated trials at α = 5 % (``tests/unit/test_judge_pooled.py``). That assumes one common effect
over the pooled points, so callers pool only a run of neighbouring points whose own verdicts agree (all
"differs" in one direction, or all "same"); the range of the per-point ratios is kept beside it. The
pooled interval gets the same three-way verdict against ``min_effect`` as a point's, and a family of pooled
effects is controlled with Holm's method (:func:`control`). A side with fewer than 3 starts borrows a spread
(``assumed``), and the renderer then prints the range of point ratios, not a confidence interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .estimate import estimate, signed_pct
from .family import METHODS, surviving
from .spread import Spread
from .starts import Starts
from .verdict import ALPHA, INCONCLUSIVE, MIN_EFFECT, _decide, _side, _welch_df


@dataclass(frozen=True)
class PooledEffect:
    """B relative to A pooled over ``n_points`` points (``ratio`` = exp of the pooled mean log ratio)."""

    ratio: float
    low: float
    high: float
    verdict: str
    min_effect: float
    p_differs: float
    p_same: float
    df: float | None
    n_points: int
    point_ratios: tuple[float, ...]
    assumed: str | None = None
    adjusted: str | None = None
    alpha: float = ALPHA

    @property
    def small(self) -> bool:
        return self.assumed is not None

    def pct(self) -> str:
        """``+4 % [+2, +6]`` (a 95 % CI), or with a borrowed spread ``+4 % (points +1 to +7)*``."""
        c = f"{signed_pct(self.ratio)} %"
        if self.small:
            lo, hi = min(self.point_ratios), max(self.point_ratios)
            rng = (f"point {signed_pct(lo)} %" if self.n_points == 1
                   else f"points {signed_pct(lo)} to {signed_pct(hi)} %")
            return f"{c} ({rng})" + ("*" if self.verdict != INCONCLUSIVE else "")
        return f"{c} [{signed_pct(self.low)}, {signed_pct(self.high)}]"

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "verdict": self.verdict,
                "min_effect": self.min_effect, "p_differs": None if self.small else self.p_differs,
                "p_same": None if self.small else self.p_same, "df": self.df, "n_points": self.n_points,
                "point_ratios": list(self.point_ratios), "assumed": self.assumed, "adjusted": self.adjusted,
                "pooling": "fixed effect (inverse-variance) over the points' log ratios"}


def pooled_effect(pairs: Sequence[tuple[Starts, Starts]], *, min_effect: float = MIN_EFFECT, alpha: float = ALPHA,
                  priors: Sequence[tuple[Spread | None, Spread | None]] | None = None) -> PooledEffect | None:
    """B over A pooled over ``pairs`` ((A's starts, B's starts) per point; ``priors``: each point's borrowed
    spreads for sides below 3 starts). ``None`` when no point has both sides."""
    parts: list[tuple[float, float, float | None, float, float | None]] = []   # d, va, dfa, vb, dfb
    assumed: dict[str, None] = {}
    ratios: list[float] = []
    weights: list[float] = []
    for i, (a, b) in enumerate(pairs):
        ea, eb = estimate(a), estimate(b)
        if ea is None or eb is None:
            continue
        pa, pb = (priors[i] if priors is not None else (None, None))
        va, dfa, asa = _side(ea, a, pa)
        vb, dfb, asb = _side(eb, b, pb)
        assumed.update({x: None for x in (asa, asb) if x})
        d = float(b.log_centres.mean() - a.log_centres.mean())
        parts.append((d, va, dfa, vb, dfb))
        weights.append(1.0 / (1.0 / a.k + 1.0 / b.k))
        ratios.append(math.exp(d))
    if not parts:
        return None
    total = sum(weights)
    cs = [w / total for w in weights]
    d = sum(c * p[0] for c, p in zip(cs, parts, strict=True))
    var = sum(c * c * (p[1] + p[3]) for c, p in zip(cs, parts, strict=True))
    df = _welch_df([x for c, p in zip(cs, parts, strict=True) for x in ((c * c * p[1], p[2]), (c * c * p[3], p[4]))])
    se = math.sqrt(var)
    low, high, verdict, p_diff, p_same = _decide(d, se, df, alpha, min_effect)
    return PooledEffect(math.exp(d), math.exp(low), math.exp(high), verdict, min_effect, p_diff, p_same, df,
                        len(parts), tuple(ratios), "; ".join(assumed) or None, None, alpha)


def control(effects: Sequence[PooledEffect | None], *, method: str = "holm",
            alpha: float | None = None) -> list[PooledEffect | None]:
    """A family of pooled effects with ``differs``/``same`` kept only where they survive ``method``
    (as :func:`.family.control` does for point verdicts)."""
    present = [e for e in effects if e is not None]
    if len(present) <= 1:
        return list(effects)
    a = alpha if alpha is not None else present[0].alpha
    verdicts = iter(surviving([e.verdict for e in present], [e.p_differs for e in present],
                              [e.p_same for e in present], method=method, alpha=a))
    note = f"{METHODS[method]} over {len(present)} pooled effects"
    return [None if e is None else replace(e, verdict=next(verdicts), adjusted=note) for e in effects]
