"""The runner's new records against the fake llama-server: telemetry, host memory, the host lock and
--allow-busy, and reproduce's plumbing (link, subset, verdict)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes import FakeBuild, fake_binaries
from llamaforge.bench.plan import Plan, Timeouts, make_plan, make_points
from llamaforge.bench.sweep import run_sweep
from llamaforge.errors import BenchError
from llamaforge.hostlock import HostLock


@pytest.fixture
def build(tmp_path):
    return FakeBuild("fake-cpu", fake_binaries(tmp_path / "bin-fake", llamabench=False))


def _plan(tmp_path: Path, points: str = "0:1") -> Plan:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return make_plan(model_ref="m.gguf", model_path=model, model_facts={"n_layers": 4, "n_ctx_train": 32768},
                     points=make_points(points, n_layers=4), repeats=3, prompt_tokens=200, n_predict=8,
                     timeouts=Timeouts(20, 20))


def test_points_store_host_memory_split_and_telemetry(build, store, tmp_path):
    run = run_sweep(_plan(tmp_path, "0"), [build], store, progress=False)
    (p,) = store.points(run)
    assert p.status == "ok", p.failure_detail
    assert p.detail.host_mem["rss_anon_peak_mib"] > 0 and p.detail.host_mem["rss_file_peak_mib"] > 0
    tel = p.detail.telemetry
    assert tel["samples"] >= 1 and "load1" in tel["host"] and "gpu" not in tel   # no NVML here: nothing invented


def test_a_held_host_lock_refuses_the_sweep_before_a_run_exists(build, store, tmp_path):
    with HostLock("other sweep"):
        with pytest.raises(BenchError, match="another llamaforge sweep is measuring"):
            run_sweep(_plan(tmp_path), [build], store, progress=False)
    assert store.list_runs() == []


def test_allow_busy_measures_and_records_it(build, store, tmp_path):
    with HostLock("other sweep"):
        run = run_sweep(_plan(tmp_path, "0"), [build], store, progress=False, allow_busy=True)
    assert store.get_run(run).summary.allow_busy is True
    (p,) = store.points(run)
    assert f"PID {os.getpid()}" in p.detail.busy["host_lock"]   # who held the lock while it measured


def test_reproduce_a_subset_links_the_runs(build, store, tmp_path, monkeypatch):
    from llamaforge.reproduce import remeasure as rep

    run = run_sweep(_plan(tmp_path), [build], store, progress=False)
    monkeypatch.setattr(rep, "run_builds", lambda _s, _p, _r, _b=None: [build])
    v = rep.reproduce(store, None, run, points="1", progress=False)
    child = store.get_run(v.child)
    assert child.parent_run == run and child.plan.reproduces == run
    assert [p.ncmoe for p in store.points(child.id)] == [1]
    assert len(v.points) == 1 and v.line().startswith(f"{v.n_ok}/1 points reproduce")
    assert child.summary.reproduce["line"] == v.line()
