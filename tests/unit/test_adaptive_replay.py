"""benchmarks/adaptive_replay.py's time accounting: the threshold's fits a real run would make."""

import importlib.util
import sys
from pathlib import Path

from llamaforge.bench.threshold import bisect_threshold

_SPEC = importlib.util.spec_from_file_location(
    "adaptive_replay", Path(__file__).resolve().parents[2] / "benchmarks" / "adaptive_replay.py")
replay = sys.modules["adaptive_replay"] = importlib.util.module_from_spec(_SPEC)   # its dataclasses need it there
_SPEC.loader.exec_module(replay)

NATIVE = 1000


def test_the_fits_are_a_bisection_over_every_ncmoe_at_the_stored_fit_time_of_each():
    secs = {x: 1.0 + x / 100 for x in range(41)} | {-1: 9.0}
    every = {x: NATIVE if x >= 6 else 10 for x in range(41)}
    cost, n = replay.bisection_cost(every, NATIVE, 40, secs)
    probes = bisect_threshold(range(41), every.get, NATIVE).probes
    assert n == len(probes) <= 8 and cost == sum(secs[x] for x in probes)


def test_a_thinned_sweep_is_charged_the_dearest_bisection_any_threshold_in_its_gap_needs():
    secs = {x: 1.0 for x in range(41)} | {-1: 1.0}
    thinned = {0: 10, 4: 10, 8: NATIVE, 40: NATIVE}           # the threshold is one of 5..8
    cost, n = replay.bisection_cost(thinned, NATIVE, 40, secs)
    per_t = [len(bisect_threshold(range(41), lambda x, t=t: NATIVE if x >= t else 0, NATIVE).probes)
             for t in range(5, 9)]
    assert n == max(per_t) and cost == max(per_t)
    assert replay.bisection_cost({0: NATIVE, 40: NATIVE}, NATIVE, 40, secs) == (1.0, 1)      # native at once
    assert replay.bisection_cost({0: 10, 40: 10}, NATIVE, 40, secs) == (2.0, 2)              # never native
