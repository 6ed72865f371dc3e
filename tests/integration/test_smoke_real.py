"""Real llama.cpp: smoke runs of real builds, the quirk retry path, quirks applied by bench, and the
plain CPU + lavapipe sweep with default options.

This machine's CPU (AMD EPYC) has no AMX, so the gcc-12 × AMX crash cannot happen here. The retry
path runs real llama.cpp behind a wrapper that crashes the way those builds did (AMX buffer line,
SIGSEGV at load) unless given ``--no-repack`` / ``--repack 0`` — the crash is simulated, the run
with the workaround is real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.bench.plan import Timeouts, make_plan, make_points
from llamaforge.bench.sweep import measure_point
from llamaforge.builds import Build
from llamaforge.builds.verify import apply_to_manifest, verify_build
from llamaforge.files import sha256_file
from llamaforge.llamacpp.options import build_options
from llamaforge.models import model_facts
from llamaforge.store import Store

pytestmark = pytest.mark.slow

_WRAPPER = """#!/bin/sh
# crash like a gcc-12 build on an AMX CPU unless the no-repack workaround is given
for a in "$@"; do
  case "$a" in --help|--version|--list-devices|--no-repack) exec "{real}" "$@";; esac
done
prev=""
for a in "$@"; do
  if [ "$prev" = "--repack" ] && [ "$a" = "0" ]; then exec "{real}" "$@"; fi
  prev="$a"
done
echo "load_tensors:          AMX model buffer size =    12.00 MiB" >&2
kill -SEGV $$
"""


def test_every_build_is_smoke_run_through_server_and_llama_bench(any_build: Build):
    m = any_build.manifest
    assert m["smoke"] == "ok"
    sm = m["verification"]["smoke"]
    if m["quirks"]:
        # a machine where the plain build crashes (an AMX CPU with a gcc-12 build): the first attempt
        # died, the recorded workaround's attempt is the one that must have run
        (q,) = m["quirks"]
        first, a = sm["attempts"]
        assert q["name"] == "no-repack" and q["evidence"]["signal"] and first["quirks"] == []
        assert a["quirks"] == ["no-repack"] and "--no-repack" in a["server"]["command"]
    else:
        # one attempt; a second only after a first that merely timed out (a busy machine, a slow first start)
        *before, a = sm["attempts"]
        assert len(before) <= 1 and all(not b["server"]["ok"] or not b["bench"]["ok"] for b in before), sm
    assert a["server"]["ok"] and a["server"]["tokens"] == 4 and a["server"]["returncode"] is None
    assert a["bench"]["ok"] and a["bench"]["returncode"] == 0
    assert Path(sm["model"]).name.startswith("tiny-qwen35moe")
    if any_build.backend == "vulkan":
        assert "--n-cpu-moe" in a["bench"]["command"]       # the CPU weight path runs too
        assert m["capabilities"]["vulkan_cpu_device"] is True
    key_cpu = m["key_content"].get("cpu")
    assert key_cpu and key_cpu["isa"] and "avx2" in key_cpu["isa"]   # GGML_NATIVE: keyed by this CPU


def _wrapped(build: Build, where: Path) -> Build:
    """``build``'s real binaries behind wrappers that SIGSEGV at load unless --no-repack/--repack 0."""
    bin_dir = where / "out" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("llama-server", "llama-bench", "llama-fit-params"):
        w = bin_dir / name
        w.write_text(_WRAPPER.format(real=build.binary(name)))
        w.chmod(0o755)
    manifest = {k: v for k, v in build.manifest.items() if k not in ("smoke", "quirks", "verification")}
    # what a build of these wrappers would record: their own bytes (verify re-hashes every binary)
    manifest["binaries"] = {name: {"path": f"out/bin/{name}", "size": (bin_dir / name).stat().st_size,
                                   "sha256": sha256_file(bin_dir / name)}
                            for name in ("llama-server", "llama-bench", "llama-fit-params")}
    manifest["key"] = build.key + "-wrapped"
    return Build(manifest["key"], "cpu", build.commit, build.pin, where, manifest)


@pytest.fixture
def crashing_build(cpu_build: Build, tmp_path) -> Build:
    """The real CPU build behind wrappers that SIGSEGV at load unless --no-repack/--repack 0."""
    return _wrapped(cpu_build, tmp_path / "wrapped")


def test_a_load_crash_is_retried_with_no_repack_recorded_and_applied_by_bench(crashing_build, lf_paths, tiny_model,
                                                                              tmp_path):
    v = verify_build(crashing_build, paths=lf_paths)
    assert v.ok, v.problems
    first, second = v.smoke["attempts"]
    assert first["server"]["signal"] == "SIGSEGV" and first["bench"]["signal"] == "SIGSEGV"
    assert second["quirks"] == ["no-repack"] and second["server"]["tokens"] == 4 and second["bench"]["ok"]
    (q,) = v.quirks
    assert q["name"] == "no-repack" and q["evidence"]["signal"] == "SIGSEGV" and q["evidence"]["cause"] == "AMX"
    assert any("AMX model buffer" in ln for ln in q["evidence"]["log_lines"])
    apply_to_manifest(crashing_build.manifest, v)
    assert crashing_build.manifest["smoke"] == "ok" and crashing_build.manifest["quirks"][0]["name"] == "no-repack"

    facts = model_facts(tiny_model)
    store = Store(tmp_path / "results" / "llamaforge.sqlite")
    run_id = store.new_run("sweep", {})
    for quirks in (True, False):
        plan = make_plan(model_ref="synth:tiny-qwen35moe", model_path=tiny_model, model_facts=facts,
                         points=make_points("0", n_layers=facts.n_layers), repeats=1, prompt_tokens=32, n_predict=4,
                         threads=2, quirks=quirks, timeouts=Timeouts(120, 120))
        p = measure_point(crashing_build, tiny_model, plan.points[0], plan, store, run_id, label=f"quirks={quirks}")
        if quirks:
            assert p.status == "ok", (p.failure_detail, p.log_tail)
            assert "--no-repack" in p.command and plan.runtime[crashing_build.key]["quirks"] == ["no-repack"]
            assert p.samples and all(s.tg_tps for s in p.samples)
        else:       # --no-quirks: the crash is back, and the failure names its likely cause
            assert p.status == "failed" and p.failure_class == "crash"
            assert "SIGSEGV" in p.failure_detail and "likely cause: llama.cpp's AMX path" in p.failure_detail
    store.close()


@pytest.mark.full
def test_an_old_release_whose_llama_bench_has_no_repack_runs_with_the_quirk_through_the_server(lf_paths, pin_build,
                                                                                                 tiny_model, tmp_path):
    """lcpp-0.3.33 (llama.cpp 78d2f5246): its llama-server has --no-repack, its llama-bench no --repack.
    On a machine where the repack/AMX path crashes, the build must still verify (the quirk recorded
    for the server), bench measures it through llama-server, and its llama-bench points are refused
    with the fix instead of crashing."""
    old = pin_build("lcpp-0.3.33")
    opts = build_options(old)
    assert "--no-repack" in opts.server and "--repack" not in opts.bench and "--no-repack" in (opts.fit_params or ())
    w = _wrapped(old, tmp_path / "wrapped-old")
    v = verify_build(w, paths=lf_paths)
    assert v.ok, (v.problems, v.smoke)
    first, second = v.smoke["attempts"]
    assert first["server"]["signal"] == "SIGSEGV" and first["bench"]["signal"] == "SIGSEGV"
    assert second["server"]["ok"] and "--no-repack" in second["server"]["command"] and second["bench"]["skipped"]
    (q,) = v.quirks
    assert q["unsupported"] == {"llama-bench": ["--repack", "0"]} and "llama-bench" not in q["args"]
    apply_to_manifest(w.manifest, v)

    facts = model_facts(tiny_model)
    plan = make_plan(model_ref="synth:tiny-qwen35moe", model_path=tiny_model, model_facts=facts,
                     points=make_points("0", n_layers=facts.n_layers), repeats=1, prompt_tokens=32, n_predict=4,
                     threads=2, engine="both", timeouts=Timeouts(120, 120))
    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        run_id = store.new_run("sweep", {})
        srv = measure_point(w, tiny_model, plan.points[0], plan, store, run_id, engine="server")
        assert srv.status == "ok", (srv.failure_detail, srv.log_tail)
        assert "--no-repack" in srv.command and srv.samples
        lb = measure_point(w, tiny_model, plan.points[0], plan, store, run_id, engine="llama-bench")
        assert lb.status == "failed" and lb.failure_class == "error" and not lb.command
        assert "cannot take the no-repack workaround" in lb.failure_detail and "--engine server" in lb.failure_detail


def _cli(*args: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamaforge.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


#: full tier: the defaults on lavapipe; the default tier checks the capability with the test named
@pytest.mark.full(covered_by=["tests/integration/test_bench_real.py::test_the_shared_cpu_and_vulkan_sweep_measured_every_point"])
def test_cpu_and_lavapipe_sweep_with_default_prompt_and_ubatch_has_no_failed_point(lf_paths, cpu_build, vulkan_build,
                                                                                   tiny_model, tmp_path):
    """`inv bench --model synth:tiny-qwen35moe --backends cpu,vulkan --ncmoe 2` with default prompt
    (2,500 tokens; lavapipe's cap of 192) and ubatch — lean here (one point a backend, one start of 1
    request, 16 tokens: what it checks is that nothing fails, not a speed), the defaults that matter kept.
    ``--n-cpu-moe 2``: experts split between the device and the CPU, where a smaller ubatch crashed lavapipe;
    ncmoe 0 on lavapipe is the shared sweep's and the variant matrix's (each lavapipe request of 192 tokens
    costs ~9 s here)."""
    env_results = tmp_path / "results"
    os.environ["LLAMAFORGE_RESULTS"] = str(env_results)
    try:
        r = _cli("bench", "--model", "synth:tiny-qwen35moe", "--backends", "cpu,vulkan", "--ncmoe", "2",
                 "--repeats", "1", "--launches", "1", "--n-predict", "16", cwd=lf_paths.workspace, timeout=1800)
    finally:
        del os.environ["LLAMAFORGE_RESULTS"]
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "CPU Vulkan device (lavapipe)" in out
    with Store(env_results / "llamaforge.sqlite") as store:
        (run,) = store.list_runs()
        pts = store.points(run.id)
        assert len(pts) == 2 and all(p.status == "ok" for p in pts), [(p.build_key, p.failure_detail) for p in pts]
        vk = [p for p in pts if p.build_key == vulkan_build.key]
        cpu = [p for p in pts if p.build_key == cpu_build.key]
        assert not any("-ub" in p.command for p in vk + cpu)   # a smaller ubatch made lavapipe crash
        assert all(p.prompt_tokens and p.prompt_tokens > 2000 for p in cpu)        # the default, untouched
        assert all(p.prompt_tokens and p.prompt_tokens < 2000 for p in vk)
        assert run.plan.runtime[vulkan_build.key]["notes"]
