"""Real llama.cpp: the default pin from the PyPI source, built for cpu and vulkan, verified,
cached. (Builds come from the session fixtures in conftest.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamaforge.builds import Build, BuildOptions, build
from llamaforge.builds.verify import verify_build

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamaforge.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def test_builds_report_the_pinned_commit_and_see_their_device(any_build: Build):
    ver = any_build.manifest["verification"]
    assert ver["ok"], ver["problems"]
    assert ver["version"]["commit"] == "0c1e57098"
    assert any_build.manifest["source"]["origin"].startswith(("pypi:", "git", "path:", "mirror"))
    for name in ("llama-server", "llama-bench", "llama-fit-params"):
        info = any_build.manifest["binaries"][name]
        assert any_build.binary(name).stat().st_size == info["size"] and len(info["sha256"]) == 64
    if any_build.backend == "vulkan":
        devs = ver["devices"]
        assert devs and devs[0]["backend"] == "Vulkan" and "llvmpipe" in devs[0]["name"]
        assert any_build.env.get("GGML_VK_VISIBLE_DEVICES") == "0"      # lavapipe is a CPU device
        caps = any_build.capabilities
        assert set(caps["vulkan_glslc"]) >= {"coopmat", "coopmat2", "integer_dot", "bf16"}
        assert caps["vulkan"]["matrix_cores"] is not None and caps["vulkan"]["int_dot"] in (0, 1)


def test_second_identical_build_is_a_cache_hit_without_cmake(lf_paths, default_pin, cpu_build, vulkan_build):
    logs = {b.key: (b.dir / "build.log").stat().st_mtime for b in (cpu_build, vulkan_build)}
    t0 = time.monotonic()
    r = _cli("build", "--backends", "cpu,vulkan", cwd=lf_paths.workspace)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.count("cached") == 2
    print(f"cache-hit build of cpu+vulkan via the CLI: {elapsed:.2f} s (incl. Python start-up)")
    for b in (cpu_build, vulkan_build):
        assert (b.dir / "build.log").stat().st_mtime == logs[b.key]     # no configure/build ran
    again = build(lf_paths, default_pin, "cpu", BuildOptions())
    assert again.key == cpu_build.key


def test_cuda_label_on_a_vulkan_binary_is_caught_as_the_seed_trap(vulkan_build):
    fake = Build(vulkan_build.key, "cuda", vulkan_build.commit, vulkan_build.pin, vulkan_build.dir,
                 vulkan_build.manifest)
    v = verify_build(fake)
    assert not v.ok
    assert v.problems[0].startswith("built for CUDA but the binary sees only Vulkan0 (llvmpipe")


def test_smoke_generation_through_verify(lf_paths, cpu_build, tiny_model):
    r = _cli("verify", "--backends", "cpu", "--model", str(tiny_model), cwd=lf_paths.workspace)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "all builds verified" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["build", "--backends", "cpu,rocm"], "unknown backend 'rocm'"),
    (["build", "--pins", "nosuchpin"], "unknown pin 'nosuchpin'"),
    (["build", "--pins", "deadbeef12"], "deadbeef12"),
    (["bench", "--model", "synth:tiny-qwen35moe", "--backends", "metal"], "metal is not built"),
])
def test_bad_input_is_one_clear_line_and_nonzero_exit(lf_paths, args, needle):
    r = _cli(*args, cwd=lf_paths.workspace)
    assert r.returncode != 0
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1 and needle in errs[0], r.stderr
    assert "Traceback" not in r.stderr


def test_binaries_built_elsewhere_are_usable_with_their_reported_commit(cpu_build):
    """`--bin-dir`: a folder of llama.cpp binaries not built by llamaforge (a distro package, a hand build)."""
    from llamaforge.bench.external import external_build

    ext = external_build(cpu_build.dir / "out" / "bin", "cpu")
    assert ext.commit == "0c1e57098" and ext.key.startswith("ext-cpu-0c1e57098-")
    assert ext.binary("llama-server").is_file()
    assert verify_build(ext).ok
