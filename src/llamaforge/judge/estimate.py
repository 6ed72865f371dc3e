"""One point's level from its starts: centre, an honest interval, its spread, and its modes.

* **Centre**: the geometric mean of the start centres (the mean on the log scale the verdicts use).
* **Interval**, by the number of starts K:

  - K ≥ 3: a 95 % t-interval on the log start centres (``kind = "ci"``);
  - K = 2: the **range of the two starts** (``kind = "range"``), never called a confidence interval;
  - K = 1: the one start's value (``kind = "single"``): the between-start spread is unknown.

* **Modes**: start centres that form two clusters far apart (:func:`modes`) are reported as two
  modes instead of one centre: Vulkan at ncmoe 1–4 on an H200 is bimodal between starts in every
  session, and a median of two modes describes neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .spread import Spread, own
from .starts import Starts

CONFIDENCE = 0.95
#: two clusters of starts count as modes only when their gap is at least this (relative) …
MODE_MIN_GAP = 0.08
#: … and this many times the SD of requests inside a start …
MODE_WITHIN_FACTOR = 4.0
#: … and this many times the widest cluster's own range
MODE_CLUSTER_FACTOR = 2.0


@dataclass(frozen=True)
class Mode:
    centre: float
    k: int
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"centre": self.centre, "k": self.k, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Estimate:
    """A point's centre with the interval its K allows (see the module doc)."""

    k: int
    n_requests: int
    shape: str                    # "K×R"
    centre: float
    low: float
    high: float
    kind: str                     # ci | range | single
    starts: tuple[float, ...]     # the start centres, in start order
    spread: Spread | None         # own between-start spread (K ≥ 2)
    within: float | None          # SD of log requests inside a start
    modes: tuple[Mode, ...] = ()  # two modes when the starts are bimodal

    @property
    def half_rel(self) -> float:
        """Half the interval's width relative to the centre, on the log scale (∞ with one start)."""
        if self.kind == "single" or self.low <= 0:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / 2

    @property
    def bimodal(self) -> bool:
        return len(self.modes) == 2

    @property
    def interval_label(self) -> str:
        return {"ci": "95 % CI", "range": f"range of {self.k} starts",
                "single": "1 start: between-start spread unknown"}[self.kind]

    def interval_text(self, digits: int = 1) -> str:
        if self.kind == "single":
            return "1 start"
        lo, hi = f"{self.low:,.{digits}f}", f"{self.high:,.{digits}f}"
        return f"[{lo}, {hi}]" if self.kind == "ci" else f"{lo}–{hi}"

    def fmt(self, digits: int = 1) -> str:
        """``161.0 [150.2, 172.8] (3×2)``, ``161.0 (range 150.2–172.8, 2×2)``, ``161.0 (1×4, spread unknown)``;
        bimodal: ``modes 104 (3) / 158 (2) (5×2)``."""
        if self.bimodal:
            ms = " / ".join(f"{m.centre:,.{digits}f} ({m.k})" for m in self.modes)
            return f"modes {ms} ({self.shape})"
        c = f"{self.centre:,.{digits}f}"
        if self.kind == "ci":
            return f"{c} {self.interval_text(digits)} ({self.shape})"
        if self.kind == "range":
            return f"{c} (range {self.interval_text(digits)}, {self.shape})"
        return f"{c} ({self.shape}, spread unknown)"

    def to_dict(self) -> dict:
        return {"k": self.k, "n_requests": self.n_requests, "shape": self.shape, "centre": self.centre,
                "low": self.low, "high": self.high, "kind": self.kind, "interval": self.interval_label,
                "starts": list(self.starts), "spread": self.spread.to_dict() if self.spread else None,
                "within": self.within, "modes": [m.to_dict() for m in self.modes]}


def signed_pct(ratio: float, digits: int = 0) -> str:
    """A ratio as a signed percent change: ``+4``, ``-3.2``; never ``-0`` (a ratio a hair under 1 rounds to
    ``+0``). The one percent format of the judge's effects, for every renderer."""
    return f"{round((ratio - 1) * 100, digits) + 0.0:+.{digits}f}"


def t_quantile(df: float | None, confidence: float = CONFIDENCE) -> float:
    """Two-sided quantile of Student's t (the normal's when ``df`` is ``None``: a known spread)."""
    from scipy.special import stdtrit  # here, not at import: scipy.special costs every CLI start ~0.15 s

    q = 1 - (1 - confidence) / 2
    return float(stdtrit(1e12 if df is None else max(df, 1e-9), q))


def estimate(starts: Starts | Sequence[Sequence[float]], *, confidence: float = CONFIDENCE) -> Estimate | None:
    """The point's :class:`Estimate` (``None`` without any start)."""
    s = starts if isinstance(starts, Starts) else Starts.of(starts)
    if not s:
        return None
    lc = s.log_centres
    centre = float(math.exp(lc.mean()))
    if s.k >= 3:
        half = t_quantile(s.k - 1, confidence) * float(lc.std(ddof=1)) / math.sqrt(s.k)
        low, high, kind = math.exp(lc.mean() - half), math.exp(lc.mean() + half), "ci"
    elif s.k == 2:
        low, high, kind = float(min(s.centres)), float(max(s.centres)), "range"
    else:
        low = high = centre
        kind = "single"
    return Estimate(s.k, s.n_requests, s.shape, centre, low, high, kind, s.centres, own(s), s.within, modes(s))


def modes(s: Starts) -> tuple[Mode, ...]:
    """Two modes when the start centres split into two clusters of ≥ 2 starts each whose gap is at least
    :data:`MODE_MIN_GAP`, :data:`MODE_WITHIN_FACTOR` × the within-start SD and :data:`MODE_CLUSTER_FACTOR`
    × the wider cluster's range (all on the log scale); ``()`` otherwise (and always below 4 starts)."""
    if s.k < 4:
        return ()
    x = np.sort(s.log_centres)
    best, cut = -1.0, 0
    for i in range(2, s.k - 1):
        gap = float(x[i] - x[i - 1])
        if gap > best:
            best, cut = gap, i
    lo, hi = x[:cut], x[cut:]
    widest = max(float(lo[-1] - lo[0]), float(hi[-1] - hi[0]))
    within = s.within or 0.0
    if best < max(math.log1p(MODE_MIN_GAP), MODE_WITHIN_FACTOR * within, MODE_CLUSTER_FACTOR * widest):
        return ()
    return tuple(Mode(float(math.exp(g.mean())), int(g.size), float(math.exp(g[0])), float(math.exp(g[-1])))
                 for g in (lo, hi))
