"""The CPU roofline of a real CPU run: the report shows the CPU's measured RAM bandwidth and a % of it.

Issue 13: the report once read keys nothing writes, so the CPU's bandwidth was "unknown" in every
real run while a fake written in the same phantom keys kept the unit tests green.
"""

from __future__ import annotations

import pytest

from llamaforge.bench.plan import make_plan, make_points
from llamaforge.bench.sweep import run_sweep
from llamaforge.models import model_facts
from llamaforge.report import build_report, write_report
from llamaforge.store import Store

pytestmark = pytest.mark.slow


def test_report_of_a_real_cpu_run_has_a_cpu_roofline(lf_paths, cpu_build, tiny_model, tmp_path):
    facts = model_facts(tiny_model)
    plan = make_plan(model_ref="synth:tiny-qwen35moe", model_path=tiny_model, model_facts=facts,
                     points=make_points("0", None, n_layers=facts.n_layers), backends=["cpu"],
                     repeats=1, prompt_tokens=64, n_predict=8, threads=2, launches=1)
    with Store(tmp_path / "s.sqlite") as store:
        run_id = run_sweep(plan, [cpu_build], store, name="roofline", progress=False)
        env = store.get_run(run_id).env
        _, sections = build_report(store, run_id, tmp_path / "a")
        md = write_report(store, run_id, tmp_path / "out").md.read_text()
    roof = next(s for s in sections if s.id == "roofline")
    assert roof.tables, roof.absent
    rows = roof.tables[0].data
    assert rows and all(d["series"] == "CPU" for d in rows)
    assert env.ram_bandwidth_gbps > 0
    for d in rows:
        assert d["device_gbs"] == env.ram_bandwidth_gbps
        assert d["bytes_per_token"] >= facts.bytes_per_token(0) and d["achieved_gbs"] > 0
        assert d["fraction"] == pytest.approx(d["achieved_gbs"] / d["device_gbs"])
    cpu_rows = [line for line in md.splitlines() if line.startswith("| CPU |") and "%" in line]
    assert cpu_rows and not any("unknown" in line for line in cpu_rows)
