"""llamaforge.judge.locate: the budget of a bisection (a power calculation), one probe against two
endpoints' start distributions, and starts against a fixed value — on simulated starts, seeded."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamaforge.judge import Policy, Starts, judge
from llamaforge.judge.locate import (
    ABOVE,
    BAD,
    BELOW,
    BETWEEN,
    FAMILY_ALPHA,
    GOOD,
    OPEN,
    SpentPolicy,
    change,
    feasibility,
    n_probes,
    place,
    probe_alpha,
    references,
    side,
    starts_needed,
)


def starts(rng: np.random.Generator, level: float, sd_between: float, k: int, r: int = 3,
           sd_within: float = 0.01) -> Starts:
    return Starts.of([list(c * np.exp(rng.normal(0, sd_within, r))) for c in level * np.exp(rng.normal(0, sd_between, k))])


def test_starts_needed_grows_with_the_spread_and_shrinks_with_the_effect() -> None:
    d15, d8 = math.log(1 / 0.85), math.log(1 / 0.92)
    a = starts_needed(d15, 0.06, probes=4)
    b = starts_needed(d15, 0.12, probes=4)
    c = starts_needed(d8, 0.12, probes=4)
    assert a is not None and b is not None and c is not None
    assert a < b < c
    assert b >= 3 * a                    # ∝ spread²
    # never fewer than the starts whose rank p-value can reach the per-look α at all (k vs k: 1 / C(2k, k))
    floor = next(k for k in range(3, 50) if math.comb(2 * k, k) * probe_alpha(4, k) > 1)
    assert starts_needed(d15, 0.001, probes=4) == floor
    # a change within the minimum effect can never be shown to exceed it
    assert starts_needed(math.log(1 / 0.97), 0.01, probes=4, margin=math.log1p(0.05)) is None


def test_more_probes_spend_less_alpha_each_and_need_more_starts() -> None:
    assert probe_alpha(8, 10) < probe_alpha(2, 10)
    assert probe_alpha(4, 40) < probe_alpha(4, 10)         # more looks: less α per look
    d = math.log(1 / 0.9)
    assert starts_needed(d, 0.06, probes=8) >= starts_needed(d, 0.06, probes=1)
    assert [n_probes(n) for n in (1, 2, 3, 16, 17)] == [0, 1, 2, 4, 5]


def test_the_power_calculation_delivers_its_power_in_simulation() -> None:
    """With the starts it asks for, a probe at the bad level, judged after every start, is decided bad within
    the budget in ≥ 90 % of trials (the planned power)."""
    rng = np.random.default_rng(3)
    delta, sd, probes = math.log(1 / 0.88), 0.06, 4
    k = starts_needed(delta, sd, probes=probes)
    assert k is not None and 3 <= k <= 40
    alpha = probe_alpha(probes, k)
    decided = 0
    for _ in range(300):
        g, b, p = starts(rng, 100, sd, k), starts(rng, 88, sd, k), starts(rng, 88, sd, k)
        verdict = next((v for j in range(3, k + 1) if (v := place(Starts.of(p.groups[:j]), g, b, alpha=alpha).verdict)
                        != OPEN), OPEN)
        decided += verdict == BAD
    assert decided / 300 >= 0.9


TRIALS = 600


def _sequential_probe(rng: np.random.Generator, level: float, max_k: int, alpha: float, sd: float = 0.1,
                      k_ends: int = 10) -> str:
    g, b = starts(rng, 100, sd, k_ends), starts(rng, 85, sd, k_ends)
    groups: list[list[float]] = []
    for _ in range(max_k):
        groups.append([level * math.exp(rng.normal(0, sd))])
        pl = place(Starts.of(groups), g, b, alpha=alpha)
        if pl.decided:
            return pl.verdict
    return OPEN


@pytest.mark.parametrize("max_k", [10, 40])
def test_looking_after_every_start_keeps_wrong_probe_verdicts_within_the_per_probe_budget(max_k: int) -> None:
    """A truly good probe, judged after every start up to the maximum, is called bad in at most the
    per-probe share of the family's α (4 probes: 1.25 %); a plain α per look would exceed it 3–5×."""
    rng = np.random.default_rng(max_k)
    probes = 4
    alpha = probe_alpha(probes, max_k)
    verdicts = [_sequential_probe(rng, 100, max_k, alpha) for _ in range(TRIALS)]
    assert verdicts.count(BAD) / TRIALS <= FAMILY_ALPHA / probes
    assert verdicts.count(GOOD) / TRIALS >= 0.5                 # and it does decide (not always "open")
    plain = [_sequential_probe(rng, 100, max_k, FAMILY_ALPHA / probes) for _ in range(TRIALS)]
    assert plain.count(BAD) > verdicts.count(BAD)


def test_place_good_bad_between_and_open() -> None:
    rng = np.random.default_rng(1)
    g, b = starts(rng, 100, 0.02, 8), starts(rng, 80, 0.02, 8)
    a = probe_alpha(4, 10)
    assert place(starts(rng, 100, 0.02, 4), g, b, alpha=a).verdict == GOOD
    assert place(starts(rng, 80, 0.02, 4), g, b, alpha=a).verdict == BAD
    assert place(starts(rng, 90, 0.01, 10), g, b, alpha=a).verdict == BETWEEN     # a partial change
    assert place(starts(rng, 80, 0.02, 2), g, b, alpha=a).verdict == OPEN        # below the minimum starts
    wide = place(starts(rng, 90, 0.15, 3), starts(rng, 100, 0.15, 3), starts(rng, 80, 0.15, 3), alpha=a)
    assert wide.verdict == OPEN and not wide.decided
    pl = place(starts(rng, 80, 0.02, 4), g, b, alpha=a)
    assert 0.7 < pl.position < 1.3 and "vs good" in pl.fmt() and pl.to_dict()["verdict"] == BAD


def test_place_holds_a_verdict_the_endpoints_measured_beside_the_probe_contradict() -> None:
    """The machine slowed down by 14 % since the endpoints were first measured: a good commit's starts at 86
    sit on bad's side of the earlier endpoints' midpoint (90) and beyond good's starts. Measured beside it,
    the endpoints read 87 and 70: the probe is on good's side there, so no verdict is given."""
    rng = np.random.default_rng(3)
    g, b = starts(rng, 100, 0.01, 12), starts(rng, 80, 0.01, 4)
    probe = starts(rng, 86, 0.01, 4)
    a = probe_alpha(4, 20)
    assert place(probe, g, b, alpha=a).verdict == BAD                       # judged against the past alone
    beside = (starts(rng, 87, 0.01, 2), starts(rng, 70, 0.01, 2))
    held = place(probe, g, b, alpha=a, beside=beside)
    assert held.verdict == OPEN and held.held and not held.decided
    assert "held" in held.fmt() and held.to_dict()["held"] is True
    agree = (starts(rng, 100, 0.01, 2), starts(rng, 80, 0.01, 2))          # a quiet machine: no change
    assert place(probe, g, b, alpha=a, beside=agree).verdict == BAD


def test_references_keep_the_earlier_starts_until_an_endpoint_moved_by_a_quarter_of_the_gap() -> None:
    rng = np.random.default_rng(5)
    lead = (starts(rng, 100, 0.01, 6), starts(rng, 80, 0.01, 6))
    still = (starts(rng, 101, 0.01, 2), starts(rng, 79, 0.01, 2))      # 1 % off: a quiet machine
    g, b, moved = references(lead, still)
    assert not moved and g.k == b.k == 8
    faster = (starts(rng, 108, 0.01, 2), starts(rng, 86, 0.01, 2))     # 8 %: over a quarter of the 22 % gap
    g, b, moved = references(lead, faster)
    assert moved and g.k == b.k == 2 and g == faster[0]
    one_side = (starts(rng, 100, 0.01, 2), starts(rng, 70, 0.01, 1))   # only the bad endpoint moved
    assert references(lead, one_side)[2]
    g, b, moved = references(lead, (starts(rng, 100, 0.01, 1), Starts.of([])))   # nothing beside bad yet
    assert not moved and g.k == 7 and b.k == 6


def test_place_is_direction_free_a_speedup_is_located_too() -> None:
    rng = np.random.default_rng(2)
    g, b = starts(rng, 80, 0.02, 8), starts(rng, 100, 0.02, 8)
    assert place(starts(rng, 100, 0.02, 4), g, b, alpha=0.003).verdict == BAD
    assert place(starts(rng, 80, 0.02, 4), g, b, alpha=0.003).verdict == GOOD


def test_feasibility_refuses_a_change_smaller_than_the_spread_with_the_starts_it_would_take() -> None:
    rng = np.random.default_rng(4)
    g, b = starts(rng, 100, 0.15, 10), starts(rng, 90, 0.15, 10)
    j = judge(g, b, min_effect=0.02)
    f = feasibility(g, b, j, probes=4, max_starts=10)
    assert not f.feasible and f.needed is not None and f.needed > 10
    line = f.line("tg")
    assert "spread" in line and f"about {f.needed} starts per commit" in line and "tg" in line
    clear = feasibility(starts(rng, 100, 0.01, 5), starts(rng, 70, 0.01, 5),
                        judge(starts(rng, 100, 0.01, 5), starts(rng, 70, 0.01, 5)), probes=4, max_starts=10)
    assert clear.feasible and clear.needed is not None and clear.needed <= 10 and "locatable" in clear.line()


def test_feasibility_of_equal_endpoints_says_there_is_nothing_to_locate() -> None:
    rng = np.random.default_rng(5)
    g, b = starts(rng, 100, 0.005, 6), starts(rng, 100.2, 0.005, 6)
    j = judge(g, b, min_effect=0.05)
    assert j.verdict == "same"
    f = feasibility(g, b, j, probes=3)
    assert not f.feasible and f.needed is None and "same within ±5%" in f.line() and f.to_dict()["verdict"] == "same"


def test_side_against_a_fixed_value() -> None:
    rng = np.random.default_rng(6)
    s = starts(rng, 100, 0.02, 5)
    assert side(s, 90, alpha=0.01).verdict == ABOVE
    assert side(s, 120, alpha=0.01).verdict == BELOW
    assert side(s, 100, alpha=0.01).verdict == OPEN
    assert side(starts(rng, 100, 0.02, 2), 50, alpha=0.01).verdict == OPEN      # two starts: no interval


def test_spent_policy_spends_less_per_look_the_more_looks_it_allows() -> None:
    assert SpentPolicy(3, 40).look_alpha < SpentPolicy(3, 10).look_alpha < Policy().look_alpha
    assert SpentPolicy(3, 10).max_starts == 10


def test_change_text() -> None:
    assert change(0.92, 0.899, 0.941) == "\u22128.0 % [\u221210.1, \u22125.9]"
    assert change(1.1, 1.05, 1.15).startswith("+10.0 %")
