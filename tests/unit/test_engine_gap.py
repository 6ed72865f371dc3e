"""The engine-gap decomposition: what a cross-check start records (fake llama-server, error paths and record
shape) and how the report splits the gap into depth × sampler chain × HTTP × residual (constructed points).

The real numbers come from tests/integration/test_engine_gap_real.py (real llama.cpp, tiny model)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_bench_sweep import _plan

from fakes import FakeBuild, fake_binaries
from llamaforge.bench import engine_gap
from llamaforge.bench.plan import PointSpec
from llamaforge.bench.sweep import measure_point, merge_launch
from llamaforge.llamacpp.server import read_events
from llamaforge.records import LaunchRecord, PointDetail
from llamaforge.report.engine_gap import (
    bench_starts,
    decompose,
    gap_table,
    interpolated,
    server_starts,
)
from llamaforge.store import Point, Sample


@pytest.fixture
def fake(tmp_path):
    def make(mode: str = "ok") -> FakeBuild:
        return FakeBuild(f"fake-{mode}", fake_binaries(tmp_path / f"bin-{mode}", llamabench=False), mode)
    return make


# ---- what a start records -------------------------------------------------------------------------------

def test_round_order_rotates_so_no_variant_always_runs_first() -> None:
    orders = [engine_gap.round_order(i) for i in range(4)]
    assert orders[:2] == [["default", "greedy", "extra-pass", "stream"], ["greedy", "extra-pass", "stream", "default"]]
    assert {o[0] for o in orders} == {"default", *engine_gap.VARIANTS} and engine_gap.round_order(4) == orders[0]


def test_a_cross_check_start_alternates_the_variants_and_keeps_the_default_as_its_samples(fake, store) -> None:
    run = store.new_run("sweep", {})
    p = measure_point(fake(), Path("/m.gguf"), PointSpec(0), _plan(engine="both", repeats=3), store, run,
                      engine="server")
    assert p.status == "ok", p.log_tail
    rec = p.detail.engine_gap
    reqs = rec["requests"]
    assert [r["variant"] for r in reqs] == [v for i in range(3) for v in engine_gap.round_order(i)]
    assert [s.tg_tps for s in p.samples if not s.warmup] == [r["tg_tps"] for r in reqs if r["variant"] == "default"]
    assert {r["tg_tps"] for r in reqs if r["variant"] == "greedy"} == {110.0}    # the fake's greedy speed
    assert [r["samplers"] for r in reqs if r["variant"] == "extra-pass"] == [["temperature", "top_k"]] * 3
    assert [r["samplers"] for r in reqs if r["variant"] == "greedy"] == [["top_k"]] * 3
    streamed = [r for r in reqs if r["variant"] == "stream"]
    assert all(r["client"]["n_tokens"] == 8 and r["client_tg_tps"] > 0 for r in streamed)
    assert all(r["wall_ms"] > 0 for r in reqs) and rec["prompt_n"] == p.prompt_tokens


def test_each_start_keeps_its_own_record_when_launches_are_merged(fake, store) -> None:
    run = store.new_run("sweep", {})
    plan = _plan(engine="both", repeats=1)
    one, two = (measure_point(fake(), Path("/m.gguf"), PointSpec(0), plan, store, run, f"L{k}", engine="server")
                for k in (1, 2))
    two.detail.engine_gap["requests"][0]["tg_tps"] = 42.0       # tell the two starts apart
    acc = merge_launch(merge_launch(None, one, 1, 1), two, 2, 2)
    recs = [r.engine_gap for r in acc.launches]
    assert [r["requests"][0]["tg_tps"] for r in recs] == [100.0, 42.0]
    assert len(server_starts(acc).default) == 2                   # type: ignore[union-attr]


def test_a_plain_server_run_sends_only_the_measured_requests(fake, store) -> None:
    run = store.new_run("sweep", {})
    p = measure_point(fake(), Path("/m.gguf"), PointSpec(0), _plan(repeats=2), store, run)
    assert p.status == "ok" and p.detail.engine_gap is None
    assert sum(not s.warmup for s in p.samples) == 2


def test_a_server_that_rejects_a_variant_loses_the_variant_not_the_point(fake, store) -> None:
    run = store.new_run("sweep", {})
    p = measure_point(fake("no-samplers"), Path("/m.gguf"), PointSpec(0), _plan(engine="both", repeats=2), store,
                      run, engine="server")
    assert p.status == "ok", p.failure_detail
    greedy = [r for r in p.detail.engine_gap["requests"] if r["variant"] == "greedy"]
    assert len(greedy) == 2 and all("HTTP 400" in r["error"] for r in greedy)
    assert server_starts(p) is None                                 # nothing to pair: no decomposition


def test_a_variant_the_server_ignored_is_not_counted() -> None:
    """A server older than the per-request ``samplers`` field runs its default chain for the "greedy" request and
    says so in ``generation_settings``: that request measured nothing of the variant."""
    p = _server()
    for launch in p.launches:
        for r in launch.engine_gap["requests"]:
            r["samplers"] = ["top_k", "top_p", "temperature"] if r["variant"] == "greedy" else r.get("samplers")
    assert server_starts(p) is None
    ok = _server()
    for launch in ok.launches:
        for r in launch.engine_gap["requests"]:
            r["samplers"] = {"greedy": ["top_k"], "extra-pass": ["temperature", "top_k"]}.get(r["variant"])
    assert len(server_starts(ok).greedy) == 3                          # type: ignore[union-attr]


def test_stream_events_are_read_up_to_the_final_one() -> None:
    lines = [b": ping", b"data: {\"tokens\": [1], \"stop\": false}", b"", b"data: not json",
             b"data: {\"tokens\": [2, 3], \"stop\": false}",
             b"data: {\"tokens\": [], \"stop\": true, \"timings\": {\"predicted_per_second\": 5}}",
             b"data: {\"tokens\": [9]}"]
    final, client = read_events(lines)
    assert final is not None and final["timings"]["predicted_per_second"] == 5
    assert client["n_first"] == 1 and client["n_tokens"] == 3 and client["t_last"] >= client["t_first"]
    assert read_events([b"data: {\"tokens\": [1]}"])[0] is None       # a stream cut short has no final event


# ---- the decomposition (constructed points) ---------------------------------------------------------------

LEVELS = [100.0, 80.0, 120.0]       # per start: far apart, as starts are


def _server(levels=LEVELS, greedy: float = 1.08, stream: float = 0.99, prompt_n: int = 250) -> Point:
    p = Point("r", "cpu-x", "server", ncmoe=0, n_predict=16, prompt_tokens=prompt_n)
    launches: list[LaunchRecord] = []
    for k, m in enumerate(levels, start=1):
        reqs = []
        for i, f in enumerate((1.0, 1.01, 0.99)):
            reqs += [{"round": i + 1, "variant": "default", "tg_tps": m * f, "prompt_ms": 10.0, "predicted_ms": 100.0,
                      "wall_ms": 112.0 + k},
                     {"round": i + 1, "variant": "greedy", "tg_tps": m * f * greedy},
                     {"round": i + 1, "variant": "extra-pass", "tg_tps": m * f * greedy * 0.96},
                     {"round": i + 1, "variant": "stream", "tg_tps": m * f * stream, "client_tg_tps": m * f * 0.95}]
            p.samples.append(Sample(i + 1, False, tg_tps=m * f, launch=k))
        launches.append(LaunchRecord(launch=k, engine_gap=engine_gap.record(reqs, prompt_n=prompt_n, n_predict=16)))
    p.detail.launches = launches
    return p


def _bench(levels=(1.1, 0.9, 1.0), depth_gain: float = 1.01, matched: tuple[int, ...] = (1, 2, 3),
           xc_depth: int = 256, prompt_n: int = 250) -> Point:
    p = Point("r", "cpu-x", "llama-bench", ncmoe=0, n_predict=16)
    launches: list[LaunchRecord] = []
    for k, m in enumerate(levels, start=1):
        base = 110.0 * m
        for j, f in enumerate((1.0, 1.02, 0.98)):
            p.samples.append(Sample(j + 1, False, f"tg16 @ d{xc_depth}", tg_tps=base * f, launch=k))
            p.samples.append(Sample(j + 1, False, "tg16", tg_tps=base * f * 1.1, launch=k))
            if k in matched:
                p.samples.append(Sample(j + 1, False, f"tg16 @ d{prompt_n}", tg_tps=base * f * depth_gain, launch=k))
        launches.append(LaunchRecord(launch=k, engine_gap=engine_gap.bench_record(
            xc_depth, prompt_n if k in matched else None, 16)))
    p.detail.launches = launches
    return p


TIGHT_SERVER, TIGHT_BENCH = [100.0, 99.5, 100.5], (1.0, 1.005, 0.995)


def test_the_factors_multiply_to_the_gap_and_the_shares_add_up() -> None:
    d = decompose("CPU", 0, _server(TIGHT_SERVER), _bench(TIGHT_BENCH))
    assert d is not None
    assert d.depth is not None and d.depth.centre == pytest.approx(1.01)
    assert d.sampler.centre == pytest.approx(1 / 1.08)
    assert d.gap.ratio == pytest.approx(d.depth.centre * d.sampler.centre * d.residual.ratio)
    shares = d.shares()
    assert shares is not None and sum(shares.values()) == pytest.approx(1.0) and shares["http"] == 0.0
    assert d.vocab_pass is not None and d.vocab_pass.centre == pytest.approx(0.96)
    assert d.stream_server is not None and d.stream_server.centre == pytest.approx(0.99)
    assert d.stream_client is not None and d.stream_client.centre == pytest.approx(0.95)
    assert d.overhead_ms == pytest.approx(4.0)                      # 112 + k − 10 − 100, median over starts
    assert d.bench.n_measured == 3 and d.to_dict()["server_starts"] == 3


def test_no_shares_of_a_gap_whose_interval_includes_one() -> None:
    """Starts far apart on both sides: the gap may be nothing, and splitting it would print noise as shares."""
    d = decompose("CPU", 0, _server(levels=[100.0, 140.0, 70.0]), _bench(levels=(0.7, 1.3, 1.0)))
    assert d is not None and d.gap.low < 1 < d.gap.high and d.shares() is None
    assert "·" not in gap_table([d]).rows[0][4]                          # type: ignore[union-attr]


def test_a_process_without_the_matched_depth_is_interpolated_and_counted() -> None:
    d = decompose("CPU", 0, _server(), _bench(matched=(2, 3)))
    assert d is not None and d.bench.n_measured == 2 and len(d.bench.matched) == 3
    assert d.bench.matched[0] == [pytest.approx(interpolated(121.0 * 1.1, 121.0, 256, 250))]
    assert d.gap.ratio == pytest.approx(d.depth.centre * d.sampler.centre * d.residual.ratio)   # type: ignore[union-attr]


def test_interpolation_is_linear_in_time_per_token_and_exact_at_both_ends() -> None:
    assert interpolated(200.0, 100.0, 1000, 0) == pytest.approx(200.0)
    assert interpolated(200.0, 100.0, 1000, 1000) == pytest.approx(100.0)
    assert 1 / interpolated(200.0, 100.0, 1000, 500) == pytest.approx((1 / 200 + 1 / 100) / 2)


def test_the_residual_verdict_says_same_only_when_its_interval_lies_within_the_margin() -> None:
    # greedy 1.08 × server 100 vs llama-bench 110 × 1.01 at matched depth: residual ≈ 0.97, starts tight → same
    tight_s, tight_b = TIGHT_SERVER, TIGHT_BENCH
    same = decompose("CPU", 0, _server(tight_s), _bench(tight_b), min_effect=0.05)
    assert same is not None and same.residual.verdict == "same" and abs(same.residual.ratio - 1) < 0.05
    off = decompose("CPU", 0, _server(tight_s, greedy=1.25), _bench(tight_b), min_effect=0.05)
    assert off is not None and off.residual.verdict == "differs" and off.residual.ratio > 1.05


def test_points_without_recorded_variants_are_not_decomposed() -> None:
    old = _server()
    old.detail = PointDetail()
    assert decompose("CPU", 0, old, _bench()) is None
    assert bench_starts(Point("r", "k", "llama-bench", n_predict=16), 250) is None


def test_the_table_shows_ranges_with_two_starts_and_marks_the_assumed_verdict() -> None:
    d = decompose("CPU", 0, _server(levels=[100.0, 80.0]), _bench(levels=(1.1, 0.9)))
    assert d is not None and d.gap.small and d.sampler.kind == "range"
    t = gap_table([d])
    assert t is not None and len(t.rows) == 1
    row = dict(zip(t.columns, t.rows[0], strict=True))
    assert row["starts (server / llama-bench)"] == "2 / 2"
    assert "starts" in row["gap: server / llama-bench tg"] and "[" not in row["gap: server / llama-bench tg"]
    assert row["residual within ±5%"].endswith("*") and row["HTTP"].startswith("1")
    assert "ms of wall time" in t.note
    assert math.isclose(t.data[0]["gap"]["ratio"], d.gap.ratio)
