"""``bench --ncmoe auto`` glue: the driver over a fake measuring function, the CLI's refusals, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import run_fake
from test_cli_bad_numbers import _cli, _gguf, _one_line

from fakes import FakeBuild
from llamaforge.bench.adaptive import AdaptiveOptions
from llamaforge.bench.autosweep import _END_ONLY, AutoDriver, Axis, auto_axis
from llamaforge.bench.plan import Plan, PointSpec, make_plan
from llamaforge.errors import BenchError
from llamaforge.records import LaunchRecord
from llamaforge.report import build_report
from llamaforge.store import Point, Sample, Store

FACTS = {"n_layers": 8, "n_experts": 16, "n_ctx_train": 4096, "full_attention_layers": [3, 7]}


def _plan(tmp_path: Path, **facts) -> Plan:
    return make_plan(model_ref="m.gguf", model_path=tmp_path / "m.gguf", model_facts={**FACTS, **facts},
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
    driver = AutoDriver(plan, [FakeBuild("cpu-1", mode=None)], store, ctx, AdaptiveOptions(), "fit-1")
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
    assert sorted(p.ncmoe for p in rec.points) == measured
    ad = rec.adaptive.to_json()
    assert ad["fitmap_run"] == "fit-1" and ad["n_measured"] == len(measured) and ad["stopped"] == "stable"
    assert [c["ncmoe"] for c in ad["chosen"]][:4] == [0, 1, 2, 3] and all(c["reason"] for c in ad["chosen"])
    assert set(map(int, ad["interpolated"]["cpu-1"])) == set(range(9)) - set(measured)
    assert ad["ctx"]["cpu-1"]["2"] == 4096


def test_ncmoe_auto_needs_a_moe_model_and_ngl_auto_a_dense_one_with_a_known_layer_count(tmp_path):
    assert auto_axis(_plan(tmp_path)).domain == list(range(9))
    with pytest.raises(BenchError, match="not a MoE model"):
        auto_axis(_plan(tmp_path, n_experts=0))
    with pytest.raises(BenchError, match="layer count"):
        auto_axis(_plan(tmp_path, n_layers=None))
    dense = auto_axis(_plan(tmp_path, n_experts=0), "ngl")
    assert dense.domain == list(range(10))                          # ngl 9 (every layer and the output) .. 0
    with pytest.raises(BenchError, match="is a MoE model.*--ncmoe auto"):
        auto_axis(_plan(tmp_path), "ngl")


def test_the_ngl_axis_counts_more_offload_upwards_and_is_its_own_inverse():
    ax = Axis("ngl", 8)
    assert [ax.spec(x) for x in (0, 1, 9)] == [PointSpec(0, 9), PointSpec(0, 8), PointSpec(0, 0)]
    assert all(ax.value(ax.value(x)) == x for x in ax.domain)
    # llama.cpp keeps layers n_layers - ngl .. n_layers - 1 on the device: layer 3 leaves it at ngl 4 (x = 5)
    assert ax.boundaries([3, 7]) == [5, 9] and Axis("ncmoe", 8).boundaries([3, 7]) == [4, 8]


@pytest.mark.parametrize("args,needles", [
    (["--max-points", "5"], ["--max-points", "--ncmoe auto"]),
    (["--ncmoe", "auto", "--ngl", "0:4"], ["--ncmoe auto", "--ngl"]),
    (["--ncmoe", "auto", "--max-points", "many"], ["--max-points", "many"]),
    (["--ncmoe", "auto", "--time-budget", "-3"], ["--time-budget"]),
    (["--stable-after", "2"], ["--stable-after", "--ncmoe auto"]),
    (["--ncmoe", "auto", "--stable-after", "-1"], ["--stable-after", "at least 0"]),
    (["--ngl", "auto", "--ncmoe", "0:4"], ["--ngl auto", "--ncmoe"]),
    (["--ngl", "auto"], ["is a MoE model", "--ncmoe auto"]),           # the file is a MoE model
])
def test_bad_auto_options_are_one_line_with_the_fix(tmp_path, args, needles):
    model = _gguf(tmp_path / "m.gguf")
    _one_line(_cli(tmp_path, "bench", "--model", str(model), *args), *needles)


def test_the_report_lists_measured_and_interpolated_points_but_no_interpolated_number(tmp_path):
    store, run_id = run_fake.build(tmp_path, backends=("cpu",))
    key = "cpu-0c1e570-abcd"
    plan = store.get_run(run_id).plan.to_json()
    plan["adaptive"] = {"fitmap_run": "f", "n_measured": 3, "stopped": "stable",
                        "chosen": [{"series": key, "ncmoe": x, "reason": f"why {x}"} for x in (0, 1, 8)],
                        "interpolated": {key: {str(x): 12345.678 + x for x in range(2, 8)}},
                        "conclusions": {"threshold": {key: 0}, "sweet_spot": {key: 0}, "anomalies": {key: []},
                                        "suspects": {key: [8]}, "regions": []}}
    store.update_run_plan(run_id, plan)
    _, sections = build_report(store, run_id, tmp_path / "out")
    assert sections[1].id == "adaptive"
    concl = sections[1].tables[0].rows
    assert concl == [["CPU", "0", "0", "none (suspects, faster than the trend alone but not after the family control over the sweep: 8)",
                      "0–1, 8", "2–7"]]
    assert [r[2:] for r in sections[1].tables[1].rows] == [["0", "why 0"], ["1", "why 1"], ["8", "why 8"]]
    cells = json.dumps([t.rows for s in sections for t in s.tables])
    assert "12345" not in cells and "12,345" not in cells


class FakeLayerMeasure(FakeMeasure):
    """A dense model's points: tg falls as layers leave the device (ngl down); the server fits the native
    context from ngl 6 down."""

    def __call__(self, items, plan):
        self.calls.append(([(b.key, spec.ngl, e) for b, spec, e in items], plan.launches, plan.sentinel_every))
        out = []
        for b, spec, e in items:
            assert spec.ncmoe == 0 and 0 <= spec.ngl <= 9
            tg = 1000 / (5 + 3 * (9 - spec.ngl))
            samples = [Sample(i, False, tg_tps=tg * (1 + 0.01 * (i % 2)), launch=k)
                       for k in range(1, plan.launches + 1) for i in (1, 2)]
            p = Point(self.run_id, b.key, e, 0, ngl=spec.ngl, samples=samples, n_ctx=4096 if spec.ngl <= 6 else 2048)
            self.store.record_point(p)
            out.append(p)
        return out


def test_ngl_auto_measures_explicit_ngl_points_and_records_everything_as_ngl(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    plan = _plan(tmp_path, n_experts=0)
    run_id = store.new_run("sweep", plan.to_json())
    ax = auto_axis(plan, "ngl")
    ctx = {"cpu-1": {0: 1024, 9: 4096, 5: 4096, 2: 2048, 3: 4096}}      # x → context: native from x = 3 (ngl 6)
    driver = AutoDriver(plan, [FakeBuild("cpu-1", mode=None)], store, ctx, AdaptiveOptions(), "fit-1", ax)
    fake = FakeLayerMeasure(store, run_id)
    driver(fake, run_id)
    rec = store.get_run(run_id).plan
    ad = rec.adaptive.to_json()
    measured = sorted(p.ngl for p in store.points(run_id) if not p.label)
    assert ad["axis"] == "ngl" and sorted(c["ngl"] for c in ad["chosen"]) == measured
    assert {9, 0, 6} <= set(measured)                 # the ends (all layers / none) and the threshold
    assert sorted(p.ngl for p in rec.points) == measured and {p.ncmoe for p in rec.points} == {0}
    assert ad["conclusions"]["threshold"] == {"cpu-1": 6} and ad["conclusions"]["sweet_spot"] == {"cpu-1": 6}
    assert set(map(int, ad["interpolated"]["cpu-1"])) == set(range(10)) - set(measured)
    assert ad["ctx"]["cpu-1"]["6"] == 4096 and ad["ctx"]["cpu-1"]["9"] == 1024       # by ngl
    assert fake.calls[-1][0] == [("cpu-1", 9, "server")]                             # the sentinel: all layers
    md = tmp_path / "report"
    _, sections = build_report(store, run_id, md)
    concl = sections[1].tables[0]
    assert sections[1].id == "adaptive" and "native context up to ngl" in concl.columns
    assert concl.rows[0][1] == "6" and "measured ngl" in concl.columns


def test_the_threshold_search_fits_log2_points_and_stores_them_as_a_fit_map(tmp_path, monkeypatch):
    import llamaforge.bench.autosweep as auto

    store = Store(tmp_path / "s.sqlite")
    plan = _plan(tmp_path, n_layers=40, n_ctx_train=4096)
    fitted: list[tuple[str, int]] = []

    def fake_fit(build, plan, spec, run_id, log_dir, label=""):
        fitted.append((build.key, spec.ncmoe))
        return Point(run_id, build.key, "fit", spec.ncmoe, n_ctx=4096 if spec.ncmoe >= 13 else 2000)

    monkeypatch.setattr(auto, "open_fitmap", lambda plan, builds, store, command=None: store.new_run(
        "fitmap", plan.to_json()))
    monkeypatch.setattr(auto, "fit_point", fake_fit)
    run_id, ctx = auto.fit_threshold(plan, [FakeBuild("a", mode=None), FakeBuild("b", mode=None)], store, auto_axis(plan), progress=False)
    for key in ("a", "b"):
        xs = [x for k, x in fitted if k == key]
        assert len(xs) == len(set(xs)) <= 8 and 13 in xs and 12 in xs         # 2 + log2(40) fits, not 41
        assert ctx[key] == {x: (4096 if x >= 13 else 2000) for x in xs}
    run = store.get_run(run_id)
    assert run.status == "done" and len(store.points(run_id)) == len(fitted)
    assert sorted(p.ncmoe for p in run.plan.points) == sorted({x for _, x in fitted})


def test_the_end_sentinel_goes_to_the_cheapest_measured_point(tmp_path):
    """A sentinel only watches the machine: it goes where a server start costs least (on lavapipe the
    all-CPU end, on a real GPU the all-GPU end); without stored times, to the least offload."""
    from llamaforge.bench.autosweep import sentinel_x

    assert sentinel_x("b", {0: 1, 4: 1, 8: 1}, {("b", 0): 64.0, ("b", 4): 20.0, ("b", 8): 3.5}) == 8
    assert sentinel_x("b", {0: 1, 4: 1, 8: 1}, {("b", 0): 2.0, ("b", 4): 20.0, ("b", 8): 30.0}) == 0
    assert sentinel_x("b", {0: 1, 4: 1}, {("b", 4): None}) == 0
    assert sentinel_x("b", {}, {}) is None

    class Timed(FakeMeasure):
        def __call__(self, items, plan):
            out = super().__call__(items, plan)
            for p in out:     # a server start takes longer the less is offloaded (a slow "GPU")
                p.detail.launches = [LaunchRecord(launch=1, started=100.0, finished=100.0 + 50 - 5 * p.ncmoe)]
            return out

    store = Store(tmp_path / "s.sqlite")
    plan = _plan(tmp_path)
    run_id = store.new_run("sweep", plan.to_json())
    driver = AutoDriver(plan, [FakeBuild("cpu-1", mode=None)], store, {"cpu-1": {x: 4096 for x in range(9)}},
                        AdaptiveOptions(), "fit-1")
    fake = Timed(store, run_id)
    driver(fake, run_id)
    assert driver.result is not None
    assert fake.calls[-1][2] == _END_ONLY and fake.calls[-1][0] == [("cpu-1", max(driver.result.measured["cpu-1"]),
                                                                      "server")]
    store.close()
