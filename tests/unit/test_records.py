"""The typed, versioned records of everything stored as JSON (llamaforge.records)."""

from __future__ import annotations

import dataclasses

from llamaforge import records as rec
from llamaforge.models import facts_from_plan, synth_plan
from llamaforge.records import (
    VERSION_KEY,
    Environment,
    MemoryBreakdown,
    ModelFacts,
    RunPlan,
    field_table,
    from_json,
    to_json,
)


def test_a_record_round_trips_and_keeps_keys_it_does_not_know():
    stored = {"model": {"ref": "synth:x", "facts": {"n_layers": 4, "types": {"f16": 2}, "future_fact": 1}}, "engine": "server",
              "ctx": None, "future_section": {"rounds": 3}, "compare": {"A": {"ref": "a"}, "B": {"ref": "b"}, "rounds": 4}}
    plan = from_json(RunPlan, stored)
    assert plan.facts.n_layers == 4 and plan.facts.types == {"f16": 2} and plan.compare.a.ref == "a" and plan.compare.rounds == 4
    assert plan.unknown == {"future_section": {"rounds": 3}} and plan.facts.unknown == {"future_fact": 1}
    out = to_json(plan)
    assert out[VERSION_KEY] == rec.RECORD_VERSION
    assert out["future_section"] == {"rounds": 3} and out["ctx"] is None and out["compare"]["A"] == {"ref": "a"}
    assert from_json(RunPlan, out) == plan


def test_version_0_shapes_are_migrated():
    env = from_json(Environment, {"cpu": {"name": "Old CPU", "memory_bandwidth_gbs": 12.5},
                                  "gpus": [{"name": "g", "memory_bandwidth_gbs": 900.0}]})
    assert env.cpu_bandwidth() == ("Old CPU", 12.5) and env.gpus[0].memory_bandwidth_gbps == 900.0
    assert from_json(Environment, {"cpu": "Plain CPU"}).cpu_model == "Plain CPU"
    plan = from_json(RunPlan, {"model": {"facts": {"bytes_per_token_base": 7}}, "fit": True})
    assert plan.facts.bytes_per_token_ctx0 == 7 and plan.fit.to_json() == {}
    # a current-version record is not migrated again
    assert from_json(Environment, {VERSION_KEY: 1, "cpu": "x"}).unknown == {"cpu": "x"}


def test_model_facts_are_one_record_for_the_writer_and_the_readers():
    f = facts_from_plan(synth_plan("tiny-qwen35moe", "q4_k_m"))
    stored = f.to_json()
    r = ModelFacts.from_json(stored)
    assert r == f and r.unknown == {} and r.ncmoe_range == f.ncmoe_range == (0, 8)
    typed = {x.name for x in dataclasses.fields(ModelFacts)} - {"unknown"}
    assert typed - set(stored) == {"full_attention_interval"}     # every other field is written
    assert r.base_bytes_per_token() == f.bytes_per_token(0) == stored["bytes_per_token_ctx0"]
    assert r.bytes_per_token(100) == f.bytes_per_token(100) and r.kv_cache_bytes(100) == f.kv_cache_bytes(100)


def test_memory_breakdown_of_every_stored_shape():
    runner = {"unit": "MiB", "devices": [{"kind": "device", "name": "Vulkan0", "total": 10, "self": 4, "model": 3}],
              "host": {"kind": "host", "name": "Host", "model": 1}, "other": []}
    a = MemoryBreakdown.of(runner)
    assert a.devices[0].self_ == 4 and a.host.model == 1 and a.to_json() == runner
    b = MemoryBreakdown.of({"CUDA0": {"total": 10, "model": 3}, "Host": {"model": 1}})
    assert [d.name for d in b.devices] == ["CUDA0"] and [o.name for o in b.other] == ["Host"]
    assert MemoryBreakdown.of(None) is None


def test_field_table_covers_every_record_and_stored_key():
    table = field_table()
    assert {"RunPlan", "Environment", "GpuInfo", "ModelFacts", "BuildManifest", "MemoryBreakdown",
            "MemRow", "CompareSection", "BisectSection"} <= set(table)
    assert table["Environment"]["ram_bandwidth_gbps"] == "float | None"
    assert table["MemRow"]["self"] == "float | None"
    assert table["RunPlan"]["compare"] == "CompareSection | None"


def test_envinfo_writes_only_environment_fields():
    from llamaforge.envinfo import collect_env

    env = collect_env()
    known = set(field_table()["Environment"]) - {"unknown"}
    record = from_json(Environment, env)
    assert set(record.unknown) <= {"cuda_driver_api", "nvcc", "vulkan_instance", "vulkan_devices", "vulkan_driver_info"}
    assert {"cpu_model", "ram_bandwidth_gbps"} <= known & set(env)


def test_keep_nulls_returns_a_copy_and_leaves_the_record_alone():
    from llamaforge.records import FitSection

    fit = FitSection()
    kept = fit.keep_nulls("fitt_mib")
    assert "fitt_mib" in kept.to_json() and kept.to_json()["fitt_mib"] is None
    assert "fitt_mib" not in fit.to_json(), "keep_nulls must not change the record it is called on"
