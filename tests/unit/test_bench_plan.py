"""Plan parsing: offload ranges, validation against the model, JSON round trip."""

from pathlib import Path

import pytest

from llamaforge.bench.plan import (
    FitOptions,
    Plan,
    PointSpec,
    Timeouts,
    check_plan,
    make_plan,
    make_points,
    parse_int_list,
    split_extra,
)
from llamaforge.errors import BenchError
from llamaforge.records import AdaptiveSection, FitSection, RunPlan


@pytest.mark.parametrize("spec, want", [
    ("0:4", [0, 1, 2, 3, 4]),
    ("0:40:10", [0, 10, 20, 30, 40]),
    ("0,2,5-8", [0, 2, 5, 6, 7, 8]),
    ("12", [12]),
    ("3,1,2", [1, 2, 3]),
    (" 0:2 , 7 ", [0, 1, 2, 7]),
])
def test_offload_ranges_are_inclusive_sorted_and_deduplicated(spec, want):   # a value given twice: refused (issue 41)
    assert parse_int_list(spec) == want


@pytest.mark.parametrize("spec", ["", "a", "0:", "4:0", "0:4:0", "0:4:-1", "5-2", "1,,2", "0:1:2:3", "-1"])
def test_malformed_ranges_are_rejected_with_a_fix(spec):
    with pytest.raises(BenchError) as e:
        parse_int_list(spec)
    assert e.value.fix


def test_a_range_beyond_the_models_layers_is_a_clear_error():
    with pytest.raises(BenchError, match="beyond the model's 40 layers"):
        parse_int_list("0:48", upper=40)
    assert parse_int_list("0:40", upper=40)[-1] == 40


def test_points_are_the_cross_product_of_ncmoe_and_ngl():
    pts = make_points("0:2", "10,20", n_layers=8)
    assert [(p.ncmoe, p.ngl) for p in pts] == [(0, 10), (1, 10), (2, 10), (0, 20), (1, 20), (2, 20)]
    assert {p.ngl for p in make_points("0:2", None, n_layers=8)} == {-1}


def _plan(**kw):
    base = dict(model_ref="m.gguf", model_path="/m.gguf", model_facts={"n_layers": 8, "n_ctx_train": 4096},
                points=make_points("0:8:4", n_layers=8))
    base.update(kw)
    return make_plan(**base)


def test_plan_json_has_the_keys_the_report_reads_and_round_trips():
    plan = _plan(fit=FitOptions(fitt_mib=2048), extra_args=["-fa", "on"], threads=2,
                 points=[PointSpec(0), PointSpec(4, extra_args=("-c", "1"))])
    plan.build_keys = ["k1"]
    js = plan.to_json()
    for key in ("model", "builds", "backends", "points", "engine", "repeats", "prompt_tokens_target", "n_predict",
                "fit", "extra_args"):
        assert key in js
    assert js["model"]["facts"]["n_layers"] == 8
    assert js["points"][0] == {"ncmoe": 0, "ngl": -1}
    back = Plan.from_json(js)
    assert back.to_json() == js


def test_the_plan_is_its_stored_record_and_a_plan_stored_by_the_old_writer_reads_back_unchanged():
    plan = _plan(fit=FitOptions(vram_budget_gib=24.0, margins_mib=[100, 200]), ctx=4096)
    assert Plan is RunPlan and FitOptions is FitSection and isinstance(plan.points[0], PointSpec)
    assert plan.fit.target() == "100,200" and plan.prompt_tokens == 2500 and plan.timeouts == Timeouts(600.0, 900.0)
    js = plan.to_json()
    assert js["fit"]["fitt_arg"] == "100,200" and js["prompt_tokens_target"] == 2500 and js["ctx"] == 4096
    assert js["timeouts"] == {"load_s": 600.0, "request_s": 900.0} and js["model"]["facts"]["n_layers"] == 8
    assert js["threads"] is None and js["seed"] is None and js["fit"]["fitt_mib"] is None   # keys always written
    assert "compare" not in js and "adaptive" not in js and "sequential" not in js
    # what the writers before this one stored (the hand-written to_json: nulls, no variants key, no version)
    old = {"model": {"ref": "m.gguf", "path": "/m.gguf", "facts": {"n_layers": 8}}, "builds": ["k"],
           "backends": ["cpu"], "pins": ["default"], "points": [{"ncmoe": 4, "ngl": -1}], "engine": "server",
           "repeats": 2, "prompt_tokens_target": 256, "n_predict": 16,
           "fit": {"fitt_mib": 512, "vram_budget_gib": None, "margins_mib": None, "fitt_arg": "512", "notice": None},
           "extra_args": [], "threads": None, "timeouts": {"load_s": 60.0, "request_s": 90.0}, "warmup": True,
           "bench_depths": [], "launches": 2, "seed": 7, "sentinel_every": None, "ctx": None, "quirks": True,
           "runtime": {}}
    back = Plan.from_json(old)
    assert (back.build_keys, back.repeats, back.prompt_tokens, back.fit.target(), back.timeouts.load_s, back.seed,
            back.points, back.model_path) == (["k"], 2, 256, "512", 60.0, 7, [PointSpec(4)], Path("/m.gguf"))
    assert back.to_json() == {**old, "variants": []}
    assert check_plan(back) is back


def test_a_stored_plan_without_the_newer_keys_means_their_defaults():
    oldest = Plan.from_json({"model": {"ref": "synth:x", "path": "/m.gguf"}, "points": [{"ncmoe": 2}], "fit": True})
    assert (oldest.engine, oldest.repeats, oldest.prompt_tokens, oldest.n_predict, oldest.launches, oldest.warmup,
            oldest.quirks, oldest.timeouts) == ("server", 3, 2500, 128, 1, True, True, Timeouts(600.0, 900.0))
    assert oldest.points == [PointSpec(2, -1)] and check_plan(oldest) is oldest
    assert Plan.from_json({"timeouts": None}).timeouts == Timeouts()     # a section never None: its defaults


def test_a_stored_plan_is_measured_again_without_the_sections_its_run_added_and_is_checked(tmp_path):
    from llamaforge.bench.stored import stored_plan
    from llamaforge.store import Store

    with Store(tmp_path / "s.sqlite") as store:
        run_id = store.new_run("sweep", _plan().replace(reproduces="r0", adaptive=AdaptiveSection(axis="ngl"),
                                                        unknown={"future": 1}))
        run = store.get_run(run_id)
        plan = stored_plan(run)
        assert (plan.reproduces, plan.adaptive, plan.unknown) == (None, None, {})
        assert plan.points == _plan().points and run.plan.adaptive is not None    # a copy: the run's plan is left
        bad = store.get_run(store.new_run("sweep", {**plan.to_json(), "engine": "nope"}))
        with pytest.raises(BenchError, match="unknown engine"):
            stored_plan(bad)
        bad = store.get_run(store.new_run("sweep", {**plan.to_json(), "points": [{"ncmoe": "x"}]}))
        with pytest.raises(BenchError, match="malformed stored plan .*not a number"):
            stored_plan(bad)


@pytest.mark.parametrize("kw", [dict(engine="nope"), dict(repeats=0), dict(n_predict=0), dict(prompt_tokens=1),
                                dict(points=[])])
def test_bad_plan_values_are_rejected(kw):
    with pytest.raises(BenchError):
        _plan(**kw)
    with pytest.raises(BenchError):
        check_plan(_plan().replace(**kw))


def test_extra_arguments_are_split_like_a_shell_but_never_run_by_one():
    assert split_extra('-fa on --override-kv "a=str:b c"') == ["-fa", "on", "--override-kv", "a=str:b c"]
    with pytest.raises(BenchError):
        split_extra('-fa "on')
