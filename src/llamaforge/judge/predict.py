"""Where one more start of a point should land: the yardstick of drift sentinels.

A sentinel re-measures a build's reference point in one new server start. Whether the machine
drifted is a question about that *one start*, so the yardstick is the **prediction interval for one
new start** (log scale: mean ± t·s·√(1 + 1/K)), not the interval of the point's centre: a third start
from the same distribution lands outside a 2-start range most of the time, and outside a centre's CI
often, without anything having changed. Below 3 starts the spread is borrowed as for verdicts
(:func:`.spread.for_small_k`) and the flag says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .estimate import CONFIDENCE, t_quantile
from .spread import Spread, for_small_k, own
from .starts import Starts


@dataclass(frozen=True)
class PredictionInterval:
    low: float
    high: float
    centre: float
    k: int
    assumed: str | None      # the spread assumption below 3 starts

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def next_start(starts: Starts, *, prior: Spread | None = None, confidence: float = CONFIDENCE) -> PredictionInterval | None:
    """The interval one new start of the point falls in with probability ``confidence``."""
    if not starts:
        return None
    lc = starts.log_centres
    m = float(lc.mean())
    mine = own(starts)
    if starts.k >= 3 and mine is not None:
        sd, df, assumed = mine.sd, float(starts.k - 1), None
    else:
        sp = for_small_k(starts, prior)
        sd, df, assumed = sp.sd, (None if sp.df is None else float(sp.df)), sp.basis
    half = t_quantile(df, confidence) * sd * math.sqrt(1 + 1 / starts.k)
    return PredictionInterval(math.exp(m - half), math.exp(m + half), math.exp(m), starts.k, assumed)
