"""Variants in the sweep runner (fake llama-server): one labelled series per variant of a shared build, the
variant's environment and arguments reach the server, sentinels and --launches auto work per variant, and a
resume/reproduce binds the stored variants again."""

from __future__ import annotations

from pathlib import Path

from test_bench_sweep import _plan

from fakes import FakeBuild, fake_binaries
from llamaforge.bench.plan import Plan, make_plan
from llamaforge.bench.sweep import run_sweep
from llamaforge.findings.labels import is_sentinel
from llamaforge.variants.build import VariantBuild
from llamaforge.variants.check import from_records
from llamaforge.variants.model import Variant, parse_cli


def _build(tmp_path: Path) -> FakeBuild:
    return FakeBuild("fake-cpu", fake_binaries(tmp_path / "bin-fake", llamabench=False))


def _variant(name: str, env: dict | None = None, args: tuple = ()) -> Variant:
    return Variant(name, "cpu", env=tuple(sorted((env or {}).items())), args=args)


def test_each_variant_is_its_own_series_with_its_own_env_and_args(tmp_path, store):
    b = _build(tmp_path)
    a = VariantBuild(b, _variant("a", args=("-ub", "256")))
    broken = VariantBuild(b, _variant("oom", env={"FAKE_MODE": "oom"}))   # the variant's env reaches the server
    run = run_sweep(_plan("0", repeats=1, launches=2, sentinel_every=1), [a, broken], store, progress=False)
    pts = store.points(run)
    regular = {p.label: p for p in pts if not is_sentinel(p.label)}
    assert set(regular) == {"a", "oom"} and {p.build_key for p in pts} == {"fake-cpu"}
    assert regular["a"].status == "ok" and regular["oom"].status == "failed" and regular["oom"].failure_class == "oom"
    cmd = regular["a"].command
    assert cmd[cmd.index("-ub") + 1] == "256" and "-ub" not in regular["oom"].command
    assert regular["a"].detail.observed is not None
    sentinels = {p.label for p in pts if is_sentinel(p.label)}          # one sentinel series per variant
    assert "sentinel@a" in sentinels and sentinels <= {"sentinel@a", "sentinel@oom"}
    plan = store.get_run(run).plan
    assert plan.build_keys == ["fake-cpu"] and [v["name"] for v in plan.variants] == ["a", "oom"]
    assert plan.variants[0]["build"] == "fake-cpu" and plan.variants[1]["env"] == {"FAKE_MODE": "oom"}


def test_launches_auto_extends_and_records_each_variant(tmp_path, store):
    b = _build(tmp_path)
    vs = [VariantBuild(b, _variant("a")), VariantBuild(b, _variant("b", args=("-ub", "128")))]
    plan = _plan("0", repeats=1, launches=3, sentinel_every=0,
                 sequential={"max_launches": 4, "precision": 0.5, "min_effect": 0.05})
    run = run_sweep(plan, vs, store, progress=False)
    by = {p.label: p for p in store.points(run)}
    assert set(by) == {"a", "b"}
    assert all((by[n].detail.sequential or {}).get("k") in (3, 4) for n in by)


def test_stored_variants_bind_again_to_the_runs_builds(tmp_path, store):
    b = _build(tmp_path)
    run = run_sweep(_plan("0", repeats=1), [VariantBuild(b, parse_cli("x=cpu:-ub 64"))], store, progress=False)
    again = from_records(store.get_run(run).plan.variants, [b])
    assert again[0].variant == parse_cli("x=cpu:-ub 64") and again[0].key == "fake-cpu"
    stored = Plan.from_json(store.get_run(run).plan)
    assert stored.variants == store.get_run(run).plan.variants
    resumed = run_sweep(stored, again, store, resume_run=run, progress=False)
    assert resumed == run and [p.label for p in store.points(run)] == ["x"]   # nothing measured twice


def test_the_adaptive_sweep_runs_one_series_per_variant(tmp_path):
    """--ncmoe auto with variants: series ``KEY#NAME``, each variant's points labelled with its name."""
    from test_bench_autosweep import FACTS

    from llamaforge.bench.adaptive import AdaptiveOptions
    from llamaforge.bench.autosweep import AutoDriver
    from llamaforge.bench.plan import PointSpec
    from llamaforge.store import Point, Sample, Store
    from llamaforge.variants.build import series_label

    store = Store(tmp_path / "s.sqlite")
    plan = make_plan(model_ref="m.gguf", model_path=tmp_path / "m.gguf", model_facts=FACTS, points=[PointSpec(0)], launches=2)
    run_id = store.new_run("sweep", plan.to_json())
    b = FakeBuild("cpu-1", tmp_path)
    vs = [VariantBuild(b, _variant("a")), VariantBuild(b, _variant("b", args=("-fa", "on")))]

    def measure(items, pl):
        out = []
        for vb, spec, e in items:
            tg = (2000 if vb.name == "b" else 1000) / (5 + spec.ncmoe)
            samples = [Sample(i, False, tg_tps=tg * (1 + 0.01 * (i % 2)), launch=k)
                       for k in range(1, pl.launches + 1) for i in (1, 2)]
            p = Point(run_id, vb.key, e, spec.ncmoe, label=series_label(vb), samples=samples)
            store.record_point(p)
            out.append(p)
        return out

    ctx = {f"cpu-1#{n}": {x: 4096 for x in range(9)} for n in ("a", "b")}
    driver = AutoDriver(plan, vs, store, ctx, AdaptiveOptions(max_points=6), "fit-1")
    driver(measure, run_id)
    assert driver.result is not None and set(driver.result.measured) == {"cpu-1#a", "cpu-1#b"}
    assert {p.label for p in store.points(run_id)} == {"a", "b"}
    assert set(store.get_run(run_id).plan.adaptive.ctx) == {"cpu-1#a", "cpu-1#b"}


def test_compare_takes_two_variants_of_one_build(tmp_path, monkeypatch):
    """compare --base-variant/--head-variant: both sides share the build; each side measures with its own knobs."""
    import random

    from llamaforge.bench.plan import PointSpec
    from llamaforge.compare import session as cmp
    from llamaforge.compare.session import CompareRequest, Side
    from llamaforge.paths import Paths
    from llamaforge.store import Point, Sample, Store

    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr("llamaforge.bench.plan.resolve_model", lambda ref, paths: tmp_path / "m.gguf")
    b = _build(tmp_path)
    off, on = VariantBuild(b, parse_cli("fa-off=cpu:-fa off")), VariantBuild(b, parse_cli("fa-on=cpu:-fa on"))
    seen: list[tuple[str, list[str]]] = []
    rng = random.Random(3)

    def measure_point(build, model_path, spec, plan, store, run_id, label=""):  # noqa: ANN001
        seen.append((label, build.args_for("llama-server")))
        tg = 130.0 if build.name == "fa-on" else 100.0
        p = Point(run_id=run_id, build_key=build.key, engine="server", ncmoe=spec.ncmoe, label=label,
                  samples=[Sample(i, False, pp_tps=10 * tg, tg_tps=tg * (1 + rng.uniform(-0.01, 0.01))) for i in (1, 2)])
        store.record_point(p)
        return p

    monkeypatch.setattr("llamaforge.bench.sweep.measure_point", measure_point)
    req = CompareRequest(Side("A", "default", "cpu"), Side("B", "default", "cpu"), "synth:x", [PointSpec(0)],
                         repeats=2, rounds=3)
    paths = Paths(tmp_path)
    with Store(paths.store_db) as store:
        run = store.get_run(cmp.run_compare(paths, store, req, builds=(off, on), progress=False))
    assert run.plan.compare.a.variant["name"] == "fa-off" and run.plan.compare.b.build == b.key
    assert {lab.split(".")[0]: args[:2] for lab, args in seen} == {"A": ["-fa", "off"], "B": ["-fa", "on"]}
    tg = {r["metric"]: r for r in run.summary.comparisons}["tg"]
    assert tg["comparison"]["verdict"] in ("better", "differs") and tg["comparison"]["ratio"] > 1.25
