"""Sweet spots, anomalies, roofline and the data helpers, on handmade rows."""

from __future__ import annotations

import pytest

from llamaforge.judge import trend
from llamaforge.records import ModelFacts
from llamaforge.report import analysis as an
from llamaforge.report.data import Row, split_breakdown

NATIVE = 1000


def row(n: int, ctx: int | None, tg: float | list[float] | list[list[float]] | None = None, pp: float | None = None,
        ok: bool = True, series: str = "s") -> Row:
    """``tg``: one value, the requests of one server start, or (a list of lists) the requests of each start."""
    groups = tg if isinstance(tg, list) and tg and isinstance(tg[0], list) else []
    tgs = [v for g in groups for v in g] if groups else tg if isinstance(tg, list) else ([] if tg is None else [tg])
    return Row(ncmoe=n, ok=ok, n_ctx=ctx, tg=tgs, pp=[] if pp is None else [pp], series=series, tg_groups=groups)


def test_first_native_is_lowest_ncmoe_reaching_native_context():
    rows = [row(0, 400, 50), row(1, 800, 45), row(3, 1000, 30), row(2, 1000, 40, ok=False), row(4, 1000, 25)]
    assert an.first_native(rows, NATIVE).ncmoe == 3


def test_first_native_is_none_when_never_reached_or_native_unknown():
    rows = [row(0, 400, 50), row(1, 800, 45)]
    assert an.first_native(rows, NATIVE) is None
    assert an.first_native([row(0, 5000, 1)], None) is None


def test_best_at_native_picks_fastest_generation_among_native_points():
    rows = [row(0, 400, 99), row(3, 1000, 30), row(4, 1000, 35), row(5, 1000, 20)]
    assert an.best_at_native(rows, NATIVE).ncmoe == 4


def test_pareto_front_drops_points_beaten_on_both_context_and_speed():
    rows = [row(0, 400, 50), row(1, 400, 45), row(2, 800, 46), row(3, 800, 30), row(4, 1000, 20),
            row(5, 1000, 20), row(6, 900, 10, ok=False)]
    front = an.pareto_front(rows, "tg")
    assert [r.ncmoe for r in front] == [0, 2, 4]


def test_pareto_front_uses_the_requested_metric():
    rows = [row(0, 400, tg=50, pp=100), row(1, 800, tg=60, pp=90)]
    assert [r.ncmoe for r in an.pareto_front(rows, "tg")] == [1]
    assert [r.ncmoe for r in an.pareto_front(rows, "pp")] == [0, 1]


FACTORS = (0.99, 1.0, 1.01, 0.995, 1.005)


def _spread(x: float) -> list[list[float]]:
    """Five server starts around ``x`` (±1 %), two requests each."""
    return [[x * f, x * f * 1.001] for f in FACTORS]


def _one_start(x: float) -> list[float]:
    """Five requests around ``x`` (±1 %) from ONE server start: not five replicates."""
    return [x * f for f in FACTORS]


def test_anomaly_flags_point_significantly_faster_than_lower_ncmoe_neighbour():
    rows = [row(10, 500, _spread(70)), row(11, 600, _spread(60)), row(12, 700, _spread(66)), row(13, 800, _spread(55))]
    found = an.anomalies(rows, min_effect=0.05, full_attn_layers=[3, 7, 11])
    assert [(a.row.ncmoe, a.neighbour.ncmoe, a.metric) for a in found] == [(12, 11, "tg")]
    assert found[0].full_attn_moved == (11,)
    assert found[0].gain == pytest.approx(0.10, abs=0.01)


def test_anomaly_needs_the_minimum_effect_and_repeated_server_starts():
    small = [row(0, 500, _spread(70)), row(1, 600, _spread(60)), row(2, 700, _spread(61.5))]  # +2.5 %: below 5 %
    assert an.anomalies(small, min_effect=0.05) == []
    assert [a.row.ncmoe for a in an.anomalies(small, min_effect=0.01)] == [2]
    once = [row(0, 500, 90.0), row(1, 600, 60.0), row(2, 600, 90.0)]  # one sample each: never significant
    assert an.anomalies(once) == []


def test_requests_of_one_server_start_never_make_an_anomaly():
    """Five tight requests per point, all from one start each: +10 % is within what a fresh start can
    give (spread unknown, the conservative bound applies), so no anomaly; the same values as five starts are one."""
    values = (70, 60, 66, 55)
    one_start = [row(10 + i, 500 + 100 * i, _one_start(v)) for i, v in enumerate(values)]
    assert an.anomalies(one_start, min_effect=0.05) == []
    starts = [row(10 + i, 500 + 100 * i, _spread(v)) for i, v in enumerate(values)]
    assert [a.row.ncmoe for a in an.anomalies(starts, min_effect=0.05)] == [12]


def test_a_series_that_speeds_up_with_offload_breaks_no_trend_by_rising():
    """A device slower than the host (lavapipe): every step to more offload is faster. Under a fixed
    "falls with offload" prior each step was an anomaly; against the series' own direction none is,
    while a point that beats the next one (with more offload) still is."""
    rising = [row(n, 500, _spread(20 + 10 * n)) for n in range(5)]
    assert an.direction(rising, "tg") == trend.RISES
    assert an.anomalies(rising) == []
    spike = [row(0, 500, _spread(20)), row(1, 500, _spread(30)), row(2, 500, _spread(45)), row(3, 500, _spread(35)),
             row(4, 500, _spread(50))]
    found = an.anomalies(spike, full_attn_layers=[2])
    assert [(a.row.ncmoe, a.neighbour.ncmoe) for a in found] == [(2, 3)]
    assert found[0].full_attn_moved == (2,)


def test_on_a_flat_series_only_a_point_beating_both_neighbours_counts():
    flat = [row(n, 500, _spread(v)) for n, v in enumerate([50, 50.2, 58, 49.8, 50])]
    assert an.direction(flat, "tg") == trend.FLAT
    assert [(a.row.ncmoe, a.neighbour.ncmoe) for a in an.anomalies(flat)] == [(2, 1)]   # the smaller win
    one_side = [row(n, 500, _spread(v)) for n, v in enumerate([50, 50.2, 58, 57.8, 50])]  # beats one neighbour only
    assert an.direction(one_side, "tg") == trend.FLAT and an.anomalies(one_side) == []


def test_anomaly_compares_only_within_a_series_and_skips_failed_neighbours():
    rows = [row(0, 500, _spread(60), series="a"), row(1, 600, _spread(80), series="b"),
            row(1, 600, _spread(50), series="a"), row(2, 700, None, ok=False, series="a"),
            row(3, 700, _spread(55), series="a")]
    found = an.anomalies(rows)
    assert [(a.row.series, a.row.ncmoe, a.neighbour.ncmoe) for a in found] == [("a", 3, 1)]


def test_roofline_is_bytes_per_token_times_generation_speed():
    facts = ModelFacts(bytes_per_token_ctx0=2_000_000_000, kv_bytes_per_token_ctx=20_480)
    r = row(0, 4096, [100.0, 100.0, 100.0])
    r.prompt_tokens, r.n_predict = 2000, 1000
    rp = an.roofline(r, facts, 4000.0)
    assert rp.context_used == 2500
    assert rp.bytes_per_token == 2_000_000_000 + 20_480 * 2500
    assert rp.achieved_gbs == pytest.approx(rp.bytes_per_token * 100 / 1e9)
    assert rp.fraction == pytest.approx(rp.achieved_gbs / 4000.0)
    assert an.roofline(r, facts, None).fraction is None
    assert an.roofline(r, ModelFacts(), 4000.0) is None


def test_split_breakdown_sums_gpu_devices_and_host_buffers():
    gpu, host = split_breakdown({
        "CUDA0": {"total": 24000, "free": 1000, "self": 20000, "model": 15000, "context": 4000, "compute": 1000},
        "CUDA1": {"total": 24000, "free": 1000, "self": 100, "model": 50, "context": 30, "compute": 20},
        "Host": {"self": 900, "model": 800, "context": 0, "compute": 100},
        "CPU_REPACK": {"self": 300, "model": 300, "context": 0, "compute": 0}})
    assert (gpu.model, gpu.context, gpu.compute) == (15050, 4030, 1020)
    assert (host.model, host.context, host.compute) == (1100, 0, 100)
    gpu2, host2 = split_breakdown([{"kind": "device", "name": "Vulkan0", "total": 1, "model": 5, "context": 1,
                                    "compute": 1}, {"kind": "host", "name": "Host", "model": 2}])
    assert gpu2.total == 7 and host2.total == 2
    assert split_breakdown(None) == (None, None)


def test_full_attention_layers_from_list_or_interval():
    def fal(d: dict) -> list[int]:
        return ModelFacts.from_json(d).full_attention_layer_list()

    assert fal({"full_attention_layers": [7, 3]}) == [3, 7]
    assert fal({"full_attention_interval": 4, "n_layers": 12}) == [3, 7, 11]
    assert fal({"full_attention_layers": 10}) == []


def test_llama_bench_points_read_one_test_per_metric():
    from llamaforge.report.data import _row
    from llamaforge.store import Point, Sample

    p = Point("r", "cpu-x", "llama-bench", samples=[
        Sample(0, False, "pp512", pp_tps=100.0), Sample(1, False, "pp512", pp_tps=110.0),
        Sample(2, False, "pp4096", pp_tps=80.0), Sample(3, False, "pp4096", pp_tps=82.0),
        Sample(4, False, "tg128", tg_tps=20.0), Sample(5, True, "tg256", tg_tps=1.0)])
    r = _row(p, "CPU")
    assert (r.pp_test, r.tg_test) == ("pp4096", "tg128")
    assert r.pp == [80.0, 82.0] and r.tg == [20.0]


def test_split_breakdown_reads_the_runners_devices_host_other_shape():
    gpu, host = split_breakdown({
        "unit": "MiB",
        "devices": [{"kind": "device", "name": "Vulkan0", "total": 16000, "model": 900, "context": 300, "compute": 50}],
        "host": {"kind": "host", "name": "Host", "model": 40, "context": 0, "compute": 10},
        "other": [{"kind": "buffer_type", "name": "CPU_REPACK", "model": 200, "context": 0, "compute": 0}]})
    assert (gpu.model, gpu.context, gpu.compute) == (900, 300, 50)
    assert (host.model, host.compute) == (240, 10)


def test_bytes_per_token_falls_back_to_model_facts_fields():
    def rec(**kw) -> ModelFacts:
        return ModelFacts.from_json(kw)

    assert rec(bytes_per_token_ctx0=123).base_bytes_per_token() == 123
    assert rec(weight_bytes_per_token=100, recurrent_state_bytes=20).base_bytes_per_token() == 120
    assert rec().base_bytes_per_token() is None
    assert rec(weight_bytes_per_token=100, kv_bytes_per_token_ctx=2).bytes_per_token(10) == 120


def test_roofline_of_a_llama_bench_point_uses_the_tg_tests_context():
    assert an.bench_context("tg128") == 64
    assert an.bench_context("tg128 @ d4096") == 4160
    assert an.bench_context("pp512") is None
    r = row(0, 4096, [50.0, 50.0])
    r.tg_test, r.prompt_tokens, r.n_predict = "tg16", 256, 16
    facts = ModelFacts(bytes_per_token_ctx0=1000, kv_bytes_per_token_ctx=10)
    assert an.roofline(r, facts, None).context_used == 8
