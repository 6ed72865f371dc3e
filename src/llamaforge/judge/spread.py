"""How much one start differs from the next: measured, pooled, or assumed (and then said so).

Between-start spread is expressed as the SD of log start centres (≈ the coefficient of variation for
small spreads). With three or more starts a point carries its own estimate. With fewer, a verdict
must still never contradict the obvious (a 170-fold gap is not "the same"), so it borrows a spread:

* the spread **measured for that build on this machine**: the pooled SD of log start centres over
  the other points of the build that have ≥ 2 starts (:func:`pooled`), when it has at least
  :data:`MIN_POOLED_DF` degrees of freedom; or else
* a documented **conservative bound**, :data:`CONSERVATIVE_SD` = 0.25 (25 %): larger than any
  between-start spread llamaforge has measured (Vulkan on an H200 at ncmoe 0: 101–163 t/s over 7 starts,
  SD ≈ 17 %; llama-bench processes of one CPU build here: 241–326 t/s, CV ≈ 13 %).

**A borrowed spread is bounded, not taken as exact.** The build's pooled SD is an estimate (its
degrees of freedom are few in a small store), and one point may be noisier than the build's others
(a point at the edge of VRAM, a bimodal backend). Taken as exact, a 2-start point twice as noisy as its
donor was called "differs" between identical builds in 6.9–12.5 % of trials. So a borrowed spread is

* **widened** by :data:`HETEROGENEITY` (2): the point may be up to twice as noisy as the build's other
  points, and the verdict is made as if it were; and
* **kept as an estimate**: it carries the donor's degrees of freedom, so the verdict's interval uses
  Student's t with them (the upper tail of the donor's chi-square: an SD from 4 df may be 2.4× too small
  at 95 %), never the normal quantile of a known spread.

Under that bound, identical builds at K = 2 whose true spread is up to twice the donor's are called
"differs" in at most 5 % of trials at any donor df (the t argument is exact when the spread is large
against the margin; ``tests/unit/test_judge_small_k.py`` measures it). The conservative 25 % bound is
already above any spread measured and is used as known.

The assumption travels with the verdict (:attr:`Spread.basis`) and every renderer prints it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .starts import Starts

#: the assumed between-start SD (log scale) when nothing was measured; see the module doc
CONSERVATIVE_SD = 0.25
#: the fewest degrees of freedom (Σ (K − 1) over points) a pooled spread needs to be used
MIN_POOLED_DF = 4
#: a point that borrows a spread may be up to this many times as noisy as its donor (see the module doc)
HETEROGENEITY = 2.0


@dataclass(frozen=True)
class Spread:
    """SD of log start centres with its degrees of freedom (``None``: an assumed bound, taken as known)."""

    sd: float
    df: int | None
    basis: str            # how it was obtained, in words a report can print

    @property
    def assumed(self) -> bool:
        return self.df is None

    def to_dict(self) -> dict:
        return {"sd": self.sd, "df": self.df, "basis": self.basis}


def conservative(what: str = "this build") -> Spread:
    """:data:`CONSERVATIVE_SD` as an assumed spread whose basis names ``what`` it stands in for (a report that
    judges several series and metrics must say which one had no spread measured)."""
    return Spread(CONSERVATIVE_SD, None, f"no between-start spread measured for {what} (assumed at most "
                                         f"{CONSERVATIVE_SD:.0%}, above any spread llamaforge has measured)")


CONSERVATIVE = conservative()


def own(starts: Starts) -> Spread | None:
    """The point's own spread (``None`` with fewer than 2 starts)."""
    if starts.k < 2:
        return None
    lc = starts.log_centres
    return Spread(float(lc.std(ddof=1)), starts.k - 1, f"{starts.k} starts of this point")


def pooled(points: Iterable[Starts], *, what: str = "this build") -> Spread | None:
    """Pooled SD of log start centres over ``points`` with ≥ 2 starts (``None`` below :data:`MIN_POOLED_DF`)."""
    ss, df, n = 0.0, 0, 0
    for s in points:
        if s.k >= 2:
            lc = s.log_centres
            ss += float(((lc - lc.mean()) ** 2).sum())
            df += s.k - 1
            n += 1
    if df < MIN_POOLED_DF:
        return None
    sd = math.sqrt(ss / df)
    return Spread(sd, df, f"assuming the between-start spread measured for {what} on this machine "
                          f"({sd:.0%}, {n} points, {df} df)")


#: said (once per report) when a 2-start point's own spread was wider than the assumed one and used instead
WIDER = "a point whose own 2 starts spread wider used its own spread"


def for_small_k(starts: Starts, prior: Spread | None) -> Spread:
    """The spread a verdict uses for a side with fewer than 3 starts (see the module doc): a measured
    prior (the build's pooled spread) widened by :data:`HETEROGENEITY` and kept with its degrees of
    freedom (the verdict then uses t with them); else :data:`CONSERVATIVE`, taken as known. The point's
    own 2-start spread is used instead where it is wider."""
    if prior is not None and prior.df is not None:
        base = Spread(HETEROGENEITY * prior.sd, prior.df,
                      f"{prior.basis}, taken as up to {HETEROGENEITY:g}× that ({HETEROGENEITY * prior.sd:.0%}) "
                      f"and as an estimate (t with {prior.df} df)")
    else:
        base = prior or CONSERVATIVE
    mine = own(starts)
    if mine is not None and mine.sd > base.sd:
        return Spread(mine.sd, base.df, f"{base.basis}; {WIDER}")
    return base
