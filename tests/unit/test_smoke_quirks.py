"""Smoke runs, runtime quirks, CPU-keyed native builds, CPU-Vulkan defaults — against fake binaries.

The fake llama-server / llama-bench (``bench_fake_server.py``, ``bench_fake_llamabench.py``) with
``FAKE_MODE=amx-crash`` print AMX / CPU_REPACK buffer lines and die of SIGSEGV unless run with
``--no-repack`` / ``--repack 0`` — the crash of gcc-12 builds on AMX CPUs, which this (AMD) machine
cannot reproduce with real llama.cpp. The real-binary side is in tests/integration/test_smoke_real.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from fakes import FakeBuild, fake_binaries
from llamaforge.backends import FlagOptions
from llamaforge.backends import get as get_backend
from llamaforge.backends.base import NO_AMX_FLAGS
from llamaforge.bench import adjust
from llamaforge.bench.plan import Plan, make_plan, make_points
from llamaforge.builds import hostcpu
from llamaforge.builds.builder import find_build, make_key
from llamaforge.builds.doctor import amx_gcc_warning, parse_gcc_major
from llamaforge.builds.manifest import MANIFEST, MANIFEST_VERSION
from llamaforge.builds.smoke import log_dir_for, run_smoke
from llamaforge.builds.verify import Verification, apply_to_manifest, ensure_runnable, raise_for
from llamaforge.errors import BenchError, BuildError
from llamaforge.llamacpp.quirks import describe_failure, likely_cause, quirk_args, signal_name

AMX_LOG = ("load_tensors:          AMX model buffer size =    12.00 MiB\n"
           "load_tensors:   CPU_REPACK model buffer size =    40.00 MiB\n"
           "llama_context: n_ctx = 512")


@pytest.fixture
def fake(tmp_path):
    def make(mode: str, key: str = "fake-cpu") -> FakeBuild:
        return FakeBuild(key, fake_binaries(tmp_path / key, model=True), mode)
    return make


# ------------------------------------------------------------------------------------- smoke

def test_a_healthy_build_passes_the_smoke_run_without_quirks(fake):
    b = fake("ok")
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    assert res.ok and res.quirks == [] and len(res.attempts) == 1
    a = res.attempts[0]
    assert a.server.ok and a.server.tokens == 4 and a.bench.ok
    assert "--no-repack" not in a.server.command and "--repack" not in a.bench.command
    assert (b.dir / "smoke" / "server-plain.log").is_file()


def test_a_crash_that_no_repack_avoids_is_recorded_as_a_quirk_with_evidence(fake):
    b = fake("amx-crash")
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    assert res.ok, res.to_dict()
    first, second = res.attempts
    assert not first.server.ok and first.server.signal == "SIGSEGV" and first.bench.signal == "SIGSEGV"
    assert second.quirks == ["no-repack"] and second.ok
    assert "--no-repack" in second.server.command and second.bench.command[-2:] == ["--repack", "0"]
    (q,) = res.quirks
    assert q.name == "no-repack" and q.args["llama-server"] == ["--no-repack"]
    assert q.evidence["signal"] == "SIGSEGV" and q.evidence["cause"] == "AMX"
    assert any("AMX model buffer" in ln for ln in q.evidence["log_lines"])
    assert set(q.evidence["failed"]) == {"llama-server", "llama-bench"}


def test_a_quirk_that_does_not_help_is_reported_and_not_recorded(fake):
    b = fake("crash-always")
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    assert res.status == "failed" and res.quirks == []
    assert len(res.attempts) == 2
    assert any(n.startswith("quirk no-repack did not help") for n in res.notes)
    assert "SIGSEGV" in res.error and "AMX" in res.error
    assert "AMX model buffer" in res.log_tail


def test_no_quirk_retry_without_a_crash_or_when_disabled(fake):
    b = fake("hang")       # healthy server whose /completion never answers: not a crash
    from llamaforge.builds import smoke

    old = smoke.SERVER_TIMEOUT_S
    smoke.SERVER_TIMEOUT_S = 3
    try:
        res = run_smoke(b, b.dir / "m.gguf", b.env)
    finally:
        smoke.SERVER_TIMEOUT_S = old
    # a run that only times out is not a crash: no workaround is tried, and the build is not marked
    # broken (lavapipe on a busy machine compiles its pipelines slowly); it is tried once more as it was
    assert res.status == "timeout" and len(res.attempts) == 2
    assert all(a.quirks == [] for a in res.attempts)
    assert "did not answer" in res.error and res.attempts[0].server.returncode is None
    v = Verification(True)
    from llamaforge.builds.verify import _smoke_into

    smoke.SERVER_TIMEOUT_S = 3
    try:
        _smoke_into(v, b, b.dir / "m.gguf", b.env, None, True)
    finally:
        smoke.SERVER_TIMEOUT_S = old
    assert v.ok and v.smoke["status"] == "timeout"
    c = fake("amx-crash", key="fake-2")
    res = run_smoke(c, c.dir / "m.gguf", c.env, quirks=False)
    assert res.status == "failed" and len(res.attempts) == 1 and res.quirks == []


def test_a_smoke_run_that_timed_out_once_is_tried_again_and_recorded(fake, tmp_path):
    """A first start that only timed out (lavapipe compiling its pipelines on a busy machine) is not a
    verdict on the binary: the second attempt decides, and both are recorded."""
    from llamaforge.builds import smoke

    b = fake("hang-once")
    old = smoke.SERVER_TIMEOUT_S
    smoke.SERVER_TIMEOUT_S = 3
    try:
        res = run_smoke(b, b.dir / "m.gguf", {**b.env, "FAKE_STATE": str(tmp_path / "hung")})
    finally:
        smoke.SERVER_TIMEOUT_S = old
    assert res.status == "ok" and len(res.attempts) == 2 and res.quirks == []
    assert not res.attempts[0].ok and res.attempts[1].ok
    assert any("timed out" in n and "the second ran" in n for n in res.notes)


def test_failed_smoke_run_marks_the_manifest_and_raises_a_build_error_with_the_fix(fake):
    b = fake("crash-always")
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    v = Verification(True)
    from llamaforge.builds.verify import _smoke_into

    _smoke_into(v, b, b.dir / "m.gguf", b.env, None, True)
    assert not v.ok and v.problems[0].startswith("builds but does not run")
    m: dict = {}
    apply_to_manifest(m, v)
    assert m["smoke"] == "failed" and m["quirks"] == [] and m["verification"]["smoke"]["log_tail"]
    with pytest.raises(BuildError) as ei:
        raise_for(m["verification"], b)
    assert "builds but does not run" in ei.value.message and "--allow-broken" in ei.value.fix
    assert res.status == "failed"


def test_bench_refuses_a_broken_build_unless_allowed(fake):
    b = fake("ok")
    b.manifest = {"smoke": "failed", "verification": {"smoke": {"error": "llama-server exited with status -11"}}}
    with pytest.raises(BenchError) as ei:
        ensure_runnable(b)
    assert "builds but does not run" in ei.value.message and "--allow-broken" in ei.value.fix
    assert ensure_runnable(b, allow_broken=True) is b
    b.manifest = {"smoke": "ok"}
    assert ensure_runnable(b) is b


def test_a_build_never_smoke_run_is_smoke_run_before_bench(fake, monkeypatch):
    b = fake("ok")
    calls = []

    def reverify(build, paths=None, model=None):
        calls.append(build.key)
        build.manifest = {**build.manifest, "smoke": "failed", "verification": {"smoke": {"error": "boom"}}}
        return build

    monkeypatch.setattr("llamaforge.builds.verify.reverify", reverify)
    with pytest.raises(BenchError, match="boom"):
        ensure_runnable(b)
    assert calls == [b.key]
    ext = fake("ok", key="ext")
    ext.manifest = {"external": True}
    assert ensure_runnable(ext) is ext and calls == [b.key]      # --bin-dir builds are not ours to smoke


# ----------------------------------------------------------------------------------- quirks

def test_likely_cause_names_amx_oom_fit_refused_and_nothing_for_healthy_logs():
    assert likely_cause(AMX_LOG, -11)[0] == "AMX"
    assert likely_cause("load_tensors: CPU_REPACK model buffer size = 40 MiB", -11)[0] == "CPU_REPACK"
    assert likely_cause(AMX_LOG, 0) is None                  # healthy logs show these buffers too
    assert likely_cause(AMX_LOG, None) is None
    oom = "ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed: out of memory"
    assert likely_cause(oom, 1)[0] == "out of memory"
    refused = ("common_fit_params: failed to fit params to free device memory: "
               "model_params::tensor_buft_overrides already set by user, abort")
    assert likely_cause(refused, None)[0] == "fit refused"
    assert likely_cause("ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits)", -11)[0] == "lavapipe"
    assert signal_name(-11) == "SIGSEGV" and signal_name(139) == "SIGSEGV" and signal_name(1) is None
    d = describe_failure("llama-server exited with status -11 while loading", AMX_LOG)
    assert "(SIGSEGV)" in d and "likely cause: llama.cpp's AMX path" in d


def test_recorded_quirks_reach_server_bench_and_fit_params_and_no_quirks_disables_them(fake):
    from llamaforge.bench.engines.server import server_args

    b = fake("ok")
    b.manifest = {"quirks": [{"name": "no-repack", "summary": "s", "evidence": {"signal": "SIGSEGV", "cause": "AMX"},
                              "args": {"llama-server": ["--no-repack"], "llama-bench": ["--repack", "0"],
                                       "llama-fit-params": ["--no-repack"]}}]}
    assert quirk_args(b.manifest, "llama-bench") == ["--repack", "0"]
    plan = make_plan(model_ref="m", model_path=b.dir / "m.gguf", model_facts={"n_layers": 4},
                     points=make_points("0:1", n_layers=4), prompt_tokens=64, n_predict=4)
    args = server_args(b, plan.model_path, plan.points[0], plan)
    assert "--no-repack" in args
    assert plan.runtime[b.key]["quirks"] == ["no-repack"]
    assert "SIGSEGV" in plan.runtime[b.key]["notes"][0]
    assert adjust.extra_args(b, plan, "llama-fit-params") == ["--no-repack"]
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))     # resumed runs keep their record
    assert again.runtime == plan.runtime and again.quirks
    off = make_plan(model_ref="m", model_path=b.dir / "m.gguf", model_facts={"n_layers": 4},
                    points=make_points("0", n_layers=4), quirks=False)
    assert "--no-repack" not in server_args(b, off.model_path, off.points[0], off)


def test_cpu_vulkan_devices_get_a_capped_prompt_and_no_ubatch_change():
    b = FakeBuild("vk", Path("/nonexistent"), backend="vulkan",
                  manifest={"verification": {"devices": [{"name": "llvmpipe (LLVM 15.0.6, 256 bits)"}]}})
    plan = make_plan(model_ref="m", model_path=Path("m"), model_facts={}, points=make_points("0"), prompt_tokens=2500)
    rt = adjust.compute(b, plan)
    assert rt.args == {} and rt.notes
    assert adjust.prompt_tokens(b, plan) == adjust.CPU_VULKAN_PROMPT_TOKENS < 2500
    short = make_plan(model_ref="m", model_path=Path("m"), model_facts={}, points=make_points("0"), prompt_tokens=100)
    rt = adjust.compute(b, short)
    assert rt.args == {} and rt.prompt_tokens is None
    gpu = FakeBuild("vk2", Path("/nonexistent"), backend="vulkan",
                    manifest={"capabilities": {"vulkan_cpu_device": False},
                              "verification": {"devices": [{"name": "NVIDIA H200"}]}})
    assert adjust.compute(gpu, plan).args == {}
    plan.quirks = False
    assert adjust.compute(b, plan).args == {}


def test_report_provenance_lists_the_applied_quirks():
    from types import SimpleNamespace

    from llamaforge.records import RunPlan
    from llamaforge.report.provenance import runtime_table

    series = [SimpleNamespace(name="cpu 0c1e570", key=("k-cpu",)), SimpleNamespace(name="vulkan", key=("k-vk",))]
    data = SimpleNamespace(series=series, plan=RunPlan.from_json({"runtime": {
        "k-cpu": {"quirks": ["no-repack"], "args": {"llama-server": ["--no-repack"]}, "notes": ["quirk no-repack: x"]},
        "k-vk": {"quirks": [], "args": {}, "notes": []}}}))
    t = runtime_table(data)
    assert len(t.rows) == 1 and t.rows[0][:3] == ["cpu 0c1e570", "no-repack", "llama-server: --no-repack"]
    assert runtime_table(SimpleNamespace(series=series, plan=RunPlan())) is None


# ----------------------------------------------------------------------------- native CPU key

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi1 bmi2 avx512f avx512bw amx_tile amx_int8 amx_bf16 hypervisor constant_tsc

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_cpuinfo_keeps_isa_flags_only_and_reads_arm_features():
    cpu = hostcpu.parse_cpuinfo(X86, "x86_64")
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert "amx_int8" in cpu["isa"] and "avx512f" in cpu["isa"] and "sse4_2" in cpu["isa"]
    assert "hypervisor" not in cpu["isa"] and "constant_tsc" not in cpu["isa"] and "fpu" not in cpu["isa"]
    assert hostcpu.has_amx(cpu)
    arm = hostcpu.parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n",
                                "aarch64")
    assert arm["isa"] == ["asimd", "fp", "sve"] and "0x41" in arm["model"]


def test_native_build_keys_include_the_cpu_and_foreign_builds_are_never_handed_out(tmp_path, monkeypatch):
    here = hostcpu.native_cpu()
    other = {**hostcpu.parse_cpuinfo(X86, "x86_64")}
    other["id"] = hostcpu.cpu_id(other)
    assert other["id"] != here["id"]
    flags = {"GGML_NATIVE": "ON"}
    k_here, content = make_key("0c1e57098abc", "cpu", flags, {"cc": "gcc 12"}, here)
    k_other, _ = make_key("0c1e57098abc", "cpu", flags, {"cc": "gcc 12"}, other)
    assert k_here != k_other and content["cpu"]["isa"] == here["isa"]
    assert make_key("0c1e57098abc", "cpu", {"GGML_NATIVE": "OFF"}, {})[0] != k_here
    assert hostcpu.runs_here({"key_content": content}) == (True, None)
    ok, why = hostcpu.runs_here({"key_content": {"flags": flags, "cpu": other}})
    assert not ok and "Xeon" in why
    missing = sorted(set(other["isa"]) - set(here["isa"]))    # what this machine lacks (AMX on most; none on an AMX host)
    assert (f"this CPU lacks {missing[0]}" in why) if missing else ("lacks" not in why), why
    assert not hostcpu.runs_here({"key_content": {"flags": flags}})[0]          # native, CPU unknown
    assert hostcpu.runs_here({"key_content": {"flags": {"GGML_NATIVE": "OFF"}}})[0]

    # a shared build root holding only a build for another CPU: find_build refuses it, with the fix
    monkeypatch.setenv("LLAMAFORGE_BUILD_ROOT", str(tmp_path / "builds"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pins.toml").write_text('default = "d"\n[pins.d]\ncommit = "0c1e57098abc"\nsources = ["git"]\n')
    d = tmp_path / "builds" / k_other
    d.mkdir(parents=True)
    (d / MANIFEST).write_text(json.dumps({"manifest_version": MANIFEST_VERSION, "status": "ok", "key": k_other,
                                          "backend": "cpu", "commit": "0c1e57098abc", "pin": "d", "binaries": {},
                                          "key_content": {"flags": flags, "cpu": other}}))
    from llamaforge.paths import Paths

    with pytest.raises(BuildError) as ei:
        find_build(Paths(ws), None, "cpu")
    assert "another CPU" in ei.value.message and "llamaforge build" in ei.value.fix


# ------------------------------------------------------------------------------ AMX × gcc-12

def test_doctor_warns_about_amx_cpus_with_gcc_before_13():
    out12 = "cc (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
    assert parse_gcc_major(out12) == 12
    assert parse_gcc_major("Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n") is None
    amx = hostcpu.parse_cpuinfo(X86, "x86_64")
    problem, fix = amx_gcc_warning(amx, 12)
    assert "gcc 12" in problem and "--no-amx" in fix
    assert amx_gcc_warning(amx, 13) is None
    assert amx_gcc_warning({**amx, "isa": ["avx2"]}, 12) is None


def test_no_amx_build_flags_really_turn_amx_off_in_gcc():
    from llamaforge.backends.toolchain import discover

    tc = discover(backends=("cpu",))
    flags = get_backend("cpu").cmake_flags(tc, FlagOptions(no_amx=True))
    assert {k: flags[k] for k in NO_AMX_FLAGS} == NO_AMX_FLAGS
    assert "CMAKE_C_FLAGS" not in get_backend("cpu").cmake_flags(tc, FlagOptions())
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("no gcc")

    def macros(*extra: str) -> str:
        return subprocess.run([gcc, "-march=sapphirerapids", *extra, "-dM", "-E", "-x", "c", "-"], input="",
                              capture_output=True, text=True, check=True).stdout

    assert "__AMX_INT8__" in macros()                       # what -march=native gives on an AMX CPU
    off = macros(*NO_AMX_FLAGS["CMAKE_C_FLAGS"].split())
    assert "__AMX_INT8__" not in off and "__AMX_TILE__" not in off and "__AVX512F__" in off


def test_a_fault_in_the_smoke_machinery_skips_the_run_instead_of_breaking_the_build(fake, monkeypatch):
    from llamaforge.builds.verify import _smoke_into

    def boom(*a, **k):
        raise OSError("no such file")

    monkeypatch.setattr("llamaforge.builds.smoke.run_smoke", boom)
    b = fake("ok")
    v = Verification(True)
    _smoke_into(v, b, b.dir / "m.gguf", b.env, None, True)
    assert v.ok and v.smoke["status"] == "skipped" and "OSError" in v.smoke["error"]


def test_a_cached_build_whose_smoke_run_timed_out_is_smoke_run_again(monkeypatch, tmp_path):
    """A timeout is not a verdict: reusing the cached build smoke-runs it again (a build that never was is
    smoke-run too); an ok or failed verdict is kept as it is."""
    from llamaforge.builds import builder, verify
    from llamaforge.builds.builder import BuildOptions

    calls = []

    def reverify(b, paths):
        calls.append(b.manifest.get("smoke"))
        return b

    monkeypatch.setattr(verify, "reverify", reverify)
    for smoke_status, again in ((None, True), ("timeout", True), ("ok", False)):
        calls.clear()
        m = {} if smoke_status is None else {"smoke": smoke_status}
        b = FakeBuild("k", tmp_path, manifest=m)
        builder._checked(b, BuildOptions(), None)
        assert bool(calls) is again, smoke_status


@pytest.mark.parametrize("key", ["ext-cpu-1a2b3c", "../../etc", "a/b\x1b[2J", ".."])
def test_an_external_builds_smoke_logs_go_to_one_folder_in_the_cache_it_reuses(key, tmp_path, monkeypatch):
    """An external build (``--bin-dir``) is not our folder: its smoke logs go to ``<cache>/smoke-logs/<key>``,
    the same folder on every run (they used to go to a new temporary folder each time, never removed), and a
    key that looks like a path cannot lead anywhere else."""
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    ext = SimpleNamespace(dir=str(tmp_path / "theirs"), key=key, manifest={"external": True})
    first, again = log_dir_for(ext), log_dir_for(ext)
    assert first == again and first.is_dir()
    assert first.parent == tmp_path / "cache" / "smoke-logs"
    assert not (tmp_path / "theirs").exists()
