"""Real llama.cpp (CPU build, tiny MoE): a sweep reports the registry's latency metrics per point with K×R in the
terminal, the report and the export (issue 42: "a real CPU sweep here reports TTFT p50/p95 per point with K×R,
in the terminal, the report and the export"). Time to first token is the server's prompt timing; the p95 of a
start needs 20 requests in it, so this sweep runs 3 starts × 20 requests of a short prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llamaforge import metrics
from llamaforge.judge import metric_starts
from llamaforge.store import Store

pytestmark = pytest.mark.slow

K, R = 3, 20


def _lf(env: dict, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r


def test_a_cpu_sweep_reports_latency_percentiles_per_point_with_k_x_r(cpu_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path), "COLUMNS": "250"}
    bench = _lf(env, "bench", "--model", str(tiny_model), "--backends", "cpu", "--ncmoe", "0,4",
                "--repeats", str(R), "--launches", str(K), "--prompt-tokens", "64", "--n-predict", "32",
                "--threads", "2", "--name", "latency")
    latency = [m for m in metrics.request_metrics() if not m.primary]
    names = {m.name for m in latency}
    assert {"ttft", "ttft_p95", "e2e", "e2e_p95", "itl", "itl_p95"} <= names, names
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("latency")
        assert run.plan.stream is True            # measured requests are streamed: the client times each token
        pts = [p for p in store.points(run.id) if p.label == ""]
        assert sorted(p.ncmoe for p in pts) == [0, 4]
        for p in pts:
            assert p.status == "ok", (p.failure_class, p.failure_detail)
            for m in latency:
                groups = metric_starts.groups(m, p)
                # every start of the point gives the judge one value per request (median metrics) or one
                # percentile (a p95 from its 20 requests), and every value is a positive time in ms
                assert len(groups) == K, (m.name, groups)
                assert all(len(g) == (1 if m.quantile else R) and all(v > 0 for v in g) for g in groups), m.name
            for smp in (x for x in p.samples if not x.warmup):
                # the client's wall time holds the server's own prompt and generation time; its token gaps are
                # of the server's per-token time (a gap of another order means the stream was not timed)
                assert smp.e2e_ms >= 0.99 * (smp.prompt_ms + smp.predicted_ms), smp
                # llama-server timed every event (timings_per_token): ITL is its clock, not this client's reads
                assert len(smp.raw["client"]["server_gaps_ms"]) >= 20, smp.raw["client"]
                per_token = smp.predicted_ms / smp.predicted_n
                assert 0.2 * per_token <= smp.itl_ms <= 5 * per_token and smp.itl_p95_ms >= smp.itl_ms, smp
            raw = [g for g in p.launch_groups(metrics.get("ttft").field) if g]
            p95 = [g[0] for g in metric_starts.groups(metrics.get("ttft_p95"), p)]
            for g, q in zip(raw, p95, strict=True):   # each start's p95 is its own requests' 95th percentile
                assert q == pytest.approx(metric_starts.percentile(g, 0.95)) and q >= sorted(g)[len(g) // 2]
        run_id = run.id
    out = bench.stdout
    assert all(m.label in out for m in latency), out[-3000:]

    rep = _lf(env, "report", "--run", run_id, "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Latency", 1)[1].split("\n## ", 1)[0]
    assert all(m.label in section for m in latency), section
    rows = [ln for ln in section.splitlines() if ln.startswith("| CPU |")]
    assert len(rows) == 2, section
    assert all(f"({K}×{R})" in row and "needs" not in row for row in rows), rows   # every cell says its K×R

    exp = _lf(env, "export", run_id, "--format", "json", "--output", str(tmp_path / "run.json"))
    assert exp.returncode == 0
    doc = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))
    points = doc["points"] if isinstance(doc, dict) else doc
    for p in points:
        summ = p["summary"]["server"]
        for name in names:
            assert summ[name] is not None and summ[name]["k"] == K, (name, summ.get(name))
        assert summ["ttft"]["n_requests"] == K * R
