"""The interval printed beside a family's verdict is the one the verdict used (issue 41): Holm's level for each
judgement, so "differs" clears ±E, "same" lies inside, "inconclusive" does neither — never an unadjusted 95 %
interval outside the band beside an "inconclusive"."""

from __future__ import annotations

import math

import numpy as np

from llamaforge.judge import DIFFERS, INCONCLUSIVE, SAME, control, judge
from llamaforge.judge.adjusted import controlled, holm_levels


def _class_of_interval(low: float, high: float, e: float) -> str:
    d = math.log1p(e)
    lo, hi = math.log(low), math.log(high)
    return SAME if -d < lo and hi < d else DIFFERS if lo > d or hi < -d else INCONCLUSIVE


def test_holm_levels_step_down_and_stop():
    assert holm_levels([0.001, 0.02, 0.03, 0.5], 0.05) == [0.05 / 4, 0.05 / 3, 0.05 / 3, 0.05 / 3]
    assert holm_levels([0.001, 0.002], 0.05) == [0.025, 0.05]


def test_every_verdict_of_a_family_matches_the_interval_printed_beside_it():
    rng = np.random.default_rng(41)
    seen = set()
    for _trial in range(60):
        fam = []
        for _ in range(12):
            shift = rng.choice([0.0, 0.04, 0.1, 0.3])
            sd = rng.choice([0.005, 0.04])
            a = [[100 * math.exp(rng.normal(0, sd))] for _ in range(6)]
            b = [[100 * math.exp(shift + rng.normal(0, sd))] for _ in range(6)]
            fam.append(judge(a, b, min_effect=0.05))
        plain, adj = control(fam), controlled(fam)
        for p, j in zip(plain, adj, strict=True):
            assert j.verdict == p.verdict and j.ratio == p.ratio
            assert _class_of_interval(j.low, j.high, 0.05) == j.verdict, j
            assert j.adjusted == "Holm, 12 comparisons"
            assert j.low <= p.low and j.high >= p.high      # never narrower than the unadjusted one
            seen.add(j.verdict)
    assert seen == {SAME, DIFFERS, INCONCLUSIVE}


def test_a_family_of_one_keeps_its_95_percent_interval():
    j = judge([[100], [101], [99]], [[130], [131], [129]])
    assert controlled([j])[0] == j and controlled([None, j])[1] == j
