"""The adaptive sweep's algorithm on synthetic tg curves (no llama.cpp: the curves are the fakes)."""

import random
import statistics

import pytest

from llamaforge.bench.adaptive import (
    FALLS,
    FLAT,
    RISES,
    AdaptiveOptions,
    PointSummary,
    adaptive_sweep,
    coarse_grid,
    conclude,
    established,
    find_anomalies,
    interpolate,
    launch_noise,
    native_threshold,
    split_point,
    trend_direction,
)

N = 40
DOMAIN = list(range(N + 1))
FA = [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]   # full attention every 4th layer (Qwen3.5-MoE-like)
NATIVE = 262144
SETTLED = AdaptiveOptions(stable_after=None)    # stop only when every interval is settled


def smooth(x: int) -> float:
    """Time per token grows linearly with the layers whose experts are on the CPU."""
    return 1000.0 / (5.0 + 0.45 * x)


def ctx_curve(threshold: int) -> dict[int, int]:
    return {x: NATIVE if x >= threshold else NATIVE - 20000 * (threshold - x) for x in DOMAIN}


def summary(v: float, rel: float = 0.02, launches: tuple[float, ...] = ()) -> PointSummary:
    return PointSummary(v, v * (1 - rel), v * (1 + rel), max(len(launches), 1), launches)


class Curve:
    """A measure() callback over curve functions per series, counting its calls. The first call of a
    point is two launches (``--launches 2``) ``jitter`` apart, each later call one more launch; the summary
    is over all launches so far (median; CI the launches' range widened by ``rel``). A curve function
    gets ``(x, k)``, ``k`` the launch's number."""

    def __init__(self, fns, rel=0.02, jitter=0.01):
        self.fns, self.rel, self.jitter, self.calls = fns, rel, jitter, []
        self.launches: dict = {}

    def __call__(self, s, x):
        self.calls.append((s, x))
        got = self.launches.setdefault((s, x), [])
        for sign in ((-1, 1) if not got else (0,)):
            v = self.fns[s](x, len(got) + 1)       # k: the launch's number, from 1
            if v is None:
                return None
            got.append(v * (1 + sign * self.jitter))
        med = statistics.median(got)
        return PointSummary(med, min(min(got), med * (1 - self.rel)), max(max(got), med * (1 + self.rel)),
                            len(got), tuple(got))


def run(fns, *, threshold=6, native=NATIVE, options=None, rel=0.02):
    curve = Curve(fns, rel)
    res = adaptive_sweep(sorted(fns), DOMAIN, curve, ctx={s: ctx_curve(threshold) for s in fns}, native=native,
                         full_attention_layers=FA, options=options)
    return res, curve


def test_the_threshold_is_the_first_point_whose_fitted_context_reaches_native():
    assert native_threshold(ctx_curve(6), NATIVE) == 6
    assert native_threshold({0: 100, 1: 200}, 300) is None
    assert native_threshold({0: 100}, None) is None


def test_the_coarse_grid_holds_the_ends_the_threshold_and_its_neighbours():
    assert [x for x, _ in coarse_grid(DOMAIN, 6)] == [0, 5, 6, 7, 40]
    assert [x for x, _ in coarse_grid(DOMAIN, 0)] == [0, 1, 40]
    assert [x for x, _ in coarse_grid([0, 4, 8, 12], 5)] == [0, 4, 8, 12]   # snapped to the stored points


def test_bisection_prefers_a_full_attention_boundary_near_the_middle():
    assert split_point(DOMAIN, 7, 40, [b + 1 for b in FA]) == 24
    assert split_point(DOMAIN, 0, 3, [b + 1 for b in FA]) == 1
    assert split_point(DOMAIN, 4, 5, []) is None


def test_interpolation_is_linear_in_time_per_token():
    pts = {0: summary(smooth(0)), 40: summary(smooth(40))}
    assert interpolate(pts, 20).median == pytest.approx(smooth(20))
    assert interpolate(pts, 20).n == 0
    assert interpolate({0: summary(1.0)}, 5) is None


def test_a_smooth_curve_stops_stable_with_few_points_and_the_right_conclusions():
    res, _ = run({"cuda": lambda x, k: smooth(x)}, options=SETTLED)
    assert res.stopped == "stable"
    assert res.n_measured <= len(DOMAIN) // 3
    assert res.conclusions.threshold == {"cuda": 6} and res.conclusions.sweet_spot == {"cuda": 6}
    assert res.conclusions.anomalies == {"cuda": []}
    for x, v in res.interpolated["cuda"].items():
        assert v == pytest.approx(smooth(x), rel=0.02)
        assert x not in res.measured["cuda"]


def test_a_step_is_located_to_adjacent_points():
    res, _ = run({"cuda": lambda x, k: smooth(x) * (0.5 if x >= 22 else 1.0)}, options=SETTLED)
    assert {21, 22} <= set(res.measured["cuda"])
    assert res.stopped == "stable"
    assert res.conclusions.anomalies == {"cuda": []}


def test_a_persistent_spike_is_confirmed_reported_and_becomes_the_sweet_spot():
    res, curve = run({"vulkan": lambda x, k: smooth(x) * (3.0 if x == 24 else 1.0)})
    assert res.conclusions.anomalies == {"vulkan": [24]}
    assert res.conclusions.sweet_spot == {"vulkan": 24}
    assert ("vulkan", 24) in res.confirmations
    assert curve.calls.count(("vulkan", 24)) == 2          # one confirmation launch
    assert {23, 25} <= set(res.measured["vulkan"])          # the spike's neighbours were measured


def test_a_spike_that_does_not_survive_its_confirmation_is_not_an_anomaly():
    res, _ = run({"vulkan": lambda x, k: smooth(x) * (3.0 if x == 24 and k == 1 else 1.0)})
    assert res.conclusions.anomalies == {"vulkan": []}
    assert res.conclusions.sweet_spot == {"vulkan": 6}


def test_noise_within_the_cis_gives_no_false_anomalies():
    rng = random.Random(7)
    noise = {x: rng.uniform(-0.03, 0.03) for x in DOMAIN}
    res, _ = run({"cuda": lambda x, k: smooth(x) * (1 + noise[x])}, rel=0.05)
    assert res.conclusions.anomalies == {"cuda": []}
    assert res.conclusions.sweet_spot == {"cuda": 6}
    assert res.stopped in ("stable", "conclusions stable")
    assert res.n_measured <= len(DOMAIN) // 2


def test_it_does_not_stop_when_one_midpoint_happens_to_lie_on_the_chord():
    # 150 → 75 → 50 in two steps; the first midpoint (20) lies exactly on the chord of the ends
    def stairs(x, k):
        return 150.0 if x < 10 else 75.0 if x < 30 else 50.0

    res, _ = run({"cpu": stairs}, native=None, options=SETTLED)
    assert res.measured["cpu"][20].median == pytest.approx(interpolate(
        {0: summary(150.0), 40: summary(50.0)}, 20).median)
    assert {9, 10, 29, 30} <= set(res.measured["cpu"])
    assert res.stopped == "stable"


def test_the_crossing_of_two_series_is_located_and_regions_named():
    res, _ = run({"a": lambda x, k: smooth(x) * 1.5 if x < 17 else smooth(x) * 0.7,
                  "b": lambda x, k: smooth(x)})
    assert {16, 17} <= set(res.measured["a"]) | set(res.measured["b"])
    regions = res.conclusions.regions
    assert regions[0][2] == "a" and regions[0][0] == 0 and regions[-1][2] == "b" and regions[-1][1] == N
    assert max(hi for lo, hi, w in regions if w == "a") == 16


def test_the_point_budget_and_the_time_budget_stop_it():
    res, _ = run({"cuda": lambda x, k: smooth(x) * (0.5 if x >= 22 else 1.0)},
                 options=AdaptiveOptions(max_points=7))
    assert res.n_measured == 7 and res.stopped == "max-points"
    ticks = iter(range(1000))
    curve = Curve({"cuda": lambda x, k: smooth(x)})
    res = adaptive_sweep(["cuda"], DOMAIN, curve, ctx={"cuda": ctx_curve(6)}, native=NATIVE,
                         options=AdaptiveOptions(time_budget_s=3), clock=lambda: float(next(ticks)))
    assert res.stopped == "time-budget" and res.n_measured < 5


def test_a_failed_point_is_not_measured_again_and_not_concluded_on():
    res, curve = run({"cuda": lambda x, k: None if x == 6 else smooth(x)})
    assert 6 not in res.measured["cuda"] and curve.calls.count(("cuda", 6)) == 1
    assert res.conclusions.sweet_spot == {"cuda": 7}


def test_conclusions_of_an_exhaustive_sweep_use_every_point():
    pts = {x: summary(smooth(x) * (2 if x == 30 else 1)) for x in DOMAIN}
    c = conclude({"vulkan": pts}, {"vulkan": ctx_curve(6)}, NATIVE, DOMAIN)
    # one launch per point: the between-launch noise is unknown, so 30 is a suspect, not an anomaly
    assert c.anomalies == {"vulkan": []} and c.suspects == {"vulkan": [30]}
    assert c.sweet_spot == {"vulkan": 6} and c.regions == []
    two = {x: summary(v.median, launches=(v.median * 0.98, v.median * 1.02)) for x, v in pts.items()}
    assert conclude({"vulkan": two}, {}, None, DOMAIN).anomalies == {"vulkan": [30]}


def test_a_jump_within_the_between_launch_noise_is_a_suspect_not_an_anomaly():
    # request CIs are narrow (one process), but a second start of the same point differs by up to 2x
    bimodal = {x: summary(smooth(x), 0.01, (smooth(x) * 0.6, smooth(x) * 1.2)) for x in DOMAIN}
    bimodal[30] = summary(smooth(30) * 1.5, 0.01, (smooth(30) * 1.5,))
    noise = launch_noise(bimodal)
    assert noise is not None and noise.df == len(DOMAIN) - 1
    assert not established(bimodal[29], bimodal[30], noise)
    c = conclude({"vulkan": bimodal}, {}, None, DOMAIN)
    assert c.anomalies == {"vulkan": []} and c.suspects == {"vulkan": [30]}
    assert launch_noise({0: summary(1.0)}) is None and not established(summary(1.0), summary(3.0), None)


def test_it_stops_once_refinements_change_no_conclusion_with_the_same_conclusions():
    fns = {"cuda": lambda x, k: smooth(x) * (0.5 if x >= 22 else 1.0)}
    full, _ = run(fns, options=SETTLED)
    res, _ = run(fns)
    assert res.stopped == "conclusions stable" and res.n_measured < full.n_measured
    assert res.conclusions == full.conclusions


def test_conclusions_stable_does_not_stop_before_a_crossing_is_placed():
    # stable_after=0: stop as soon as only ordinary bisections are left; the crossing (a → b at 17) must still be located
    res, _ = run({"a": lambda x, k: smooth(x) * 1.5 if x < 17 else smooth(x) * 0.7,
                  "b": lambda x, k: smooth(x)}, options=AdaptiveOptions(stable_after=0))
    assert {16, 17} <= set(res.measured["a"]) | set(res.measured["b"])
    assert max(hi for lo, hi, w in res.conclusions.regions if w == "a") == 16


# ------------------------------------------------------------ the series' own direction (rising, falling, flat)


def rising(x: int) -> float:
    """The mirror of :func:`smooth`: the device is the slower place, so tg rises with offload."""
    return smooth(N - x)


def test_the_direction_comes_from_the_two_ends_and_a_tie_is_flat():
    assert trend_direction({x: summary(smooth(x)) for x in DOMAIN}) == FALLS
    assert trend_direction({x: summary(rising(x)) for x in DOMAIN}) == RISES
    assert trend_direction({0: summary(50.0), 20: summary(80.0), 40: summary(50.5)}) == FLAT  # CIs overlap
    assert trend_direction({0: summary(1.0)}) == FLAT
    # beyond the request CIs, but within what a second server start differs by: still flat
    wide = {x: summary(v, 0.01, (v * 0.7, v * 1.3)) for x, v in ((0, 50.0), (20, 52.0), (40, 56.0))}
    assert trend_direction(wide) == FLAT
    assert trend_direction({k: summary(v.median, 0.01, (v.median,) * 2) for k, v in wide.items()}) == RISES


def test_a_rising_series_is_sampled_thinly_with_no_anomalies_and_its_sweet_spot_at_the_most_offload():
    res, _ = run({"vulkan": lambda x, k: rising(x)}, options=SETTLED)
    assert res.stopped == "stable" and res.n_measured <= len(DOMAIN) // 3
    assert res.conclusions.anomalies == {"vulkan": []} and res.conclusions.suspects == {"vulkan": []}
    assert res.conclusions.sweet_spot == {"vulkan": N} and not res.confirmations


def test_every_step_of_a_rising_series_is_no_anomaly_in_the_exhaustive_conclusions_either():
    # lavapipe-like: 20x slower with one layer on the "GPU", then slower with every further layer
    pts = {x: summary(v, launches=(v * 0.99, v * 1.01)) for x in DOMAIN
           if (v := 52.5 if x == N else 2.6 * rising(x) / rising(N - 1))}
    c = conclude({"vulkan": pts}, {}, None, DOMAIN)
    assert c.anomalies == {"vulkan": []} and c.suspects == {"vulkan": []}
    assert find_anomalies(pts, direction=FALLS)        # the old fixed prior flagged every step


def test_a_spike_on_a_rising_series_is_found_against_its_neighbour_with_more_offload():
    res, _ = run({"vulkan": lambda x, k: rising(x) * (1.5 if x == 24 else 1.0)})
    assert res.conclusions.anomalies == {"vulkan": [24]} and res.conclusions.sweet_spot == {"vulkan": N}
    assert ("vulkan", 24) in res.confirmations and {23, 25} <= set(res.measured["vulkan"])
    pts = {x: summary(v, launches=(v * 0.99, v * 1.01)) for x in DOMAIN
           if (v := rising(x) * (1.5 if x == 16 else 1.0))}
    assert conclude({"vulkan": pts}, {}, None, DOMAIN).anomalies == {"vulkan": [16]}


def test_a_step_up_on_a_rising_series_is_located_and_is_no_anomaly():
    res, _ = run({"vulkan": lambda x, k: rising(x) * (2.0 if x >= 22 else 1.0)}, options=SETTLED)
    assert {21, 22} <= set(res.measured["vulkan"])
    assert res.stopped == "stable" and res.conclusions.anomalies == {"vulkan": []}


def test_a_flat_noisy_series_has_no_anomalies_but_a_spike_beating_both_neighbours_is_one():
    rng = random.Random(11)
    noise = {x: rng.uniform(-0.04, 0.04) for x in DOMAIN}
    res, _ = run({"cpu": lambda x, k: 50.0 * (1 + noise[x])}, rel=0.05)
    assert res.conclusions.anomalies == {"cpu": []} and res.conclusions.suspects == {"cpu": []}
    assert res.stopped in ("stable", "conclusions stable") and res.n_measured <= len(DOMAIN) // 3
    # the refinement bisects only intervals whose ends differ, so on a flat series it sees a spike
    # where it measures anyway (here the threshold); the exhaustive conclusions see it anywhere
    spiked, _ = run({"cpu": lambda x, k: 50.0 * (1 + noise[x]) * (2.0 if x == 6 else 1.0)}, rel=0.05)
    assert spiked.conclusions.anomalies == {"cpu": [6]}
    pts = {x: summary(v, launches=(v * 0.99, v * 1.01)) for x in DOMAIN
           if (v := 50.0 * (1 + noise[x]) * (2.0 if x == 24 else 1.0))}
    assert trend_direction(pts) == FLAT and conclude({"cpu": pts}, {}, None, DOMAIN).anomalies == {"cpu": [24]}
    # an end of a flat series has one neighbour: it breaks no trend
    assert find_anomalies({0: summary(80.0), 20: summary(50.0), 40: summary(50.0)}, direction=FLAT) == []


def test_a_rising_staircase_does_not_stop_when_one_midpoint_happens_to_lie_on_the_chord():
    def stairs(x, k):
        return 50.0 if x <= 10 else 75.0 if x <= 30 else 150.0

    res, _ = run({"vulkan": stairs}, native=None, options=SETTLED)
    assert {10, 11, 30, 31} <= set(res.measured["vulkan"])
    assert res.stopped == "stable" and res.conclusions.anomalies == {"vulkan": []}
