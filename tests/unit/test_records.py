"""The typed, versioned records of everything stored as JSON (llamaforge.records)."""

from __future__ import annotations

import dataclasses

from llamaforge import records as rec
from llamaforge.models.gguf_info import ModelFacts
from llamaforge.records import (
    VERSION_KEY,
    Environment,
    MemoryBreakdown,
    ModelFactsRecord,
    RunPlan,
    field_table,
    from_json,
    to_json,
)


def test_a_record_round_trips_and_keeps_keys_it_does_not_know():
    stored = {"model": {"ref": "synth:x", "facts": {"n_layers": 4, "types": {"f16": 2}}}, "engine": "server",
              "ctx": None, "future_section": {"rounds": 3}, "compare": {"A": {"ref": "a"}, "B": {"ref": "b"}, "rounds": 4}}
    plan = from_json(RunPlan, stored)
    assert plan.facts.n_layers == 4 and plan.compare.a.ref == "a" and plan.compare.rounds == 4
    assert plan.extra == {"future_section": {"rounds": 3}} and plan.facts.extra == {"types": {"f16": 2}}
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
    assert from_json(Environment, {VERSION_KEY: 1, "cpu": "x"}).extra == {"cpu": "x"}


def test_model_facts_record_reads_what_model_facts_write():
    f = ModelFacts(path="m.gguf", arch="a", name="n", n_layers=2, full_attention_layers=[1], linear_attention_layers=[0], n_experts=0,
                   n_experts_used=0, has_shared_expert=False, vocab_size=10, n_ctx_train=64, n_embd=8, n_head=1,
                   n_head_kv=1, head_dim=8, file_bytes=1000, tensor_count=3, params_total=500, params_active=500,
                   bytes_by_group={}, types={}, bytes_by_type={"f16": 1000}, weight_bytes_per_token=900,
                   kv_bytes_per_token_ctx=32, recurrent_state_bytes=10, ncmoe_range=(0, 0))
    r = ModelFactsRecord.from_json(f.to_dict())
    typed = {x.name for x in dataclasses.fields(ModelFactsRecord)} - {"extra"}
    assert typed - set(f.to_dict()) == {"full_attention_interval"}     # every other typed field is written
    assert r.base_bytes_per_token() == f.bytes_per_token(0)
    assert r.bytes_per_token(100) == f.bytes_per_token(100)


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
    assert {"RunPlan", "Environment", "GpuInfo", "ModelFactsRecord", "BuildManifest", "MemoryBreakdown",
            "MemRow", "CompareSection", "BisectSection"} <= set(table)
    assert table["Environment"]["ram_bandwidth_gbps"] == "float | None"
    assert table["MemRow"]["self"] == "float | None"
    assert table["RunPlan"]["compare"] == "CompareSection | None"


def test_envinfo_writes_only_environment_fields():
    from llamaforge.envinfo import collect_env

    env = collect_env()
    known = set(field_table()["Environment"]) - {"extra"}
    record = from_json(Environment, env)
    assert set(record.extra) <= {"cuda_driver_api", "nvcc", "vulkan_instance", "vulkan_devices", "vulkan_driver_info"}
    assert {"cpu_model", "ram_bandwidth_gbps"} <= known & set(env)


def test_keep_nulls_returns_a_copy_and_leaves_the_record_alone():
    from llamaforge.records import FitSection

    fit = FitSection()
    kept = fit.keep_nulls("fitt_mib")
    assert "fitt_mib" in kept.to_json() and kept.to_json()["fitt_mib"] is None
    assert "fitt_mib" not in fit.to_json(), "keep_nulls must not change the record it is called on"
