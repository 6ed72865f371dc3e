"""Version-aware arguments against real llama.cpp binaries.

The default pin's binaries have every option, so an *older* binary is emulated by removing
``--n-cpu-moe`` from the options its manifest lists: the command line then carries llama.cpp's
``-ot`` form of ``-ncmoe``, which the real llama-bench and llama-server must accept and which must
place exactly the same tensors (same device memory for the model) as ``-ncmoe`` itself."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llamaforge.bench.plan import Plan, PointSpec, Timeouts, make_plan, read_facts
from llamaforge.bench.sweep import measure_point
from llamaforge.llamacpp.options import build_options, ncmoe_overrides, probe_build

pytestmark = pytest.mark.slow


def _without_ncmoe(build):  # noqa: ANN001, ANN202
    opts = {tool: ([o for o in flags if o not in ("-ncmoe", "--n-cpu-moe")] if flags is not None else None)
            for tool, flags in build_options(build).to_dict().items()}
    return dataclasses.replace(build, manifest={**build.manifest, "options": opts})


def _plan(model: Path, **kw) -> Plan:
    # 128 prompt tokens: with experts on the CPU, the Vulkan build dies inside Mesa 22.3's lavapipe on some
    # short prompts (32 and 64 tokens at --n-cpu-moe 2: SIGSEGV in libvulkan_lvp.so; see STATUS.md)
    base = dict(model_ref=str(model), model_path=model, model_facts=read_facts(model), points=[PointSpec(2)],
                repeats=1, prompt_tokens=128, n_predict=4, threads=2, warmup=False, timeouts=Timeouts(300, 300))
    return make_plan(**{**base, **kw})


def test_real_binaries_list_the_options_we_build_command_lines_from(cpu_build):
    opts = build_options(cpu_build)
    assert cpu_build.manifest.get("options"), "options are recorded in the manifest"
    assert opts.server_ncmoe and opts.server_fit and opts.bench_ncmoe and opts.has_fit_params
    assert {"-ot", "--override-tensor", "-c", "--ctx-size", "-m", "--model"} <= opts.server
    assert {"-ot", "--override-tensor", "-p", "-n", "-r", "-o"} <= opts.bench
    assert probe_build(cpu_build) == cpu_build.manifest["options"]   # stable: probing again gives the same


def test_llama_bench_without_ncmoe_takes_the_ot_form(cpu_build, tiny_model, store):
    old = _without_ncmoe(cpu_build)
    run = store.new_run("sweep", {})
    p = measure_point(old, tiny_model, PointSpec(2), _plan(tiny_model, engine="llama-bench"), store, run)
    assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
    assert "--n-cpu-moe" not in p.command
    assert p.command[p.command.index("--override-tensor") + 1] == ";".join(ncmoe_overrides(2))
    lb = p.detail.llama_bench[0]
    assert "blk\\.1\\.ffn_" in str(lb.get("tensor_buft_overrides")), lb.get("tensor_buft_overrides")
    assert p.measured("tg_tps", "tg4") and p.measured("pp_tps", "pp128")


#: full tier: the -ot form on lavapipe; the default tier checks the capability with the test named
@pytest.mark.full(covered_by=["tests/integration/test_options_real.py::test_llama_bench_without_ncmoe_takes_the_ot_form"])
def test_ot_form_places_exactly_what_ncmoe_places(vulkan_build, tiny_model, store):
    """On the Vulkan device (lavapipe) the model weights left on the device must be the same with
    ``--n-cpu-moe 2`` and with its ``-ot`` form, and less than with no experts on the CPU."""
    run = store.new_run("sweep", {})
    plan = _plan(tiny_model)
    got = {}
    for label, b, n in (("ncmoe", vulkan_build, 2), ("ot", _without_ncmoe(vulkan_build), 2), ("none", vulkan_build, 0)):
        p = measure_point(b, tiny_model, PointSpec(n), plan, store, run, label=label)
        assert p.status == "ok", (label, p.failure_class, p.failure_detail, p.log_tail)
        assert ("--override-tensor" in p.command) == (label == "ot")
        devs = (p.mem_breakdown or {}).get("devices") or []
        assert devs, f"{label}: no memory breakdown in the log"
        got[label] = (sum(d.get("model", 0) for d in devs), ((p.mem_breakdown or {}).get("host") or {}).get("model"))
    assert got["ot"] == got["ncmoe"], got
    assert got["none"][0] > got["ncmoe"][0], got
