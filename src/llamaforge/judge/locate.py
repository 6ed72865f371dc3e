"""Locating a change between two endpoints: what a noise-aware bisection may conclude, and what it costs.

A bisection judges one commit at a time against two **endpoints** (a good and a bad commit), each
measured in several server starts (one llama-bench process = one start). Three questions, all on
the log scale of start centres and with the between-start spread pooled over the commits judged
(:func:`pooled_sd`: one range of commits on one machine):

* :func:`feasibility` — **before anything beyond the endpoints is built**: do the endpoints differ
  (the :func:`~.verdict.judge` verdict with the minimum effect E), and can a probe be told apart
  within ``max_starts`` starts per commit? :func:`starts_needed` is the power calculation: the
  fewest starts per commit (probe and endpoints alike) that tell a commit at one endpoint's level
  from the other endpoint with power :data:`POWER` at the error rate the search allows. A change
  that needs more is refused up front, with that number.
* :func:`place` — **one probe** against both endpoints' start distributions, with one-sided rank tests
  (Mann–Whitney on start centres: no assumption on the shape of the starts, which on a shared machine
  are bimodal or heavy-tailed): *moved from good toward bad* (``p_good``) and *moved from bad toward
  good* (``p_bad``). It is **bad** when it moved from good (``p_good`` < α) but not from bad and its
  median start lies on bad's side of the middle; **good** the other way round; **between** when it
  moved from both (a partial change, or several changes); **open** otherwise: it needs more starts,
  never a guess. :func:`shift_p` is the same test for the culprit's check against its parent.
* :func:`side` — starts against a fixed value (``bisect-run`` with ``--good-value``/``--bad-value``
  or ``--reference``): above, below, or open.

**Error rates.** A wrong probe verdict can send the search to a wrong commit, so the search spends
:data:`FAMILY_ALPHA` over its ⌈log2 N⌉ probes (Bonferroni), and each probe spends its share over the
looks it may take (it is judged after every start): :func:`probe_alpha` divides it by
``LOOK_SPEND + ln(looks)``, which keeps the rate of a wrong verdict per probe within its share in
simulation (``tests/unit/test_judge_locate.py``: looking after every start from 3 to 40 with a
plain α inflates the error 3–5×; the growth is logarithmic in the number of looks). The budget
(:func:`starts_needed`) is planned with the t approximation of the rank test's power, and never
below the starts whose rank p-value can reach the per-look α at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import comb, nctdtr, ndtr, stdtrit

from .estimate import signed_pct, t_quantile
from .sequential import DEFAULT_MAX_STARTS, DEFAULT_MIN_STARTS, Policy
from .starts import Starts
from .verdict import ALPHA, DIFFERS, SAME, Judgement

GOOD, BAD, BETWEEN, OPEN = "good", "bad", "between", "open"
ABOVE, BELOW = "above", "below"
#: the chance of any wrong probe verdict that a whole search may spend (before its culprit check)
FAMILY_ALPHA = ALPHA
#: the test that decides probes and the culprit's check
RANK_TEST = "Mann–Whitney U on start centres"
#: exact rank p-values up to this many pairs of starts (beyond: the normal approximation)
EXACT_MAX = 600
#: the rank test's power is planned as the t test's with k·RANK_EFFICIENCY starts: 3/π asymptotically on
#: normal data, less at the few starts and small α of a bisection (0.8: calibrated in simulation so that a
#: probe at an endpoint's level is decided within the planned starts ≥ 90 % of the time; test_judge_locate)
RANK_EFFICIENCY = 0.8
#: the power the budget is planned for: a probe at one endpoint's level is decided within the budget
POWER = 0.9
#: see the module doc: per-look α = per-probe α / (LOOK_SPEND + ln(looks))
LOOK_SPEND = 1.5
#: the most starts :func:`starts_needed` searches (beyond it: "more than" this)
NEEDED_CAP = 10_000


def n_probes(n_after_good: int) -> int:
    """⌈log2 N⌉: the probes a clean bisection of N commits after the good one needs (0 for N = 1)."""
    return math.ceil(math.log2(n_after_good)) if n_after_good > 1 else 0


def looks(max_starts: int, min_starts: int = DEFAULT_MIN_STARTS) -> int:
    return max(1, max_starts - min_starts + 1)


def probe_alpha(probes: int, max_starts: int, min_starts: int = DEFAULT_MIN_STARTS) -> float:
    """The one-sided α of each look at a probe (see the module doc)."""
    per_probe = FAMILY_ALPHA / max(1, probes)
    return per_probe / (LOOK_SPEND + math.log(looks(max_starts, min_starts)))


@dataclass(frozen=True)
class SpentPolicy(Policy):
    """:class:`~.sequential.Policy` whose looks spend α as the probes' do (``ALPHA / (LOOK_SPEND + ln looks)``):
    a bisection may allow many more starts than the judge's default maximum, and α/2 per look inflates
    the error with the number of looks."""

    @property
    def look_alpha(self) -> float:
        return FAMILY_ALPHA / (LOOK_SPEND + math.log(looks(self.max_starts, self.min_starts)))


def pooled_sd(*sides: Starts) -> tuple[float, int]:
    """The pooled SD of log start centres over ``sides`` and its degrees of freedom (0, 0 when none)."""
    ss, df = 0.0, 0
    for s in sides:
        if s.k >= 2:
            lc = s.log_centres
            ss += float(((lc - lc.mean()) ** 2).sum())
            df += s.k - 1
    return (math.sqrt(ss / df), df) if df else (0.0, 0)


# ------------------------------------------------------------------------------------------ budget


def _pct(ratio: float) -> str:
    """``ratio`` as a change in percent with one decimal and a typographic minus: ``−8.0``."""
    return signed_pct(ratio, 1).replace("-", "\u2212")


def change(ratio: float, low: float, high: float) -> str:
    """A relative change with its interval: ``−8.0 % [−10.1, −5.9]``."""
    return f"{_pct(ratio)} % [{_pct(low)}, {_pct(high)}]"


def _power_probe(delta: float, sd: float, k: int, alpha: float) -> float:
    """Power of one look at a probe with ``k`` starts (endpoints with ``k`` each) at one endpoint's level."""
    df = 3 * k - 3
    if comb(2 * k, k) * alpha <= 1:       # k vs k starts cannot give a rank p below alpha
        return 0.0
    if df < 1 or sd <= 0:
        return 1.0 if sd <= 0 and delta > 0 else 0.0
    nc = delta / (sd * math.sqrt(2 / (k * RANK_EFFICIENCY)))
    return 1.0 - float(nctdtr(df, nc, stdtrit(df, 1 - alpha)))


def _power_endpoints(delta: float, sd: float, k: int, margin: float, alpha: float) -> float:
    """Power of the endpoints' verdict "differs" (the ratio's CI beyond ±margin) with ``k`` starts each."""
    df = 2 * k - 2
    if df < 1 or sd <= 0:
        return 1.0 if sd <= 0 and delta > margin else 0.0
    nc = (delta - margin) / (sd * math.sqrt(2 / k))
    return 1.0 - float(nctdtr(df, nc, stdtrit(df, 1 - alpha / 2)))


def starts_needed(delta: float, sd: float, *, probes: int, margin: float = 0.0, power: float = POWER,
                  min_starts: int = DEFAULT_MIN_STARTS, endpoint_alpha: float | None = None) -> int | None:
    """The fewest starts per commit that locate a change of ``delta`` (log ratio) against a between-start
    spread ``sd``: the endpoints come out "differs" beyond ``margin`` and a probe at either endpoint's
    level is decided, each with ``power``, at the α the search spends with ``probes`` probes and that many
    starts as its maximum. ``None`` when no number up to :data:`NEEDED_CAP` does (no change to locate)."""
    delta = abs(delta)
    if delta <= margin:
        return None
    def enough(k: int) -> bool:
        ep_alpha = endpoint_alpha if endpoint_alpha is not None else SpentPolicy(min_starts, k).look_alpha
        return (_power_endpoints(delta, sd, k, margin, ep_alpha) >= power
                and _power_probe(delta, sd, k, probe_alpha(probes, k, min_starts)) >= power)

    lo, hi = max(2, min_starts), max(2, min_starts)
    while not enough(hi):
        if hi >= NEEDED_CAP:
            return None
        lo, hi = hi + 1, min(NEEDED_CAP, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


@dataclass(frozen=True)
class Feasibility:
    """Whether the endpoints' change can be located within the budget, and what it would take."""

    feasible: bool
    verdict: str                 # the endpoints' verdict: same | differs | inconclusive
    ratio: float                 # bad / good (start-level centres)
    low: float                   # its interval (the judgement's)
    high: float
    sd: float                    # pooled between-start spread of the endpoints (log scale ≈ CV)
    df: int
    k_good: int
    k_bad: int
    probes: int                  # ⌈log2 N⌉
    max_starts: int
    needed: int | None           # starts per commit it takes (None: no change of at least the minimum effect)
    min_effect: float
    alpha: float                 # per-look α of a probe at this budget

    @property
    def effect(self) -> float:
        return self.ratio - 1

    def line(self, metric: str = "tg") -> str:
        """The one line a refusal prints (and the report shows): effect, spread, what it would take."""
        eff = (f"{metric} {change(self.ratio, self.low, self.high)} from good to bad ({self.k_good}+{self.k_bad} "
               f"starts), between-start spread {self.sd:.1%}")
        if self.verdict == SAME:
            return f"the endpoints are the same within ±{self.min_effect:.0%}: {eff}; there is no change to locate"
        if self.needed is None:
            return (f"the endpoints do not clearly differ: {eff}; the measured change is within the minimum effect "
                    f"±{self.min_effect:.0%}, so no number of starts locates a change of at least that")
        need = f"about {self.needed} starts per commit ({self.probes} probes)"
        if self.feasible:
            return f"locatable: {eff}; it takes {need}, the budget is {self.max_starts}"
        head = ("the endpoints do not clearly differ" if self.verdict != DIFFERS
                else f"the change cannot be located within --max-launches {self.max_starts}")
        return f"{head}: {eff}; locating it would take {need}"

    def to_dict(self) -> dict:
        return {"feasible": self.feasible, "verdict": self.verdict, "ratio": self.ratio, "low": self.low,
                "high": self.high, "sd": self.sd, "df": self.df, "k_good": self.k_good, "k_bad": self.k_bad,
                "probes": self.probes, "max_starts": self.max_starts, "needed": self.needed,
                "min_effect": self.min_effect, "alpha": self.alpha}


def feasibility(good: Starts, bad: Starts, judgement: Judgement, *, probes: int,
                max_starts: int = DEFAULT_MAX_STARTS, min_starts: int = DEFAULT_MIN_STARTS) -> Feasibility:
    """Can the endpoints' change be located with at most ``max_starts`` starts per commit? (see the module doc).

    ``judgement`` is the endpoints' verdict (bad relative to good, with the minimum effect E). Feasible
    only when it says "differs" and :func:`starts_needed` is within the budget; for "inconclusive" the
    number is planned for the measured change (none when it is within E)."""
    sd, df = pooled_sd(good, bad)
    delta = abs(math.log(judgement.ratio))
    margin = math.log1p(judgement.min_effect)
    if judgement.verdict == SAME:
        needed = None
    else:
        needed = starts_needed(delta, sd, probes=probes, margin=margin, min_starts=min_starts)
    ok = judgement.verdict == DIFFERS and needed is not None and needed <= max_starts
    return Feasibility(ok, judgement.verdict, judgement.ratio, judgement.low, judgement.high, sd, df, good.k, bad.k,
                       probes, max_starts, needed, judgement.min_effect, probe_alpha(probes, max_starts, min_starts))


# ------------------------------------------------------------------------------------------ probes


@dataclass(frozen=True)
class Placement:
    """One probe against both endpoints (see :func:`place`)."""

    verdict: str              # good | bad | between | open
    k: int                    # the probe's starts
    k_good: int
    k_bad: int
    vs_good: float            # probe / good (centres of the start centres)
    vs_bad: float             # probe / bad
    p_good: float             # one-sided rank test: the probe's starts moved from good's toward bad
    p_bad: float              # one-sided rank test: the probe's starts moved from bad's toward good
    alpha: float
    sd: float                 # pooled between-start spread (reported; the decision is rank-based)
    df: int
    held: bool = False        # the endpoints' starts beside the probe put it on the other side: no verdict
    moved: bool = False       # the endpoints moved since their earlier starts: judged on the beside starts alone

    @property
    def decided(self) -> bool:
        return self.verdict in (GOOD, BAD)

    @property
    def position(self) -> float:
        """Where the probe sits from good (0) to bad (1), on the log scale."""
        gap = math.log(self.vs_good) - math.log(self.vs_bad)
        return math.log(self.vs_good) / gap if gap else math.nan

    def fmt(self) -> str:
        """``bad: −14.2 % vs good, +0.8 % vs bad (5 starts; p 0.0004 / 0.61, α 0.0035)``."""
        return (f"{self.verdict}: {_pct(self.vs_good)} % vs good, {_pct(self.vs_bad)} % vs bad "
                f"({self.k} starts; p {self.p_good:.2g} / {self.p_bad:.2g}, α {self.alpha:.2g})"
                + ("; held: the endpoints' starts beside it put it on the other side" if self.held else "")
                + ("; judged on the endpoints' starts beside it alone (they moved)" if self.moved else ""))

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "k": self.k, "k_good": self.k_good, "k_bad": self.k_bad,
                "vs_good": self.vs_good, "vs_bad": self.vs_bad, "p_good": self.p_good, "p_bad": self.p_bad,
                "alpha": self.alpha, "sd": self.sd, "df": self.df, "held": self.held, "moved": self.moved,
                "test": RANK_TEST}


@lru_cache(maxsize=1024)
def _u_tail(n1: int, n2: int) -> np.ndarray:
    """P(U ≥ u), u = 0 … n1·n2, of the Mann–Whitney U of n1 vs n2 values under the null (no ties): the
    coefficients of the Gaussian binomial [n1 + n2 choose n1]_q, built as ∏ (1 − q^(n2+i)) / (1 − q^i)."""
    m = n1 * n2
    c = np.zeros(m + 1)
    c[0] = 1.0
    for i in range(1, n1 + 1):
        step = n2 + i
        if step <= m:
            c[step:] = c[step:] - c[: m + 1 - step].copy()
        for r in range(i):                      # ÷ (1 − q^i): a running sum along every i-th coefficient
            c[r::i] = np.cumsum(c[r::i])
    c = np.maximum(c, 0.0)
    tail = np.cumsum(c[::-1])[::-1]
    return tail / tail[0]


def rank_p(x: np.ndarray, y: np.ndarray) -> float:
    """One-sided Mann–Whitney p that the values ``x`` lie stochastically above ``y``: exact up to
    :data:`EXACT_MAX` pairs (where it matters: k vs m starts can give no p below 1 / C(k + m, k)), the
    normal approximation beyond; a tie counts against the claim."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return 1.0
    diff = np.subtract.outer(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    u = int((diff > 0).sum())                   # ties (diff == 0) add nothing: conservative
    if n1 * n2 <= EXACT_MAX:
        return float(_u_tail(n1, n2)[u])
    mean, sd = n1 * n2 / 2, math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    return float(ndtr(-(u - 0.5 - mean) / sd))


def shift_p(a: Starts, b: Starts, direction: int) -> float:
    """One-sided rank p that ``b``'s starts moved from ``a``'s in ``direction`` (+1 faster, −1 slower)."""
    return rank_p(direction * b.log_centres, direction * a.log_centres)


def place(probe: Starts, good: Starts, bad: Starts, *, alpha: float, min_starts: int = DEFAULT_MIN_STARTS,
          beside: tuple[Starts, Starts] | None = None) -> Placement:
    """The probe's verdict against the two endpoints; ``open`` below ``min_starts`` starts.

    Rank tests on start centres (:func:`rank_p`): **bad** when the probe's starts moved from good's
    toward bad (``p_good`` < ``alpha``), did not also move from bad's (that is **between**: a partial
    change, or several) and the median of its starts is on bad's side of the endpoints' medians'
    midpoint; **good** the mirror image; **open** otherwise: more starts, never a guess. A rank test
    needs no shape of the start distribution: bimodal starts, or one start under another process's
    load, make it no more likely to err (it is exact when the probe is an endpoint's twin).

    ``beside`` are the endpoints' starts measured *beside* the probe's (interleaved with them). A
    machine's speed wanders (a neighbour on a shared VM): a probe measured a minute after most of the
    endpoints' starts can sit beyond an endpoint's start distribution without being that commit. So a
    good or bad verdict also needs the probe's median on the same side of the midpoint of the beside
    starts' medians; where the two sides disagree the probe stays open (``held``) and gets more starts.
    This only ever withholds a verdict: it cannot add a wrong one."""
    sd, df = pooled_sd(probe, good, bad)
    if not (probe and good and bad):
        nan = math.nan
        return Placement(OPEN, probe.k, good.k, bad.k, nan, nan, 1.0, 1.0, alpha, sd, df)
    lp, lg, lb = probe.log_centres, good.log_centres, bad.log_centres
    sign = 1.0 if lb.mean() >= lg.mean() else -1.0
    p_good = rank_p(sign * lp, sign * lg)
    p_bad = rank_p(sign * lb, sign * lp)
    mid = _mid(good, bad)
    bad_side = sign * (float(np.median(lp)) - mid) > 0
    held = bool(beside and beside[0] and beside[1]
                and (sign * (float(np.median(lp)) - _mid(*beside)) > 0) != bad_side)
    verdict = OPEN
    if probe.k < min_starts:
        pass
    elif p_good < alpha and p_bad < alpha:
        verdict = BETWEEN
    elif held:
        pass
    elif p_good < alpha and bad_side:
        verdict = BAD
    elif p_bad < alpha and not bad_side:
        verdict = GOOD
    vs_good, vs_bad = math.exp(float(lp.mean() - lg.mean())), math.exp(float(lp.mean() - lb.mean()))
    return Placement(verdict, probe.k, good.k, bad.k, vs_good, vs_bad, p_good, p_bad, alpha, sd, df, held)


def _mid(good: Starts, bad: Starts) -> float:
    """The midpoint of two sides' median log start centres."""
    return (_median(good) + _median(bad)) / 2


# ------------------------------------------------------------------------------------------ a fixed value


@dataclass(frozen=True)
class Side:
    """Starts against a fixed value: ``above`` / ``below`` when the interval of their centre clears it."""

    verdict: str          # above | below | open
    centre: float
    low: float
    high: float
    k: int
    value: float

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "centre": self.centre, "low": self.low, "high": self.high, "k": self.k,
                "value": self.value}


def side(starts: Starts, value: float, *, alpha: float, min_starts: int = DEFAULT_MIN_STARTS) -> Side:
    """Is the level of ``starts`` above or below ``value``? A one-sample t interval (two-sided ``alpha``)
    on the log start centres; ``open`` while it contains the value or below ``min_starts`` starts. The
    value is taken as exact: its own noise is not accounted for."""
    lc = starts.log_centres
    m = float(lc.mean()) if starts.k else math.nan
    if starts.k < max(2, min_starts):
        return Side(OPEN, math.exp(m) if starts.k else math.nan, math.nan, math.nan, starts.k, value)
    half = t_quantile(starts.k - 1, 1 - alpha) * float(lc.std(ddof=1)) / math.sqrt(starts.k)
    lo, hi = math.exp(m - half), math.exp(m + half)
    verdict = ABOVE if lo > value else BELOW if hi < value else OPEN
    return Side(verdict, math.exp(m), lo, hi, starts.k, value)


#: an endpoint's earlier starts still describe it beside a probe while the median of its starts beside the
#: probe is within this share of the endpoints' gap (log scale) of theirs (see :func:`references`)
MOVED_SHARE = 0.25


def references(lead: tuple[Starts, Starts], beside: tuple[Starts, Starts]) -> tuple[Starts, Starts, bool]:
    """What a probe is judged against: each endpoint's starts measured just before it (``lead``) and beside it
    (interleaved with its own), or the beside starts alone once either endpoint has **moved** — the median of
    its beside starts more than :data:`MOVED_SHARE` of the endpoints' gap from the median of its earlier ones.

    A shared machine's speed wanders (on the CI VM by ±15–30 % within seconds): starts of a minute ago bias a
    probe by as much as the machine moved since, and a move of half the gap flips its verdict. The beside
    starts are balanced in time with the probe's, so they carry no such bias; the earlier ones add power
    (a probe is decided in fewer starts) only while they still describe the endpoint. Returns (good, bad,
    moved). On a simulated machine whose speed jumps this misjudged 1 probe in 150 searches where the
    earlier starts always counting misjudged 7 (``benchmarks/bisect_drift.py``), and on a quiet one it costs
    what they cost."""
    (lg, lb), (bg, bb) = lead, beside
    both = [Starts.of(list(lead_.groups) + list(bes.groups)) for lead_, bes in ((lg, bg), (lb, bb))]
    if not (lg and lb and bg and bb):
        return both[0], both[1], False
    gap = abs(_median(lg) - _median(lb))
    moved = any(abs(_median(bes) - _median(lead_)) > MOVED_SHARE * gap for lead_, bes in ((lg, bg), (lb, bb)))
    return (bg, bb, True) if moved else (both[0], both[1], False)


def _median(starts: Starts) -> float:
    return float(np.median(starts.log_centres))


def side_alpha(max_starts: int, min_starts: int = DEFAULT_MIN_STARTS) -> float:
    """The two-sided α of each look of :func:`side` when it is looked at after every start."""
    return FAMILY_ALPHA / (LOOK_SPEND + math.log(looks(max_starts, min_starts)))


__all__ = ["ABOVE", "BAD", "BELOW", "BETWEEN", "GOOD", "OPEN", "Feasibility", "SpentPolicy", "change", "Placement", "Side", "feasibility",
           "n_probes", "place", "pooled_sd", "probe_alpha", "references", "side", "side_alpha",
           "starts_needed"]
