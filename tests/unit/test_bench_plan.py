"""Plan parsing: offload ranges, validation against the model, JSON round trip."""

import pytest

from llamaforge.bench.plan import FitOptions, Plan, PointSpec, make_points, parse_int_list, split_extra
from llamaforge.errors import BenchError
from llamaforge.records import FitSection, RunPlan


@pytest.mark.parametrize("spec, want", [
    ("0:4", [0, 1, 2, 3, 4]),
    ("0:40:10", [0, 10, 20, 30, 40]),
    ("0,2,5-8", [0, 2, 5, 6, 7, 8]),
    ("12", [12]),
    ("3,1,1,2", [1, 2, 3]),
    (" 0:2 , 7 ", [0, 1, 2, 7]),
])
def test_offload_ranges_are_inclusive_sorted_and_deduplicated(spec, want):
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
    return Plan(**base)


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


def test_the_plan_is_stored_as_its_record_and_a_plan_stored_by_the_old_writer_reads_back():
    plan = _plan(fit=FitOptions(vram_budget_gib=24.0, margins_mib=[100, 200]), ctx=4096)
    assert FitOptions is FitSection and plan.fit.target() == "100,200"
    rec = plan.to_record()
    assert isinstance(rec, RunPlan) and rec.fit.fitt_arg == "100,200" and rec.prompt_tokens_target == 2500
    assert rec.facts.n_layers == 8 and rec.ctx == 4096 and rec.timeouts == {"load_s": 600.0, "request_s": 900.0}
    js = rec.to_json()
    assert js["threads"] is None and js["seed"] is None and js["fit"]["fitt_mib"] is None   # keys always written
    assert "compare" not in js and "adaptive" not in js and "sequential" not in js
    # the hand-written to_json this replaced: nulls, no variants key, no version
    old = {"model": {"ref": "m.gguf", "path": "/m.gguf", "facts": {"n_layers": 8}}, "builds": ["k"],
           "backends": ["cpu"], "pins": ["default"], "points": [{"ncmoe": 4, "ngl": -1}], "engine": "server",
           "repeats": 2, "prompt_tokens_target": 256, "n_predict": 16,
           "fit": {"fitt_mib": 512, "vram_budget_gib": None, "margins_mib": None, "fitt_arg": "512", "notice": None},
           "extra_args": [], "threads": None, "timeouts": {"load_s": 60.0, "request_s": 90.0}, "warmup": True,
           "bench_depths": [], "launches": 2, "seed": 7, "sentinel_every": None, "ctx": None, "quirks": True,
           "runtime": {}}
    back = Plan.from_json(old)
    assert (back.build_keys, back.repeats, back.prompt_tokens, back.fit.target(), back.load_timeout_s, back.seed) == \
           (["k"], 2, 256, "512", 60.0, 7)
    assert Plan.from_record(back.to_record()).to_json() == back.to_json()


@pytest.mark.parametrize("kw", [dict(engine="nope"), dict(repeats=0), dict(n_predict=0), dict(prompt_tokens=1),
                                dict(points=[])])
def test_bad_plan_values_are_rejected(kw):
    with pytest.raises(BenchError):
        _plan(**kw)


def test_extra_arguments_are_split_like_a_shell_but_never_run_by_one():
    assert split_extra('-fa on --override-kv "a=str:b c"') == ["-fa", "on", "--override-kv", "a=str:b c"]
    with pytest.raises(BenchError):
        split_extra('-fa "on')
