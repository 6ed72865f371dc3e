"""Issue 41, points 3 and 4: a spread borrowed at K = 2 is honestly bounded, and an inconclusive verdict
says what K would settle it (``--launches auto`` uses that number).

Seeded simulations of the real judge (:func:`llamaforge.judge.judge`) on synthetic starts, 1,000 trials each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import llamaforge.judge.spread as spread_mod
from llamaforge.judge import DIFFERS, INCONCLUSIVE, SAME, Policy, Starts, judge, pair, pooled
from llamaforge.judge.needs import FUTILITY, settle_probability, starts_to_resolve
from llamaforge.judge.sequential import UNRESOLVED
from llamaforge.judge.wording import needs_text

TRIALS = 1000


def _donor(rng: np.random.Generator, sd: float, df: int) -> spread_mod.Spread:
    """A build's pooled spread from ``df / 2`` other points of 3 starts each (true SD ``sd``)."""
    pts = [Starts.of_centres(list(100 * np.exp(rng.normal(0, sd, 3)))) for _ in range(df // 2)]
    prior = pooled(pts, what="the build")
    assert prior is not None and prior.df == df
    return prior


def false_differs(seed: int, *, donor_sd: float, donor_df: int, ratio: float, trials: int = TRIALS) -> float:
    """Identical builds, 2 starts a side, both borrowing one donor's spread; the point's true spread is
    ``ratio`` × the donor's. The share of trials called "differs"."""
    rng = np.random.default_rng(seed)
    n = 0
    for _ in range(trials):
        prior = _donor(rng, donor_sd, donor_df)
        a, b = (Starts.of_centres(list(100 * np.exp(rng.normal(0, ratio * donor_sd, 2)))) for _ in range(2))
        j = judge(a, b, prior_a=prior, prior_b=prior)
        n += j is not None and j.verdict == DIFFERS
    return n / trials


#: (donor SD, donor df): a quiet build and a noisy one, few and many degrees of freedom
CASES = [(0.10, 4), (0.10, 20), (0.20, 20)]


@pytest.mark.parametrize(("donor_sd", "donor_df"), CASES)
def test_a_borrowed_spread_keeps_false_differs_within_5_percent_when_the_point_is_twice_as_noisy(donor_sd, donor_df):
    rate = false_differs(410 + donor_df, donor_sd=donor_sd, donor_df=donor_df, ratio=2.0)
    assert rate <= 0.05, rate


def test_a_borrowed_spread_taken_as_exact_fails_that_target(monkeypatch):
    """The rule before issue 41 (the donor's SD as a known spread): the simulation above fails it, so it
    measures what it claims to."""
    def exact(starts, prior):
        base = prior or spread_mod.CONSERVATIVE
        mine = spread_mod.own(starts)
        return spread_mod.Spread(max(base.sd, mine.sd if mine else 0.0), None, base.basis)

    monkeypatch.setattr("llamaforge.judge.verdict.for_small_k", exact)
    rate = false_differs(430, donor_sd=0.20, donor_df=20, ratio=2.0)
    assert rate > 0.05, rate


def test_a_borrowed_spread_still_tells_a_clear_gap_and_says_its_bound():
    prior = pooled([Starts.of([[100.0], [101.0], [99.5]]) for _ in range(3)], what="cpu build")
    a, b = [[100.0, 100.2], [100.5, 100.4]], [[110.0, 110.3], [110.6, 110.1]]
    j = judge(a, b, prior_a=prior, prior_b=prior)
    assert j is not None and j.verdict == DIFFERS
    assert "up to 2× that" in (j.assumed or "") and "t with 6 df" in (j.assumed or "") and j.df == 6


# ------------------------------------------------------------------------------------------ point 4


def test_starts_to_resolve_is_the_power_calculation_of_the_verdict():
    # identical builds at a CV of 5 % (each side): "same within ±5 %" takes about 23 starts per side
    n = starts_to_resolve(0.0, 0.05, 0.05, min_effect=0.05)
    assert n.verdict == SAME and n.k == 23 and n.text() == "same within ±5 % needs ≈ K=23"
    k = np.array([n.k - 1, n.k])
    p = settle_probability(0.0, 2 * 0.05 ** 2, k, min_effect=0.05, alpha=0.05)
    assert p[0] < 0.8 <= p[1]
    # a clear +15 % at that spread: a few starts
    d = starts_to_resolve(math.log(1.15), 0.05, 0.05, min_effect=0.05, k_now=3)
    assert d.verdict == DIFFERS and 3 <= d.k <= 8 and "differs beyond ±5 %" in d.text()
    # exactly at the margin nothing settles it
    edge = starts_to_resolve(math.log(1.05), 0.05, 0.05, min_effect=0.05)
    assert edge.k is None and edge.text() == "differs beyond ±5 % needs more than K=1000"
    # quieter starts need fewer; a stricter α more
    assert starts_to_resolve(0.0, 0.03, 0.03, min_effect=0.05).k < n.k
    assert starts_to_resolve(0.0, 0.05, 0.05, min_effect=0.05, alpha=0.025).k > n.k
    assert needs_text("same", 0.1, 7) == "same within ±10 % needs ≈ K=7"


def test_the_number_it_gives_does_settle_identical_builds_about_as_often_as_it_promises():
    """Identical builds at a CV of 5 %: measured with the K the judge asks for, the verdict is settled in
    about :data:`~llamaforge.judge.needs.POWER` of trials (the plug-in holds when the spread is right)."""
    k = starts_to_resolve(0.0, 0.05, 0.05, min_effect=0.05).k
    rng = np.random.default_rng(44)
    settled = sum(judge(Starts.of_centres(list(np.exp(rng.normal(4.6, 0.05, k)))),
                        Starts.of_centres(list(np.exp(rng.normal(4.6, 0.05, k))))).verdict != INCONCLUSIVE
                  for _ in range(400)) / 400
    assert 0.7 <= settled <= 0.9, settled


def test_an_inconclusive_verdict_carries_and_prints_what_would_settle_it():
    rng = np.random.default_rng(3)
    a = Starts.of_centres(list(100 * np.exp(rng.normal(0, 0.05, 5))))
    b = Starts.of_centres(list(101 * np.exp(rng.normal(0, 0.05, 5))))
    j = judge(a, b)
    assert j is not None and j.verdict == INCONCLUSIVE and j.needs is not None and j.needs.k > 5
    assert f"needs ≈ K={j.needs.k}" in j.fmt() and j.to_dict()["needs"]["k"] == j.needs.k
    settled = judge(a, Starts.of_centres([2 * c for c in a.centres]))
    assert settled.verdict == DIFFERS and settled.to_dict()["needs"] is None and "needs" not in settled.fmt()


def test_launches_auto_stops_a_verdict_the_budget_cannot_settle_and_says_why():
    """Identical sides at a CV of 15 % with at most 6 starts: "same within ±5 %" would need far more, so the
    pair stops at the first look instead of spending every start; a clear difference still runs to its verdict."""
    rng = np.random.default_rng(8)
    run = pair(lambda: [100 * math.exp(rng.normal(0, 0.15))], lambda: [100 * math.exp(rng.normal(0, 0.15))],
               Policy(max_starts=6))
    assert run.status == UNRESOLVED and run.k == (3, 3)            # half of the 6 allowed: futile
    assert run.judgement.needs is not None and run.judgement.needs.beyond(6, FUTILITY)
    assert "needs" in run.reason and "beyond" in run.reason
    clear = pair(lambda: [100 * math.exp(rng.normal(0, 0.03))], lambda: [130 * math.exp(rng.normal(0, 0.03))],
                 Policy(max_starts=6))
    assert clear.judgement.verdict == DIFFERS
