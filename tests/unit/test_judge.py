"""The judge's statistics (llamaforge.judge), on simulated server starts: error rates and power.

Every simulation draws whole starts: a start's level from N(level, sd_between), its requests from
N(start level, sd_within). 1,000 seeded trials per case; the thresholds are the acceptance of the
"one honest judge" issue. An always-inconclusive judge fails the power tests; a request-level judge
fails the tight-within/far-apart tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from llamaforge.judge import (
    CONSERVATIVE,
    DIFFERS,
    INCONCLUSIVE,
    SAME,
    Policy,
    Starts,
    control,
    estimate,
    judge,
    next_start,
    pair,
    point_stop,
    pooled,
)
from llamaforge.judge.spread import WIDER

TRIALS = 1000
VULKAN = (120.0, 24.0, 6.0)        # level, sd between starts, sd within a start (t/s): the H200's Vulkan spread
CUDA_LIKE = (194.0, 5.0, 2.0)
VULKAN_LIKE = (130.0, 24.0, 6.0)


def starts(rng: np.random.Generator, level: float, sb: float, sw: float, k: int, r: int = 2) -> list[list[float]]:
    return [list(np.maximum(rng.normal(m, sw, r), 1.0)) for m in np.maximum(rng.normal(level, sb, k), 1.0)]


def drawer(rng: np.random.Generator, level: float, sb: float, sw: float, r: int = 2):
    return lambda: list(np.maximum(rng.normal(max(rng.normal(level, sb), 1.0), sw, r), 1.0))


def rate(verdicts: list[str], which: str) -> float:
    return verdicts.count(which) / len(verdicts)


def fixed_k(a: tuple, b: tuple, k: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [judge(starts(rng, *a, k), starts(rng, *b, k)).verdict for _ in range(TRIALS)]   # type: ignore[union-attr]


def auto(a: tuple, b: tuple, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(TRIALS):
        run = pair(drawer(rng, *a), drawer(rng, *b), Policy())
        out.append(run.judgement.verdict)   # type: ignore[union-attr]
    return out


SHIFTED = (VULKAN[0] * 1.15, VULKAN[1], VULKAN[2])


@pytest.mark.parametrize("k", [2, 5])
def test_a_true_15_percent_shift_is_rarely_called_same_at_fixed_k(k: int) -> None:
    assert rate(fixed_k(VULKAN, SHIFTED, k, seed=k), SAME) <= 0.05


def test_a_true_15_percent_shift_is_rarely_called_same_with_auto_launches() -> None:
    assert rate(auto(VULKAN, SHIFTED, seed=11), SAME) <= 0.05


@pytest.mark.parametrize("k", [2, 5])
def test_identical_distributions_are_rarely_called_different_at_fixed_k(k: int) -> None:
    assert rate(fixed_k(VULKAN, VULKAN, k, seed=20 + k), DIFFERS) <= 0.05


def test_identical_distributions_are_rarely_called_different_with_auto_launches() -> None:
    """Looking after every start and stopping at the first settled verdict inflates the error; the
    sequential rule spends α per look so that it stays within α."""
    assert rate(auto(VULKAN, VULKAN, seed=23), DIFFERS) <= 0.05


@pytest.mark.parametrize("k", [2, 5])
def test_tight_requests_in_far_apart_starts_get_no_significance_mark(k: int) -> None:
    """Requests agree within 0.5 % inside each start, starts spread 20 %: a request-level test would call
    almost every pair different; the start-level judge does not."""
    tight = (120.0, 24.0, 0.6)
    verdicts = fixed_k(tight, tight, k, seed=30 + k)
    assert rate(verdicts, DIFFERS) <= 0.05


def test_two_start_points_get_no_p_value_and_no_confidence_interval() -> None:
    a = [[100.0, 100.1], [140.0, 140.1]]
    b = [[110.0, 110.2], [150.0, 150.1]]
    j = judge(a, b)
    assert j is not None and j.small and j.verdict == INCONCLUSIVE
    d = j.to_dict()
    assert d["p_differs"] is None and d["p_same"] is None
    assert "starts" in j.interval_text() and "[" not in j.interval_text()
    est = estimate(a)
    assert est is not None and est.kind == "range" and "CI" not in est.interval_label


@pytest.mark.parametrize("k", [5])
def test_power_cuda_like_against_vulkan_like_at_k5(k: int) -> None:
    assert rate(fixed_k(CUDA_LIKE, VULKAN_LIKE, k, seed=40), DIFFERS) >= 0.90


def test_power_cuda_like_against_vulkan_like_with_auto_launches() -> None:
    """An always-inconclusive judge fails this."""
    assert rate(auto(CUDA_LIKE, VULKAN_LIKE, seed=41), DIFFERS) >= 0.90


def test_a_170_fold_gap_with_one_start_each_is_differs_with_the_assumption_stated() -> None:
    cpu, lavapipe = [[101.0, 99.0, 100.0]], [[0.59, 0.6, 0.61]]
    j = judge(cpu, lavapipe)
    assert j is not None and j.verdict == DIFFERS and j.ratio < 0.01
    assert j.assumed and "assumed" in j.assumed and j.mark == "-*"


def test_a_small_k_verdict_uses_the_builds_measured_spread_when_the_store_has_it() -> None:
    build_points = [Starts.of([[100.0], [101.0], [99.5]]) for _ in range(3)]
    prior = pooled(build_points, what="cpu build")
    assert prior is not None and prior.sd < 0.02 and prior.df == 6
    a, b = [[100.0, 100.2], [100.5, 100.4]], [[110.0, 110.3], [110.6, 110.1]]
    assert judge(a, b).verdict == INCONCLUSIVE            # conservative bound: 10 % cannot be told apart
    j = judge(a, b, prior_a=prior, prior_b=prior)         # this build's starts agree within 1 %
    assert j is not None and j.verdict == DIFFERS and "cpu build" in (j.assumed or "")


def test_a_wide_two_start_point_uses_its_own_spread_when_wider_than_the_prior() -> None:
    prior = pooled([Starts.of([[100.0], [100.5], [99.5]])] * 3)
    a = [[100.0], [150.0]]
    b = [[200.0], [205.0]]
    j = judge(a, b, prior_a=prior, prior_b=prior)
    assert j is not None and WIDER in (j.assumed or "") and "own 2 starts spread wider" in (j.assumed or "")


def test_estimate_labels_by_number_of_starts() -> None:
    one, two, three = estimate([[10.0, 11.0]]), estimate([[10.0], [12.0]]), estimate([[10.0], [12.0], [11.0]])
    assert one.kind == "single" and "spread unknown" in one.fmt()
    assert two.kind == "range" and two.low == 10.0 and two.high == 12.0 and "range" in two.fmt()
    assert three.kind == "ci" and three.low < 11.0 < three.high and three.shape == "3×1"


def test_bimodal_starts_are_reported_as_two_modes() -> None:
    rng = np.random.default_rng(5)
    low = [list(rng.normal(104, 2, 2)) for _ in range(3)]
    high = [list(rng.normal(158, 3, 2)) for _ in range(3)]
    est = estimate(low + high)
    assert est is not None and est.bimodal
    assert [m.k for m in est.modes] == [3, 3]
    assert "modes" in est.fmt()
    unimodal = estimate([list(rng.normal(130, 4, 2)) for _ in range(6)])
    assert unimodal is not None and not unimodal.bimodal


def test_holm_turns_marginal_differences_into_inconclusive_and_says_so() -> None:
    rng = np.random.default_rng(7)
    fam = [judge(starts(rng, 100, 3, 1, 4), starts(rng, 112, 3, 1, 4)) for _ in range(30)]
    raw = sum(1 for j in fam if j.verdict == DIFFERS)
    adj = control(fam)
    kept = sum(1 for j in adj if j.verdict == DIFFERS)
    assert kept <= raw
    assert all(j.adjusted == "Holm over 30 comparisons" for j in adj)
    strong = [judge(starts(rng, 100, 1, 1, 5), starts(rng, 200, 1, 1, 5)) for _ in range(30)]
    assert all(j.verdict == DIFFERS for j in control(strong))


def test_point_stop_asks_for_more_until_precise_and_marks_unresolved_at_the_maximum() -> None:
    pol = Policy(min_starts=3, max_starts=5, precision=0.05)
    assert point_stop(estimate([[100.0], [101.0]]), pol).more
    assert not point_stop(estimate([[100.0], [100.5], [100.2]]), pol).more
    wide = [[100.0], [150.0], [120.0], [90.0], [140.0]]
    stop = point_stop(estimate(wide), pol)
    assert not stop.more and stop.status == "unresolved" and "spread" in stop.reason
    assert point_stop(estimate(wide[:4]), pol).more
    assert point_stop(estimate([[100.0], [100.5], [100.2]]), pol, open_comparisons=["CUDA/Vulkan tg"]).more


def test_prediction_interval_for_one_new_start_is_wider_than_the_centres_interval() -> None:
    s = Starts.of([[100.0], [104.0], [98.0], [102.0]])
    pi, est = next_start(s), estimate(s)
    assert pi.low < est.low and pi.high > est.high and pi.contains(101.0)
    assert next_start(Starts.of([[100.0], [101.0]])).assumed == CONSERVATIVE.basis
