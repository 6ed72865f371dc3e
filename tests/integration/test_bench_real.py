"""Real sweeps with real llama.cpp (CPU build; Vulkan on lavapipe) on a tiny synthetic MoE."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llamaforge.bench.adjust import CPU_VULKAN_PROMPT_TOKENS
from llamaforge.bench.fitmap import run_fitmap
from llamaforge.bench.plan import FitOptions, Plan, PointSpec, Timeouts, make_plan, make_points, read_facts
from llamaforge.bench.sweep import run_sweep
from llamaforge.llamacpp import server as server_mod
from llamaforge.store import Store

pytestmark = pytest.mark.slow

QUICK = dict(repeats=2, prompt_tokens=256, n_predict=16, threads=2, timeouts=Timeouts(300, 300))


def _servers_below(pid: int) -> list[psutil.Process]:
    """llama-server processes among the descendants of ``pid``."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        try:
            if "llama-server" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "results" / "llamaforge.sqlite")
    yield s
    s.close()
    assert _servers_below(os.getpid()) == [], "a llama-server outlived its test"


def _plan(model: Path, points: list[PointSpec], **kw) -> Plan:
    facts = read_facts(model)
    return make_plan(model_ref=str(model), model_path=model, model_facts=facts, points=points, **{**QUICK, **kw})


def _check_swept_points(store: Store, run: str, plan: Plan, build, prompt_tokens: int) -> None:  # noqa: ANN001
    """Every point of ``build`` in ``run``: context, memory and both speeds measured, nothing invented."""
    pts = [p for p in store.points(run) if p.build_key == build.key]
    assert [p.ncmoe for p in pts] == [s.ncmoe for s in plan.points]
    for p in pts:
        assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
        assert p.n_ctx and p.n_ctx > 0 and p.n_ctx_train == plan.facts.n_ctx_train
        assert p.rss_peak_mib and p.rss_peak_mib > 0
        assert p.mem_breakdown and p.mem_breakdown["host"]["self"] > 0
        if build.backend == "cpu":
            assert p.vram_used_mib is None and p.vram_self_mib is None  # nothing invented without a GPU
        assert sum(s.warmup for s in p.samples) == 1
        assert len(p.measured("pp_tps")) == 2 and len(p.measured("tg_tps")) == 2
        assert all(v > 0 for v in p.measured("pp_tps") + p.measured("tg_tps"))
        # lavapipe runs with a shorter prompt (bench.adjust); elsewhere the prompt asked for
        cap = min(prompt_tokens, CPU_VULKAN_PROMPT_TOKENS) if build.capabilities.get("vulkan_cpu_device") \
            else prompt_tokens
        assert 0.75 * cap < p.prompt_tokens <= cap and all(s.prompt_n == p.prompt_tokens for s in p.samples)
        assert all(s.predicted_n == plan.n_predict for s in p.samples)
        assert "--n-cpu-moe" in p.command or p.ncmoe == 0
    assert store.get_run(run).status == "done"
    assert build.key in {b["key"] for b in store.builds_for_run(run)}
    assert store.get_run(run).env.cpu_model


def test_sweep_measures_context_memory_and_both_speeds_at_every_point(cpu_build, tiny_model, store, lf_paths):
    n_layers = read_facts(tiny_model).n_layers
    plan = _plan(tiny_model, make_points(f"0:{n_layers}", n_layers=n_layers))
    run = run_sweep(plan, [cpu_build], store, progress=False)
    _check_swept_points(store, run, plan, cpu_build, QUICK["prompt_tokens"])


def test_the_shared_cpu_and_vulkan_sweep_measured_every_point(real_sweep_run, cpu_build, vulkan_build):
    """The same checks on the session's CPU + Vulkan (lavapipe) sweep (conftest.real_sweep_run, which the
    report tests read too): lavapipe is slow, so one real Vulkan sweep serves both."""
    store_path, run = real_sweep_run
    with Store(store_path) as store:
        plan = store.get_run(run).plan
        for build in (cpu_build, vulkan_build):
            _check_swept_points(store, run, plan, build, plan.prompt_tokens)


def test_failing_points_are_recorded_and_the_sweep_finishes(cpu_build, tiny_model, store, lf_paths, monkeypatch):
    real_complete = server_mod.ServerSession.complete
    calls = {"n": 0}

    def killing_complete(self, prompt, n_predict, *, timeout, **kw):
        if "--n-cpu-moe" in self.args and self.args[self.args.index("--n-cpu-moe") + 1] == "3":
            calls["n"] += 1
            if calls["n"] == 2:  # after the warm-up: kill the real server mid-measurement
                os.killpg(self.proc.pid, signal.SIGKILL)
        return real_complete(self, prompt, n_predict, timeout=timeout, **kw)

    monkeypatch.setattr(server_mod.ServerSession, "complete", killing_complete)
    points = [PointSpec(0), PointSpec(2, extra_args=("--no-such-flag",)), PointSpec(3), PointSpec(4)]
    run = run_sweep(_plan(tiny_model, points, repeats=2), [cpu_build], store, progress=False)
    by_n = {p.ncmoe: p for p in store.points(run)}
    assert by_n[0].status == "ok" and by_n[4].status == "ok"
    assert by_n[2].status == "failed" and by_n[2].failure_class == "error" and "no-such-flag" in by_n[2].log_tail
    assert by_n[3].status == "failed" and by_n[3].failure_class == "crash"
    assert by_n[3].log_tail and by_n[3].n_ctx  # what was measured before the crash is kept
    assert store.get_run(run).summary.failed == 2


def test_kill_9_mid_sweep_then_resume_ends_with_every_point_once(cpu_build, tiny_model, tmp_path, lf_paths):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path / "results")}
    n_layers = read_facts(tiny_model).n_layers
    cmd = [sys.executable, "-c", "from llamaforge.cli import main; main()", "bench", "--model", str(tiny_model),
           "--backends", "cpu", "--ncmoe", f"0:{n_layers}", "--repeats", "1", "--prompt-tokens", "128",
           "--n-predict", "8", "--threads", "2", "--launches", "1"]  # a point is complete after one start
    db = tmp_path / "results" / "llamaforge.sqlite"
    bench = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if db.exists():
                with Store(db) as s:
                    runs = s.list_runs()
                    if runs and len(s.points(runs[0].id, with_samples=False)) >= 2 and _servers_below(bench.pid):
                        break
            assert bench.poll() is None, bench.stderr.read().decode()
            time.sleep(0.2)
        servers = [p.pid for p in _servers_below(bench.pid)]
        assert servers, "no llama-server was running when the bench was killed"
        bench.send_signal(signal.SIGKILL)
        bench.wait(timeout=30)
    finally:
        if bench.poll() is None:
            bench.kill()
    time.sleep(1.5)
    assert _alive(servers) == [], "llama-server survived kill -9 of its bench"
    with Store(db) as s:
        run_id = s.list_runs()[0].id
        partial = s.points(run_id, with_samples=False)
        assert 2 <= len(partial) < n_layers + 1
    r = subprocess.run([*cmd[:3], "bench", "--resume", run_id], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    with Store(db) as s:
        pts = s.points(run_id)
        assert sorted(p.ncmoe for p in pts) == list(range(n_layers + 1))
        assert {p.id for p in partial} <= {p.id for p in pts}  # measured points were not re-measured
        assert all(p.status == "ok" and len(p.measured("tg_tps")) == 1 for p in pts)
        assert s.get_run(run_id).status == "done"


def test_k2_sweep_killed_then_resumed_on_another_machine_warns_and_marks_the_mixed_points(cpu_build, tiny_model,
                                                                                         tmp_path, lf_paths):
    """The H200 case of 12-01: a K=2 sweep interrupted on one VM, resumed on another. The second machine is
    played with LLAMAFORGE_MACHINE_ID (the override that exists for this); everything else is real."""
    from llamaforge.machine import OVERRIDE_ENV
    from llamaforge.report import data as rdata
    from llamaforge.report.contents import build_sections

    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path / "results"), OVERRIDE_ENV: "vm-one"}
    cmd = [sys.executable, "-c", "from llamaforge.cli import main; main()", "bench", "--model", str(tiny_model),
           "--backends", "cpu", "--ncmoe", "0,4", "--repeats", "2", "--prompt-tokens", "128", "--n-predict", "8",
           "--threads", "2", "--launches", "2", "--sentinel-every", "0"]
    db = tmp_path / "results" / "llamaforge.sqlite"
    bench = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:   # kill after the first stored launch (4 in the schedule)
            if db.exists():
                with Store(db) as s:
                    runs = s.list_runs()
                    if runs and sum(len(p.launches) for p in s.points(runs[0].id, with_samples=False)) >= 1:
                        break
            assert bench.poll() is None, bench.stderr.read().decode()
            time.sleep(0.1)
        bench.send_signal(signal.SIGKILL)
        bench.wait(timeout=30)
    finally:
        if bench.poll() is None:
            bench.kill()
    with Store(db) as s:
        run_id = s.list_runs()[0].id
        before = sum(len(p.launches) for p in s.points(run_id, with_samples=False))
    assert 1 <= before < 4, f"{before} launches stored before the kill: nothing left to resume on machine 2"
    r = subprocess.run([*cmd[:3], "bench", "--resume", run_id], env={**env, OVERRIDE_ENV: "vm-two"},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    warns = [line for line in r.stderr.splitlines() if "warning:" in line and "resuming run" in line]
    assert len(warns) == 1 and "on machine vm-two" in warns[0] and f"{before} earlier launches" in warns[0]
    assert f"vm-one ({os.uname().nodename}): {before}" in warns[0]
    with Store(db) as s:
        run = s.get_run(run_id)
        pts = s.points(run_id)
        assert run.status == "done" and all(p.status == "ok" and len(p.launches) == 2 for p in pts)
        assert [res.machine.id for res in run.env.resumes] == ["vm-two"]
        counts = {m: v["launches"] for m, v in run.summary.machines["launches"].items()}
        assert counts == {"vm-one": before, "vm-two": 4 - before}
        # launches 1 of both points come first in the schedule: at least one point has one launch per machine
        mixed = [p.ncmoe for p in pts if {r.machine_id for r in p.launches} == {"vm-one", "vm-two"}]
        assert mixed and len(run.summary.machines["mixed_points"]) == len(mixed)
        sections = build_sections(rdata.load(s, run_id), [])
    notes = [n for sec in sections for n in sec.notes]
    assert any("measured on 2 machines (launches per machine: vm-" in n for n in notes)
    assert any(f"ncmoe {mixed[0]}" in n and "more than one machine" in n for n in notes)
    rows = [row for sec in sections for t in sec.tables for row in t.rows]   # points + replication tables
    assert sum(1 for row in rows if "launches from 2 machines" in row[-1]) == 2 * len(mixed)


def test_llama_bench_engine_keeps_every_sample_and_takes_context_from_fit_params(cpu_build, tiny_model, store,
                                                                                 lf_paths):
    plan = _plan(tiny_model, make_points("0,4", n_layers=8), engine="llama-bench", prompt_tokens=64, n_predict=8)
    run = run_sweep(plan, [cpu_build], store, progress=False)
    for p in store.points(run):
        assert p.status == "ok", (p.failure_class, p.log_tail)
        assert {s.test for s in p.samples} == {"pp64", "tg8"}
        assert len(p.measured("pp_tps", "pp64")) == 2 and len(p.measured("tg_tps", "tg8")) == 2
        assert p.n_ctx and p.detail.n_ctx_source == "llama-fit-params"
        assert "--fit-target" not in p.command and "-fitt" not in p.command
        assert p.detail.llama_bench[0]["n_cpu_moe"] == p.ncmoe


def test_fitmap_gives_a_fitted_context_for_every_point(cpu_build, tiny_model, store):
    n_layers = read_facts(tiny_model).n_layers
    plan = _plan(tiny_model, make_points(f"0:{n_layers}", n_layers=n_layers))
    t0 = time.monotonic()
    run = run_fitmap(plan, [cpu_build], store, progress=False)
    pts = store.points(run)
    assert store.get_run(run).kind == "fitmap" and len(pts) == n_layers + 1
    assert all(p.status == "ok" and p.engine == "fit" and p.n_ctx for p in pts)
    assert pts[0].detail.fit["overrides"] == [] and len(pts[-1].detail.fit["overrides"]) == n_layers
    assert time.monotonic() - t0 < 10 * (n_layers + 1)
    failing = _plan(tiny_model, [PointSpec(0)], fit=FitOptions(fitt_mib=10_000_000))
    bad = store.points(run_fitmap(failing, [cpu_build], store, progress=False))[0]
    assert bad.status == "failed" and bad.failure_class == "fit", (bad.failure_class, bad.log_tail)


def test_replicated_sweep_with_a_sentinel_on_real_llama_cpp(cpu_build, tiny_model, store, lf_paths, tmp_path):
    """K = 2 launches per point, interleaved, plus a drift sentinel, against the real CPU build; the
    report shows the clustered statistics. (Kept short: 2 points, tiny prompt, few tokens.)"""
    from llamaforge.findings.labels import SENTINEL_LABEL
    from llamaforge.report import write_report

    n_layers = read_facts(tiny_model).n_layers
    plan = _plan(tiny_model, make_points(f"0,{n_layers}", n_layers=n_layers), prompt_tokens=64, n_predict=8,
                 launches=2, seed=11, sentinel_every=2)
    run = run_sweep(plan, [cpu_build], store, progress=False)
    pts = store.points(run)
    regular = [p for p in pts if p.label == ""]
    sentinel = [p for p in pts if p.label == SENTINEL_LABEL]
    assert sorted(p.ncmoe for p in regular) == [0, n_layers]
    for p in regular:
        assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
        assert sorted(r.launch for r in p.launches) == [1, 2]
        assert [len(g) for g in p.launch_groups("tg_tps")] == [2, 2]
        assert sum(s.warmup for s in p.samples) == 2                     # one discarded warm-up per launch
    # 4 regular starts, a sentinel after the 2nd and the 4th (the end): the reference is ncmoe 0
    assert len(sentinel) == 1 and sentinel[0].ncmoe == 0 and len(sentinel[0].launches) == 2
    seqs = sorted([(r.seq, p.label or "regular") for p in pts for r in p.launches])
    assert [lab for _s, lab in seqs] == ["regular", "regular", SENTINEL_LABEL, "regular", "regular", SENTINEL_LABEL]
    assert seqs[0][0] == 1 and seqs[-1][0] == 6
    md = write_report(store, run, tmp_path / "report").md.read_text()
    assert "Replication and drift" in md and "| 2×2 |" in md and "not measured" not in md.split("Replication")[1][:400]
    assert "range of the two starts" in md

    # then reproduce it: the re-run measures its own sentinel, but only the 2 points are judged
    from llamaforge.reproduce.remeasure import reproduce

    v = reproduce(store, lf_paths, run, progress=False)
    assert [p.label for p in store.points(v.child)].count(SENTINEL_LABEL) == 1
    assert sorted(p.name for p in v.points) == sorted(["CPU ncmoe 0", f"CPU ncmoe {n_layers}"])
    assert v.line().startswith(f"{v.n_ok}/2 points reproduce")
