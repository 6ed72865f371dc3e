"""Issue 12 against real llama.cpp: a real llama-server point is measured although HTTP_PROXY and
friends point at a dead port (the local session ignores the environment)."""

from __future__ import annotations

import pytest

from llamaforge import proc
from llamaforge.bench.plan import PointSpec, Timeouts, make_plan, read_facts
from llamaforge.bench.sweep import run_sweep
from llamaforge.store import Store

pytestmark = pytest.mark.slow


def test_a_real_point_is_measured_despite_a_dead_proxy(cpu_build, tiny_model, tmp_path, monkeypatch):
    dead = f"http://127.0.0.1:{proc.free_port()}"
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, dead)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    plan = make_plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=read_facts(tiny_model),
                     points=[PointSpec(0)], repeats=1, prompt_tokens=64, n_predict=8, threads=2,
                     timeouts=Timeouts(300, 300))
    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        run = run_sweep(plan, [cpu_build], store, progress=False)
        (pt,) = store.points(run)
        assert pt.status == "ok", (pt.failure_class, pt.failure_detail, pt.log_tail)
        assert pt.measured("tg_tps") and pt.n_ctx
