"""The runner's control flow against a fake llama-server: samples, failures, resume, cleanup."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from fakes import FakeBuild, fake_binaries
from llamaforge.bench.plan import PointSpec, Timeouts, make_plan, make_points
from llamaforge.bench.summary import point_summary
from llamaforge.bench.sweep import measure_point, run_sweep


@pytest.fixture
def fake_build(tmp_path):
    def make(key="fake-cpu", mode="ok", **extra):
        return FakeBuild(key, fake_binaries(tmp_path / f"bin-{key}", llamabench=False), mode, extra_env=extra)
    return make


def _plan(points="0:2", **kw):
    base = dict(model_ref="m.gguf", model_path=Path("/nonexistent/m.gguf"),
                model_facts={"n_layers": 4, "n_ctx_train": 32768}, points=make_points(points, n_layers=4),
                repeats=3, prompt_tokens=200, n_predict=8, timeouts=Timeouts(20, 20))
    base.update(kw)
    return make_plan(**base)


def _leftovers(tmp_path: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if str(tmp_path) in cmd and "llama-server" in cmd:
            out.append(p)
    return out


@pytest.fixture(autouse=True)
def no_server_left_behind(tmp_path):
    yield
    assert _leftovers(tmp_path) == []


def test_a_point_stores_warmup_and_measured_samples_context_and_memory(fake_build, store):
    b = fake_build()
    run = store.new_run("sweep", {})
    p = measure_point(b, Path("/m.gguf"), PointSpec(2), _plan(), store, run, "")
    assert p.status == "ok", p.log_tail
    assert p.n_ctx == 8192 and p.n_ctx_train == 32768 and p.build_info == "b1-fake"
    assert [s.warmup for s in p.samples] == [True, False, False, False]
    assert 150 < p.prompt_tokens <= 200 and all(s.prompt_n == p.prompt_tokens for s in p.samples)
    assert p.rss_peak_mib and p.rss_peak_mib > 0
    assert p.vram_self_mib is None  # no device in the breakdown, no invented VRAM
    assert p.mem_breakdown["host"]["self"] == 81
    assert "--n-cpu-moe" in p.command and "--log-jsonl" in p.command and "--no-webui" not in p.command
    stored = store.points(run)[0]
    assert len(stored.samples) == 4 and "prompt" not in stored.samples[1].raw


def test_statistics_never_count_the_warmup(fake_build, store):
    b = fake_build()
    run = store.new_run("sweep", {})
    p = measure_point(b, Path("/m.gguf"), PointSpec(0), _plan(repeats=2), store, run)
    p.samples[0].pp_tps = 1.0  # a wildly slow warm-up must not move the summary
    s = point_summary(p)["server"]
    assert s["pp"]["n_requests"] == 2 and s["pp"]["shape"] == "1×2" and s["pp"]["centre"] > 1000


@pytest.mark.parametrize("mode, plan_kw, want", [
    ("oom", {}, "oom"),
    ("unhealthy", {"timeouts": Timeouts(load_s=1.5, request_s=20)}, "unhealthy"),
    ("hang", {"timeouts": Timeouts(load_s=20, request_s=1.0)}, "hang"),
    ("crash-request", {}, "crash"),
])
def test_failing_points_are_recorded_with_class_and_log_tail(fake_build, store, mode, plan_kw, want):
    b = fake_build(mode=mode)
    run = store.new_run("sweep", {})
    p = measure_point(b, Path("/m.gguf"), PointSpec(1), _plan(**plan_kw), store, run)
    assert p.status == "failed" and p.failure_class == want, (p.failure_detail, p.log_tail)
    assert p.log_tail and "initializing" in p.log_tail
    assert store.points(run)[0].failure_class == want


def test_a_taken_port_is_retried_on_another(fake_build, store, tmp_path):
    b = fake_build(mode="portbusy-once", FAKE_STATE=str(tmp_path / "busy"))
    run = store.new_run("sweep", {})
    p = measure_point(b, Path("/m.gguf"), PointSpec(0), _plan(repeats=1), store, run)
    assert p.status == "ok", p.log_tail
    assert (tmp_path / "busy").exists()


def test_sweep_goes_on_after_a_failing_build_and_resume_measures_only_what_is_missing(fake_build, store):
    good, bad = fake_build("good"), fake_build("bad", mode="oom")
    plan = _plan("0:2", repeats=1)
    run = run_sweep(plan, [good, bad], store, progress=False)
    pts = store.points(run)
    assert len(pts) == 6
    assert {p.status for p in pts if p.build_key == "good"} == {"ok"}
    assert {p.failure_class for p in pts if p.build_key == "bad"} == {"oom"}
    assert store.get_run(run).status == "done" and store.get_run(run).summary.failed == 3
    # lose one ok point (as after a kill -9 mid-point), then resume
    store.db.execute("DELETE FROM points WHERE run_id=? AND build_key='good' AND ncmoe=1", (run,))
    before = {p.id for p in store.points(run)}
    run_sweep(plan, [good, bad], store, resume_run=run, progress=False)
    after = store.points(run)
    assert len(after) == 6 and len({p.key for p in after}) == 6
    assert {p.id for p in after} - before == {p.id for p in after if p.build_key == "good" and p.ncmoe == 1}
    # failed points are kept, unless asked to retry them
    run_sweep(plan, [good, bad], store, resume_run=run, retry_failed=True, progress=False)
    again = store.points(run)
    assert len(again) == 6
    assert {p.id for p in again if p.build_key == "bad"}.isdisjoint(before)


def test_vram_budget_is_ignored_with_a_notice_for_cpu_builds(fake_build, store):
    from llamaforge.bench.plan import FitOptions

    plan = _plan("0", repeats=1, fit=FitOptions(vram_budget_gib=24))
    run = run_sweep(plan, [fake_build()], store, progress=False)
    fit = store.get_run(run).plan.fit
    assert fit.margins_mib is None and "ignored" in fit.notice
    assert "--fit-target" not in store.points(run)[0].command



def test_vram_budget_leaves_llama_cpps_default_margin_inside_the_budget():
    from llamaforge.bench.fit import LLAMA_DEFAULT_FIT_MARGIN_MIB, budget_margins

    # an H200 with 142,000 MiB free emulating a 24 GiB card: fit into 24 GiB − 1 GiB
    (m,) = budget_margins([142_000], 24)
    assert 142_000 - m == 24 * 1024 - LLAMA_DEFAULT_FIT_MARGIN_MIB
    assert budget_margins([10_000], 24) == [0]          # a smaller card than the budget: no margin
