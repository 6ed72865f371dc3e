"""Real llama.cpp (CPU build, tiny MoE): the host lock between two concurrent sweeps, the engine
cross-check (``--engine both``), telemetry / host-memory records, and ``reproduce``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from llamaforge.bench.plan import Timeouts, make_plan, make_points, read_facts
from llamaforge.bench.sweep import run_sweep
from llamaforge.hostlock import LOCK_NAME, holder, lock_dir
from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.reproduce.remeasure import reproduce
from llamaforge.store import Store

pytestmark = pytest.mark.slow


def _bench_cmd(model, ncmoe: str) -> list[str]:
    return [sys.executable, "-m", "llamaforge", "bench", "--model", str(model), "--backends", "cpu",
            "--ncmoe", ncmoe, "--repeats", "1", "--prompt-tokens", "64", "--n-predict", "8", "--threads", "1"]


def test_second_concurrent_sweep_refuses_naming_the_first(cpu_build, tiny_model, tmp_path):
    """A nine-point sweep holds the host lock; a second sweep started meanwhile refuses at once, naming it.
    The first is then stopped (SIGTERM, as a user's kill): the refusal happened while it measured, which is
    the point, and waiting for its nine points would only cost CI time."""
    lock = lock_dir() / LOCK_NAME
    env1 = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path / "r1")}
    env2 = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path / "r2")}
    first = subprocess.Popen(_bench_cmd(tiny_model, "0:8"), env=env1, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        while holder(lock).get("pid") != first.pid:   # the first sweep holds the host lock
            assert first.poll() is None, first.stdout.read() if first.stdout else ""
            time.sleep(0.2)
        second = subprocess.run(_bench_cmd(tiny_model, "0"), env=env2, capture_output=True, text=True, timeout=300)
        still_measuring = first.poll() is None and holder(lock).get("pid") == first.pid
        children = psutil.Process(first.pid).children(recursive=True) if still_measuring else []
        first.terminate()
        out1, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert still_measuring, out1[-2000:]
    assert "Traceback" not in out1, out1[-2000:]
    assert second.returncode != 0
    err = second.stderr.strip()
    last = err.splitlines()[-1]   # one line: what holds the lock, and the fix
    assert "another llamaforge sweep is measuring on this host" in last and f"PID {first.pid}" in last
    assert "--allow-busy" in last and "Traceback" not in err
    assert not (tmp_path / "r2" / "llamaforge.sqlite").exists() or not Store(
        tmp_path / "r2" / "llamaforge.sqlite").list_runs()   # nothing was measured or half-started
    assert holder(lock).get("pid") != first.pid        # the stopped sweep let go of the lock
    time.sleep(0.5)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"the stopped sweep left {[c.name() for c in left]} behind"


def test_engine_both_then_reproduce_a_subset(cpu_build, tiny_model, tmp_path, lf_paths):
    facts = read_facts(tiny_model)
    plan = make_plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=facts,
                     points=make_points("0,8", None, n_layers=facts.n_layers), engine="both", repeats=2,
                     prompt_tokens=64, n_predict=16, threads=2, timeouts=Timeouts(300, 300))
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = run_sweep(plan, [cpu_build], store, progress=False)
        pts = store.points(run)
        assert sorted((p.engine, p.ncmoe) for p in pts) == [("llama-bench", 0), ("llama-bench", 8),
                                                            ("server", 0), ("server", 8)]
        for p in pts:
            assert p.status == "ok", (p.engine, p.failure_detail, p.log_tail)
            hm = p.detail.host_mem
            assert hm["rss_anon_peak_mib"] > 0 and hm["rss_file_peak_mib"] > 0
            assert p.detail.telemetry["samples"] >= 1 and "gpu" not in p.detail.telemetry  # no NVML here
        lb = [p for p in pts if p.engine == "llama-bench"]
        base = {"pp64", "tg16", "tg16 @ d64", "pp64 @ d64"}
        pa = next(p.prompt_tokens for p in pts if p.engine == "server")   # + the server's actual prompt as depth
        assert all(base <= {s.test for s in p.samples} <= base | {f"pp64 @ d{pa}", f"tg16 @ d{pa}"} for p in lb)
        secs = {s.id: s for s in build_sections(rdata.load(store, run), [])}
        cc = secs["crosscheck"].tables[0].data
        assert sorted(d["ncmoe"] for d in cc) == [0, 8] and all(d["pp_ratio"] > 0 and d["tg_ratio"] > 0 for d in cc)
        assert any("use llama-server" in n for n in secs["summary"].notes)
        assert secs["host-memory"].tables[0].data

        v = reproduce(store, lf_paths, run, points="8", progress=False)
        child = store.get_run(v.child)
        assert child.parent_run == run and child.plan.reproduces == run
        assert sorted((p.engine, p.ncmoe) for p in store.points(child.id)) == [("llama-bench", 8), ("server", 8)]
        assert len(v.points) == 2 and v.line().startswith(f"{v.n_ok}/2 points reproduce")
        assert child.summary.reproduce["line"] == v.line()
        parent_secs = {s.id: s for s in build_sections(rdata.load(store, run), [])}
        assert v.line() in parent_secs["reproduction"].notes[0]
