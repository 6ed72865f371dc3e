"""Factors measured inside each start (llamaforge.judge.paired): per-start ratios, estimated over starts.

The simulations draw whole starts as tests/unit/test_judge.py does (a start's level from N(level, sd_between),
its requests from N(start level, sd_within)), with two variants inside each start whose true ratio is fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamaforge.judge import judge
from llamaforge.judge.paired import paired, start_ratios

TRIALS = 1000


def paired_starts(rng: np.random.Generator, level: float, ratio: float, sb: float, sw: float, k: int,
                  r: int = 3) -> tuple[list[list[float]], list[list[float]]]:
    """Variant A and B of ``k`` starts; B = ratio × A in expectation, both sharing their start's level."""
    a, b = [], []
    for m in np.maximum(rng.normal(level, sb, k), 1.0):
        a.append(list(np.maximum(rng.normal(m, sw, r), 1.0)))
        b.append(list(np.maximum(rng.normal(m * ratio, sw, r), 1.0)))
    return a, b


def test_per_start_ratio_is_the_ratio_of_the_two_medians_and_skips_starts_missing_a_side() -> None:
    a = [[100.0, 110.0, 90.0], [50.0], [70.0]]
    b = [[95.0, 80.0, 85.0], [], [None, 63.0]]
    assert start_ratios(a, b) == pytest.approx([85.0 / 100.0, 63.0 / 70.0])


def test_misaligned_starts_are_refused() -> None:
    with pytest.raises(ValueError, match="same starts"):
        start_ratios([[1.0]], [[1.0], [2.0]])


def test_interval_by_number_of_starts() -> None:
    assert paired([[100.0]], [[90.0]]).kind == "single"                              # type: ignore[union-attr]
    two = paired([[100.0], [50.0]], [[90.0], [46.0]])
    assert two is not None and two.kind == "range" and (two.low, two.high) == pytest.approx((0.9, 0.92))
    assert paired([[100.0], [50.0], [80.0]], [[90.0], [46.0], [72.0]]).kind == "ci"   # type: ignore[union-attr]
    assert paired([[100.0]], [[]]) is None


def test_factors_on_the_same_starts_multiply_exactly() -> None:
    rng = np.random.default_rng(1)
    a, b = paired_starts(rng, 120.0, 0.9, 24.0, 3.0, 5)
    c = [[v * 1.05 for v in g] for g in b]
    ab, bc, ac = paired(a, b), paired(b, c), paired(a, c)
    assert ab and bc and ac
    assert ab.centre * bc.centre == pytest.approx(ac.centre)
    # and the ratio of the two sides' start-level centres (what judge() reports) splits the same way
    j_ab, j_ac = judge(a, b), judge(a, c)
    assert j_ab and j_ac and j_ab.ratio == pytest.approx(ab.centre) and j_ac.ratio == pytest.approx(ac.centre)


def test_pairing_inside_starts_removes_the_between_start_spread() -> None:
    """Starts far apart (sd 24 at level 120), requests tight: the unpaired comparison cannot see an 8 % factor,
    the paired one pins it down."""
    rng = np.random.default_rng(7)
    a, b = paired_starts(rng, 120.0, 0.92, 24.0, 1.0, 5)
    est = paired(a, b)
    unpaired = judge(a, b)
    assert est is not None and unpaired is not None
    assert est.kind == "ci" and est.high < 0.95 and est.low > 0.89
    assert unpaired.verdict == "inconclusive" and unpaired.high > 1.0


@pytest.mark.parametrize("k", [3, 5])
def test_the_95_percent_interval_covers_the_true_factor_in_about_95_percent_of_trials(k: int) -> None:
    rng = np.random.default_rng(100 + k)
    covered = 0
    for _ in range(TRIALS):
        a, b = paired_starts(rng, 120.0, 0.92, 24.0, 6.0, k)
        e = paired(a, b)
        assert e is not None
        covered += e.low <= 0.92 <= e.high
    assert 0.92 <= covered / TRIALS <= 0.98


def test_identical_variants_give_a_factor_of_one() -> None:
    rng = np.random.default_rng(3)
    a, _ = paired_starts(rng, 120.0, 1.0, 24.0, 6.0, 4)
    e = paired(a, a)
    assert e is not None and e.centre == 1.0 and e.low == e.high == 1.0
    assert math.isinf(paired([[1.0]], [[1.0]]).half_rel)                             # type: ignore[union-attr]
