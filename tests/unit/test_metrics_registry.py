"""The metric registry (issue 42): every metric declared once; a percentile never shown from too few requests;
lower-is-better metrics read the right way round; latency verdicts never widen the pp/tg intervals."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llamaforge import metrics
from llamaforge.compare.judged import compare_sides
from llamaforge.findings.comparison import verdict_word
from llamaforge.history import model as hmodel
from llamaforge.judge import metric_starts
from llamaforge.report.data import Row
from llamaforge.store import Point, Sample


def _point(label: str, *, k: int = 3, r: int = 20, ttft: float = 100.0, tg: float = 50.0, seed: int = 1,
           engine: str = "server") -> Point:
    rng = random.Random(seed)
    samples = [Sample(0, True, pp_tps=500.0, tg_tps=tg, prompt_ms=ttft * 3)]
    for launch in range(1, k + 1):
        shift = 1 + rng.uniform(-0.01, 0.01)
        for i in range(r):
            samples.append(Sample(i + 1, False, pp_tps=500.0 * shift * (1 + rng.uniform(-0.01, 0.01)),
                                  tg_tps=tg * shift * (1 + rng.uniform(-0.01, 0.01)),
                                  prompt_ms=ttft * shift * (1 + rng.uniform(-0.05, 0.05)), launch=launch))
    return Point(run_id="r", build_key="b", engine=engine, label=label, samples=samples)


def test_percentile_matches_numpy_linear_interpolation():
    rng = random.Random(3)
    for n in (1, 2, 5, 20, 101):
        xs = [rng.uniform(1, 100) for _ in range(n)]
        for q in (0.5, 0.95, 0.99):
            assert metric_starts.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q * 100)))


def test_every_metric_is_declared_once_and_named_by_its_key():
    assert list(metrics.REGISTRY)[:2] == ["pp", "tg"]
    for name, m in metrics.REGISTRY.items():
        assert m.name == name and m.unit and m.label and m.title and m.noun
        assert m.estimator == "median" or (m.quantile is not None and m.min_requests >= 20), m
        if m.per == "request":
            assert m.field in Sample.__dataclass_fields__, m
    # the history's metrics are the registry's, not a second table
    assert {n: (v.label, v.unit, v.higher_is_better) for n, v in hmodel.METRICS.items()} == {
        m.name: (m.noun, m.unit, m.higher_is_better) for m in metrics.REGISTRY.values() if m.history}


def test_a_p95_needs_enough_requests_in_every_start_and_says_so():
    p95 = metrics.Metric("ttft_p95", "prompt_ms", "TTFT p95 ms", "TTFT (p95)", "p95", "ms", False,
                         estimator="p95", min_requests=20, engines=("server",))
    enough, few = _point("A", r=p95.min_requests), _point("A", r=4)
    assert len(metric_starts.groups(p95, enough)) == 3 and all(len(g) == 1 for g in metric_starts.groups(p95, enough))
    assert metric_starts.groups(p95, few) == []                                # the "p95" of 4 requests is never computed
    why = metric_starts.shortfall(p95, few)
    assert why and f"≥ {p95.min_requests} requests a start" in why and "3×4" in why
    assert metric_starts.shortfall(p95, enough) is None
    starts = [g for g in few.launch_groups("prompt_ms")]
    assert metric_starts.start_values(p95, starts[0]) == [] and metric_starts.start_values(p95, starts[0] * 5) == [
        pytest.approx(metric_starts.percentile(starts[0] * 5, 0.95))]


def test_a_report_row_reads_every_request_metric_of_the_registry_from_its_point():
    p = _point("A", r=4)
    row = Row(ncmoe=0, point=p)
    for m in metrics.request_metrics():
        if not m.primary:
            assert row.starts(m.name).k == (3 if metric_starts.groups(m, p) else 0)
    assert row.estimate("ttft") is not None and row.estimate("ttft").k == 3


def test_an_engine_that_does_not_time_requests_has_no_latency():
    ttft = metrics.get("ttft")
    assert metric_starts.groups(ttft, _point("A", engine="llama-bench")) == []
    assert "ttft" not in {m.name for m in metrics.by_engine("llama-bench")}


def test_lower_is_better_metrics_call_a_rise_worse():
    assert verdict_word({"verdict": "differs", "ratio": 1.3}) == "better"        # t/s up
    assert verdict_word({"verdict": "differs", "ratio": 1.3, "better": "lower"}) == "worse"   # ms up
    assert verdict_word({"verdict": "differs", "ratio": 0.7, "better": "lower"}) == "better"


def test_a_slower_first_token_is_judged_worse_and_leaves_pp_and_tg_intervals_as_they_were():
    a = [_point(f"A.{i}", seed=i) for i in range(2)]
    b = [_point(f"B.{i}", seed=10 + i, ttft=150.0) for i in range(2)]
    rows = {r["metric"]: r for r in compare_sides(a, b)}
    assert rows["ttft"]["comparison"]["better"] == "lower"
    assert verdict_word(rows["ttft"]["comparison"]) == "worse"
    # without the latency samples the throughput verdicts and their intervals are the same: separate families
    for p in (*a, *b):
        for s in p.samples:
            s.prompt_ms = None
    plain = {r["metric"]: r for r in compare_sides(a, b)}
    assert "ttft" not in plain
    for m in ("pp", "tg"):
        got, want = rows[m]["comparison"], plain[m]["comparison"]
        assert (got["low"], got["high"], got["verdict"]) == (want["low"], want["high"], want["verdict"])


def test_a_streamed_request_keeps_its_client_latency_and_an_unstreamed_one_none():
    from llamaforge.bench.engines.server import _sample

    rng = random.Random(3)
    gaps = [round(rng.uniform(8, 40), 3) for _ in range(30)]
    timings = {"prompt_n": 64, "prompt_ms": 12.0, "predicted_n": 31, "predicted_ms": 400.0}
    s = _sample(1, False, {"timings": timings, "client": {"t_sent": 1.0, "gaps_ms": gaps}}, 512.25)
    assert s.e2e_ms == 512.25
    assert s.itl_ms == pytest.approx(float(np.median(gaps)), abs=1e-3)
    assert s.itl_p95_ms == pytest.approx(float(np.percentile(gaps, 95)), abs=1e-3)
    short = _sample(1, False, {"timings": timings, "client": {"gaps_ms": gaps[:5]}}, 80.0)
    assert short.itl_ms is not None and short.itl_p95_ms is None     # 5 gaps: no p95 within the request
    plain = _sample(1, False, {"timings": timings}, 512.25)
    assert (plain.e2e_ms, plain.itl_ms, plain.itl_p95_ms) == (None, None, None)


def test_the_client_latency_survives_the_store(tmp_path):
    from llamaforge.store import Store

    with Store(tmp_path / "s.sqlite") as st:
        run = st.new_run("bench", {})
        p = Point(run, "k-cpu", "server", samples=[Sample(idx=1, warmup=False, tg_tps=10.0, e2e_ms=99.5,
                                                          itl_ms=9.25, itl_p95_ms=20.0)])
        st.record_point(p)
        got = st.points(run)[0].samples[0]
    assert (got.e2e_ms, got.itl_ms, got.itl_p95_ms) == (99.5, 9.25, 20.0)


def test_inter_token_gaps_come_from_the_servers_clock_when_its_events_carry_timings():
    import json

    from llamaforge.llamacpp.server import read_events

    def ev(n_pred: int, ms: float, stop: bool = False) -> bytes:
        body = {"tokens": [1], "stop": stop, "timings": {"predicted_n": n_pred, "predicted_ms": ms}}
        return b"data: " + json.dumps(body).encode()

    lines = [ev(1, 10.0), ev(2, 22.0), ev(3, 31.0), ev(4, 45.0, stop=True)]
    final, client = read_events(lines)     # read all at once: the client's own gaps are ~0
    assert final["stop"] and client["server_gaps_ms"] == [12.0, 9.0]
    assert all(g < 5 for g in client["gaps_ms"])
    from llamaforge.bench.engines.server import _sample

    s = _sample(1, False, {"timings": {"predicted_n": 4, "predicted_ms": 45.0}, "client": client}, 50.0)
    assert s.itl_ms == 10.5                 # the server's gaps, not the near-zero reads
