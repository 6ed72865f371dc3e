"""``bench --ncmoe auto`` glue: the driver over a fake measuring function, the CLI's refusals, the report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import run_fake
from test_cli_bad_numbers import _cli, _gguf, _one_line

from llamaforge.bench.adaptive import AdaptiveOptions
from llamaforge.bench.autosweep import _END_ONLY, AutoDriver, auto_domain
from llamaforge.bench.plan import Plan, PointSpec
from llamaforge.errors import BenchError
from llamaforge.report import build_report
from llamaforge.store import Point, Sample, Store

FACTS = {"n_layers": 8, "n_experts": 16, "n_ctx_train": 4096, "full_attention_layers": [3, 7]}


@dataclasses.dataclass
class FakeBuild:
    key: str
    backend: str = "cpu"


def _plan(tmp_path: Path, **facts) -> Plan:
    return Plan(model_ref="m.gguf", model_path=tmp_path / "m.gguf", model_facts={**FACTS, **facts},
                points=[PointSpec(0)], launches=2)


class FakeMeasure:
    """Stores points whose tg follows 1/(5 + x), with a spike at ncmoe 5, one launch per call of each launch."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id, self.calls = store, run_id, []

    def __call__(self, items, plan):
        self.calls.append(([(b.key, spec.ncmoe, e) for b, spec, e in items], plan.launches, plan.sentinel_every))
        out = []
        for b, spec, e in items:
            tg = 1000 / (5 + spec.ncmoe) * (3 if spec.ncmoe == 5 else 1)
            samples = [Sample(i, False, tg_tps=tg * (1 + 0.01 * (i % 2)), launch=k)
                       for k in range(1, plan.launches + 1) for i in (1, 2)]
            p = Point(self.run_id, b.key, e, spec.ncmoe, samples=samples)
            self.store.record_point(p)
            out.append(p)
        return out


def test_the_driver_measures_chosen_points_confirms_anomalies_and_records_the_plan(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    plan = _plan(tmp_path)
    run_id = store.new_run("sweep", plan.to_json())
    ctx = {"cpu-1": {x: 4096 if x >= 2 else 2048 for x in range(9)}}
    driver = AutoDriver(plan, [FakeBuild("cpu-1")], store, ctx, AdaptiveOptions(), "fit-1")
    fake = FakeMeasure(store, run_id)
    driver(fake, run_id)
    res = driver.result
    assert res is not None and res.conclusions.anomalies == {"cpu-1": [5]} and res.conclusions.threshold == {"cpu-1": 2}
    seen: set[int] = set()
    for items, launches, _ in fake.calls[:-1]:    # --launches 2 per point; a second call: one launch more
        x = items[0][1]
        assert launches == (3 if x in seen else 2)
        seen.add(x)
    assert [c[0][0][1] for c in fake.calls[:-1]].count(5) == 2 and len(seen) == len(fake.calls) - 2
    assert fake.calls[-1][2] == _END_ONLY and fake.calls[-1][0] == [("cpu-1", 0, "server")]   # the end sentinel
    rec = store.get_run(run_id).plan
    measured = sorted(res.measured["cpu-1"])
    assert sorted(p["ncmoe"] for p in rec["points"]) == measured
    ad = rec["adaptive"]
    assert ad["fitmap_run"] == "fit-1" and ad["n_measured"] == len(measured) and ad["stopped"] == "stable"
    assert [c["ncmoe"] for c in ad["chosen"]][:4] == [0, 1, 2, 3] and all(c["reason"] for c in ad["chosen"])
    assert set(map(int, ad["interpolated"]["cpu-1"])) == set(range(9)) - set(measured)
    assert ad["ctx"]["cpu-1"]["2"] == 4096


def test_auto_needs_a_moe_model_with_a_known_layer_count(tmp_path):
    assert auto_domain(_plan(tmp_path)) == list(range(9))
    with pytest.raises(BenchError, match="not a MoE model"):
        auto_domain(_plan(tmp_path, n_experts=0))
    with pytest.raises(BenchError, match="layer count"):
        auto_domain(_plan(tmp_path, n_layers=None))


@pytest.mark.parametrize("args,needles", [
    (["--max-points", "5"], ["--max-points", "--ncmoe auto"]),
    (["--ncmoe", "auto", "--ngl", "0:4"], ["--ncmoe auto", "--ngl"]),
    (["--ncmoe", "auto", "--max-points", "many"], ["--max-points", "many"]),
    (["--ncmoe", "auto", "--time-budget", "-3"], ["--time-budget"]),
    (["--stable-after", "2"], ["--stable-after", "--ncmoe auto"]),
    (["--ncmoe", "auto", "--stable-after", "-1"], ["--stable-after", "at least 0"]),
])
def test_bad_auto_options_are_one_line_with_the_fix(tmp_path, args, needles):
    model = _gguf(tmp_path / "m.gguf")
    _one_line(_cli(tmp_path, "bench", "--model", str(model), *args), *needles)


def test_the_report_lists_measured_and_interpolated_points_but_no_interpolated_number(tmp_path):
    store, run_id = run_fake.build(tmp_path, backends=("cpu",))
    key = "cpu-0c1e570-abcd"
    plan = store.get_run(run_id).plan
    plan["adaptive"] = {"fitmap_run": "f", "n_measured": 3, "stopped": "stable",
                        "chosen": [{"series": key, "ncmoe": x, "reason": f"why {x}"} for x in (0, 1, 8)],
                        "interpolated": {key: {str(x): 12345.678 + x for x in range(2, 8)}},
                        "conclusions": {"threshold": {key: 0}, "sweet_spot": {key: 0}, "anomalies": {key: []},
                                        "suspects": {key: [8]}, "regions": []}}
    store.update_run_plan(run_id, plan)
    _, sections = build_report(store, run_id, tmp_path / "out")
    assert sections[1].id == "adaptive"
    concl = sections[1].tables[0].rows
    assert concl == [["CPU", "0", "0", "none (suspects, not beyond the launch noise: 8)", "0–1, 8", "2–7"]]
    assert [r[2:] for r in sections[1].tables[1].rows] == [["0", "why 0"], ["1", "why 1"], ["8", "why 8"]]
    cells = json.dumps([t.rows for s in sections for t in s.tables])
    assert "12345" not in cells and "12,345" not in cells
