"""judge.pooled: one knob's effect pooled over several points (fixed effect), with its verdict and family control."""

from __future__ import annotations

import math
import random

import pytest

from llamaforge.judge import DIFFERS, INCONCLUSIVE, SAME, Starts, judge
from llamaforge.judge.pooled import control, pooled_effect


def _starts(centre: float, k: int, sd: float, rng: random.Random) -> Starts:
    return Starts.of([[centre * math.exp(rng.gauss(0, sd))] * 2 for _ in range(k)])


def test_pooling_agrees_with_one_point_and_narrows_with_more():
    rng = random.Random(1)
    pairs = [(_starts(100, 4, 0.02, rng), _starts(104, 4, 0.02, rng)) for _ in range(4)]
    one = pooled_effect(pairs[:1])
    j = judge(*pairs[0])
    assert one is not None and j is not None
    assert one.ratio == pytest.approx(j.ratio) and one.low == pytest.approx(j.low) and one.high == pytest.approx(j.high)
    four = pooled_effect(pairs)
    assert four is not None and four.n_points == 4
    assert (four.high - four.low) < (one.high - one.low)
    assert 1.0 < four.ratio < 1.08 and len(four.point_ratios) == 4


def test_a_consistent_effect_is_found_and_none_is_called_same():
    rng = random.Random(2)
    up = pooled_effect([(_starts(100, 5, 0.01, rng), _starts(110, 5, 0.01, rng)) for _ in range(3)])
    flat = pooled_effect([(_starts(100, 5, 0.01, rng), _starts(100, 5, 0.01, rng)) for _ in range(3)])
    noisy = pooled_effect([(_starts(100, 3, 0.3, rng), _starts(104, 3, 0.3, rng))])
    assert up is not None and up.verdict == DIFFERS and up.pct().startswith("+10 %")
    assert flat is not None and flat.verdict == SAME
    assert noisy is not None and noisy.verdict == INCONCLUSIVE


def test_identical_sides_are_rarely_called_different():
    """Pooling must keep the error rate: 400 trials of 3 points with no effect, called 'differs' in at most ~5 %."""
    rng = random.Random(3)
    wrong = 0
    for _ in range(400):
        pe = pooled_effect([(_starts(100, 3, 0.05, rng), _starts(100, 3, 0.05, rng)) for _ in range(3)],
                           min_effect=0.0)
        wrong += pe is not None and pe.verdict == DIFFERS
    assert wrong / 400 <= 0.07


def test_below_three_starts_the_spread_is_assumed_and_said():
    rng = random.Random(4)
    pe = pooled_effect([(_starts(100, 2, 0.01, rng), _starts(300, 2, 0.01, rng))])
    assert pe is not None and pe.small and pe.verdict == DIFFERS
    assert "assumed" in (pe.assumed or "") and "points" not in pe.pct() and pe.pct().endswith(")*")
    assert pe.to_dict()["p_differs"] is None


def test_a_family_of_pooled_effects_is_controlled_with_holm():
    rng = random.Random(5)
    effects = [pooled_effect([(_starts(100, 3, 0.03, rng), _starts(106, 3, 0.03, rng))]) for _ in range(20)]
    raw = sum(e.verdict == DIFFERS for e in effects if e)
    held = control(effects)
    assert sum(e.verdict == DIFFERS for e in held if e) <= raw
    assert all(e is not None and e.adjusted == "Holm over 20 pooled effects" for e in held)
    assert control([None, effects[0]])[1] is effects[0]     # a family of one is left alone


def test_points_without_both_sides_are_skipped():
    assert pooled_effect([(Starts.of([]), Starts.of([[1.0]]))]) is None


def test_an_effect_a_hair_under_zero_is_printed_without_a_minus_zero():
    from llamaforge.judge.locate import change

    rng = random.Random(3)
    pairs = [(Starts.of([[100.0, 100.0]] * 5), Starts.of([[99.8 * math.exp(rng.gauss(0, 0.001))] * 2 for _ in range(5)]))]
    flat = pooled_effect(pairs)
    assert flat is not None and flat.ratio < 1
    assert "-0" not in flat.pct() and flat.pct().startswith("+0 %"), flat.pct()
    assert "\u22120.0" not in change(0.9996, 0.9990, 1.0001), change(0.9996, 0.9990, 1.0001)
