"""Two sides judged on the ratio of their start-level centres: same, differs, or inconclusive.

The ratio B/A of the two :class:`~.estimate.Estimate` centres gets a 95 % interval on the log scale
from the start centres (Welch: each side's between-start variance over its K, Welch–Satterthwaite
degrees of freedom). With a minimum effect E (``--min-effect``, δ = log(1 + E)):

* **same** — the interval lies inside ±δ (an equivalence test: the difference is smaller than E);
* **differs** — the interval lies wholly outside ±δ (the difference is larger than E);
* **inconclusive** — the interval spans both: the data cannot tell.

Each verdict carries a p-value consistent with its interval (``p_differs`` < α ⟺ the interval clears
±δ; ``p_same`` < α ⟺ it lies inside), which is what :mod:`.family` adjusts when many points are
judged at once.

**Fewer than 3 starts on a side.** Its spread cannot be estimated from itself, so it is borrowed
(:func:`.spread.for_small_k`: the build's measured spread, widened to the most a point may exceed it
and kept with its degrees of freedom, else a conservative bound taken as known); the verdict then names its assumption (:attr:`Judgement.assumed`), and renderers print no
p-value and no significance mark for it, only the verdict word and the range of start ratios.
A 170-fold gap is "differs" under any plausible spread; a 1.66× gap between two 2-start points
whose starts overlap is not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from . import wording
from .estimate import CONFIDENCE, Estimate, estimate, t_quantile
from .needs import Needs, starts_to_resolve
from .spread import Spread, for_small_k
from .starts import Starts

SAME, DIFFERS, INCONCLUSIVE = "same", "differs", "inconclusive"
MIN_EFFECT = 0.05
ALPHA = 0.05
#: the fewest starts per side whose own spread a verdict uses (fewer: an assumed spread, said so)
MIN_OWN_STARTS = 3


@dataclass(frozen=True)
class Judgement:
    """B relative to A (``ratio`` = centre(B) / centre(A)) with its verdict."""

    a: Estimate
    b: Estimate
    ratio: float
    low: float                      # the ratio's 95 % interval (under the assumed spread where ``assumed``)
    high: float
    verdict: str                    # same | differs | inconclusive
    min_effect: float
    p_differs: float
    p_same: float
    df: float | None                # Welch df (None: both spreads taken as known)
    assumed: str | None = None      # the spread assumption when a side has < 3 starts
    adjusted: str | None = None     # "Holm over 30 comparisons" when the verdict was made in a family
    alpha: float = ALPHA
    #: the per-start variances (log) of the two sides, summed: what :attr:`needs` is computed from
    s2: float | None = None

    @cached_property
    def needs(self) -> Needs | None:
        """Inconclusive only: the starts per side that would likely settle it at the measured spread
        (:mod:`.needs`; computed when first asked: most verdicts judged are never printed)."""
        if self.verdict != INCONCLUSIVE:
            return None
        if self.s2 is not None:
            sd = math.sqrt(self.s2 / 2)
        elif self.high > self.low > 0:       # made inconclusive in a family: the spread behind its interval
            se = (math.log(self.high) - math.log(self.low)) / (2 * t_quantile(self.df, 1 - self.alpha))
            sd = se * math.sqrt(1 / (1 / self.a.k + 1 / self.b.k))
        else:
            return None
        return starts_to_resolve(math.log(self.ratio), sd, sd, min_effect=self.min_effect, alpha=self.alpha,
                                 k_now=max(self.a.k, self.b.k))

    @property
    def small(self) -> bool:
        """A side has fewer than :data:`MIN_OWN_STARTS` starts: no p-value, no CI, no mark is printed."""
        return self.assumed is not None

    @property
    def direction(self) -> int:
        """+1 when B is higher beyond the minimum effect, −1 lower, 0 otherwise (the verdict decides)."""
        if self.verdict != DIFFERS:
            return 0
        return 1 if self.ratio > 1 else -1

    @property
    def start_range(self) -> tuple[float, float]:
        """The range of B/A over every pair of starts: (min B / max A, max B / min A)."""
        return min(self.b.starts) / max(self.a.starts), max(self.b.starts) / min(self.a.starts)

    @property
    def separated(self) -> bool:
        """Every start of one side beat every start of the other ("in every start")."""
        return min(self.b.starts) > max(self.a.starts) or max(self.b.starts) < min(self.a.starts)

    @property
    def mark(self) -> str:
        """``+``/``-`` (differs), ``=`` (same), ``?`` (inconclusive); a small-K verdict adds ``*`` (assumed spread)."""
        m = {SAME: "=", INCONCLUSIVE: "?"}.get(self.verdict) or ("+" if self.ratio > 1 else "-")
        return m + ("*" if self.small and self.verdict != INCONCLUSIVE else "")

    def interval(self) -> tuple[str, float | None, float | None]:
        """What interval the ratio is shown with (a :data:`.wording.INTERVALS` kind and its ends): ``one``
        (one start each: no range), ``starts`` (fewer than 3 starts a side: the range of start ratios) or ``ci``."""
        if self.a.k == 1 and self.b.k == 1:
            return "one", None, None
        if self.small:
            lo, hi = self.start_range
            return "starts", lo, hi
        return "ci", self.low, self.high

    def interval_text(self) -> str:
        """``[1.35, 2.01]`` (a 95 % CI) or, at small K, ``starts 1.15–2.00`` (the range of start ratios);
        ``1 start each`` when there is no range (a one-start-each "1.86–1.86" would read as starts that agree)."""
        kind, lo, hi = self.interval()
        return wording.interval_text(kind, lo, hi)

    def ratio_text(self, num: str = "B", den: str = "A", *, metric: str | None = None, decimals: int = 2) -> str:
        """The ratio with its interval, as :func:`.wording.ratio_text` says it: ``1.66× [1.35, 2.01]``,
        ``CPU 115× faster [80, 161]`` (``num``/``den``: the names of B and A)."""
        kind, lo, hi = self.interval()
        return wording.ratio_text(self.ratio, lo, hi, interval=kind, num=num, den=den, metric=metric,
                                  decimals=decimals)

    def fmt(self, num: str = "B", den: str = "A") -> str:
        """``1.66× [1.35, 2.01] differs`` / ``1.66× (starts 1.15–2.00) inconclusive*`` /
        ``CPU 115× faster [80, 161] differs`` (``num``/``den``: the names of B and A)."""
        star = "*" if self.small and self.verdict != INCONCLUSIVE else ""
        return f"{self.ratio_text(num, den)} {self.verdict}{star}{self.needs_note()}"

    def needs_note(self) -> str:
        """`` (same within ±5 % needs ≈ K=23)`` for an inconclusive verdict, else ``""``."""
        return f" ({self.needs.text()})" if self.verdict == INCONCLUSIVE and self.needs is not None else ""

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "ratio": self.ratio, "low": self.low, "high": self.high,
                "verdict": self.verdict, "min_effect": self.min_effect, "alpha": self.alpha,
                "p_differs": None if self.small else self.p_differs, "p_same": None if self.small else self.p_same,
                "df": self.df, "assumed": self.assumed, "adjusted": self.adjusted, "mark": self.mark,
                "start_range": list(self.start_range), "separated": self.separated,
                "needs": self.needs.to_dict() if self.needs is not None and self.verdict == INCONCLUSIVE else None}


def _side(est: Estimate, starts: Starts, prior: Spread | None) -> tuple[float, float | None, str | None]:
    """(variance of the side's mean log centre, its df or None when known, the assumption if any)."""
    if starts.k >= MIN_OWN_STARTS and est.spread is not None:
        return est.spread.sd ** 2 / starts.k, float(starts.k - 1), None
    sp = for_small_k(starts, prior)
    return sp.sd ** 2 / starts.k, None if sp.df is None else float(sp.df), sp.basis


def _welch_df(parts: Sequence[tuple[float, float | None]]) -> float | None:
    den = sum(v * v / df for v, df in parts if df)
    if den <= 0:
        return None
    return sum(v for v, _df in parts) ** 2 / den


def _p(stat: float, df: float | None) -> float:
    """Two-sided-convention p of a one-sided statistic against the margin (``2·sf``, capped at 1)."""
    from scipy.special import stdtr  # here, not at import: scipy.special costs every CLI start ~0.15 s

    if math.isinf(stat):
        return 0.0 if stat > 0 else 1.0
    return min(1.0, 2 * float(stdtr(1e12 if df is None else df, -stat)))


def _decide(d: float, se: float, df: float | None, alpha: float,
            min_effect: float) -> tuple[float, float, str, float, float]:
    """The interval ``d ± t(df, 1-α)·se`` of a log difference, its verdict against the margin
    ``±log1p(min_effect)`` (SAME inside, DIFFERS outside, else INCONCLUSIVE), and the p-values of
    "differs by more than the margin" and "within the margin": (low, high, verdict, p_diff, p_same)."""
    half = t_quantile(df, 1 - alpha) * se
    delta = math.log1p(min_effect)
    low, high = d - half, d + half
    verdict = SAME if -delta < low and high < delta else DIFFERS if low > delta or high < -delta else INCONCLUSIVE
    inf = math.inf
    p_diff = _p((abs(d) - delta) / se if se > 0 else (inf if abs(d) > delta else -inf), df)
    p_same = _p((delta - abs(d)) / se if se > 0 else (inf if abs(d) < delta else -inf), df)
    return low, high, verdict, p_diff, p_same


def judge(a: Starts | Sequence[Sequence[float]], b: Starts | Sequence[Sequence[float]], *,
          min_effect: float = MIN_EFFECT, alpha: float = ALPHA, prior_a: Spread | None = None,
          prior_b: Spread | None = None) -> Judgement | None:
    """B relative to A from their starts (``None`` when a side has none). ``prior_a``/``prior_b``: the
    spread measured for each side's build (:func:`.spread.pooled`), used only below 3 starts."""
    sa = a if isinstance(a, Starts) else Starts.of(a)
    sb = b if isinstance(b, Starts) else Starts.of(b)
    ea, eb = estimate(sa), estimate(sb)
    if ea is None or eb is None:
        return None
    va, dfa, asa = _side(ea, sa, prior_a)
    vb, dfb, asb = _side(eb, sb, prior_b)
    d = float(sb.log_centres.mean() - sa.log_centres.mean())
    se = math.sqrt(va + vb)
    df = _welch_df([(va, dfa), (vb, dfb)])
    if (asa or asb) and df is not None:
        # a borrowed spread is an estimate: both sides may share one donor (not independent estimates), so
        # the fewest df of the two stand for both — never more than Welch's (conservative)
        df = min(df, *(x for x in (dfa, dfb) if x))
    low, high, verdict, p_diff, p_same = _decide(d, se, df, alpha, min_effect)
    assumed = "; ".join(dict.fromkeys(x for x in (asa, asb) if x)) or None
    return Judgement(ea, eb, math.exp(d), math.exp(low), math.exp(high), verdict, min_effect, p_diff, p_same, df,
                     assumed, None, alpha, va * sa.k + vb * sb.k)


def assumptions_note(judgements: Sequence[Judgement | None]) -> str | None:
    """Every distinct spread assumption behind small-K verdicts, once each, in one line (``None``: none)."""
    parts: dict[str, None] = {}
    for j in judgements:
        if j is not None and j.assumed:
            for part in j.assumed.split("; "):
                parts[part] = None
    return "; ".join(parts) or None


def with_verdict(j: Judgement, verdict: str, adjusted: str) -> Judgement:
    """``j`` with the verdict a family gave it (its :attr:`Judgement.needs` at its own α: the family's
    adjustment would ask a little more)."""
    return replace(j, verdict=verdict, adjusted=adjusted)


__all__ = ["ALPHA", "CONFIDENCE", "DIFFERS", "INCONCLUSIVE", "MIN_EFFECT", "SAME", "Judgement", "assumptions_note",
           "judge"]
