"""The backend protocol (issue 42, deliverable 3): one object per backend, found by name, owning its CMake flags,
tools, checks, knobs and quirks."""

from pathlib import Path

import pytest

from llamaforge import backends
from llamaforge.backends import UNTESTED, FlagOptions, HostFacts
from llamaforge.backends.blas import openblas_version
from llamaforge.backends.toolchain import Tool, Toolchain
from llamaforge.backends.untested import hip_version_problem
from llamaforge.errors import ConfigError, ToolchainError

TOOL = Tool("x", "/usr/bin/x", "1.0")


def _tc(**kw) -> Toolchain:
    return Toolchain(**{"cmake": Tool("cmake", "/usr/bin/cmake", "3.25.1"), "ninja": TOOL, "cc": TOOL, "cxx": TOOL,
                        "ccache": None, **kw})


def test_the_registry_holds_every_backend_once_tested_ones_first():
    assert backends.names() == ["cpu", "cuda", "vulkan", "blas", "rpc", "hip", "sycl", "metal"]
    assert [b.name for b in backends.known() if b.tested] == ["cpu", "cuda", "vulkan", "blas", "rpc"]
    assert all(backends.get(n).name == n for n in backends.names())
    assert backends.get(" CUDA ") is backends.get("cuda") and backends.find("rocm") is None


def test_an_unknown_backend_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError) as e:
        backends.get("rocm")
    assert e.value.message == "unknown backend 'rocm'" and "\n" not in e.value.message
    assert all(n in e.value.fix for n in backends.names())
    with pytest.raises(ConfigError):
        backends.parse("")
    assert [b.name for b in backends.parse("cpu,vulkan,cpu")] == ["cpu", "vulkan"]


@pytest.mark.parametrize(("name", "flags"), [
    ("cpu", {}), ("cuda", {"GGML_CUDA": "ON"}), ("vulkan", {"GGML_VULKAN": "ON"}),
    ("blas", {"GGML_BLAS": "ON", "GGML_BLAS_VENDOR": "OpenBLAS"}), ("rpc", {"GGML_RPC": "ON"}),
    ("hip", {"GGML_HIP": "ON"}), ("sycl", {"GGML_SYCL": "ON", "CMAKE_C_COMPILER": "icx", "CMAKE_CXX_COMPILER": "icpx"}),
    ("metal", {"GGML_METAL": "ON"}),
])
def test_each_backend_owns_its_cmake_switches(name: str, flags: dict):
    assert dict(backends.get(name).flags) == flags


def test_cpu_flags_are_the_common_ones_exactly():
    """The CPU build's flags (and so its build key) are what they were before the protocol."""
    flags = backends.get("cpu").cmake_flags(_tc(), FlagOptions())
    assert flags == {"LLAMA_BUILD_TESTS": "OFF", "LLAMA_BUILD_EXAMPLES": "OFF", "LLAMA_BUILD_SERVER": "ON",
                     "LLAMA_BUILD_TOOLS": "ON", "LLAMA_USE_PREBUILT_UI": "OFF", "LLAMA_CURL": "OFF",
                     "LLAMA_OPENSSL": "OFF", "BUILD_SHARED_LIBS": "OFF", "CMAKE_BUILD_TYPE": "Release",
                     "GGML_NATIVE": "ON"}
    assert backends.get("cpu").cmake_flags(_tc(), FlagOptions(defines={"GGML_NATIVE": "OFF"}))["GGML_NATIVE"] == "OFF"


def test_cuda_flags_and_fingerprint_come_from_its_tools():
    nvcc = Tool("nvcc", "/usr/local/cuda/bin/nvcc", "12.8")
    b = backends.get("cuda")
    flags = b.cmake_flags(_tc(nvcc=nvcc), FlagOptions(cuda_archs="90", cuda_fa_all_quants=True))
    assert (flags["CMAKE_CUDA_COMPILER"], flags["CMAKE_CUDA_ARCHITECTURES"], flags["GGML_CUDA_FA_ALL_QUANTS"]) == (
        nvcc.path, "90", "ON")
    assert _tc(nvcc=nvcc).fingerprint("cuda") == {"cmake": "3.25.1", "generator": "ninja 1.0", "cc": "x 1.0",
                                                  "cxx": "x 1.0", "nvcc": "12.8"}
    assert _tc(nvcc=nvcc).fingerprint("cpu") == {"cmake": "3.25.1", "generator": "ninja 1.0", "cc": "x 1.0",
                                                 "cxx": "x 1.0"}
    assert b.launcher_languages == ("CUDA",) and backends.get("cpu").launcher_languages == ()
    caps = b.build_capabilities("", "CMAKE_CUDA_ARCHITECTURES:STRING=90\n")
    assert caps == {"cuda_archs": "90"} and b.describe_capabilities(caps) == ["archs: 90"]


def test_a_backend_that_cannot_be_built_says_why_in_one_error():
    with pytest.raises(ToolchainError) as e:
        backends.get("cuda").cmake_flags(_tc(nvcc=None), FlagOptions(cuda_archs="90"))
    assert e.value.message == "cannot build cuda: nvcc (CUDA toolkit) not found"
    with pytest.raises(ToolchainError) as e:
        backends.get("cpu").cmake_flags(_tc(cmake=None), FlagOptions())
    assert "cmake" in e.value.message


def test_rpc_builds_its_server_and_blas_runs_on_the_cpu():
    # the target is ggml-rpc-server in llama.cpp since late 2025 (tools/rpc), rpc-server before: both are asked for
    assert backends.get("rpc").extra_targets == ("ggml-rpc-server", "rpc-server")
    assert not backends.get("blas").offloads and not backends.get("cpu").offloads
    assert backends.get("cuda").offloads and backends.get("vulkan").offloads and backends.get("rpc").offloads
    st = backends.get("rpc").doctor_checks(_tc(), HostFacts())
    assert st.can_run is True and "--rpc" in st.reasons[0][0]


def test_blas_names_missing_openblas_and_keys_its_version(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("llamaforge.backends.blas.openblas_header", lambda: None)
    probs = backends.get("blas").build_problems(_tc())
    assert probs and "OpenBLAS" in probs[0][0] and "libopenblas-dev" in probs[0][1]
    h = tmp_path / "openblas_config.h"
    h.write_text('#define OPENBLAS_VERSION " OpenBLAS 0.3.21 "\n')
    assert openblas_version(str(h)) == "0.3.21" and openblas_version(None) == "unknown"


@pytest.mark.parametrize("name", ["hip", "sycl", "metal"])
def test_untested_backends_are_labelled_so_in_doctor(name: str):
    b = backends.get(name)
    assert not b.tested
    st = b.doctor_checks(_tc(), HostFacts())
    assert st.can_run is None and st.reasons[0][0].startswith(UNTESTED) and st.reasons[0][1] == b.note


def test_debian_12s_hipcc_is_named_too_old():
    problem, fix = hip_version_problem("5.2.3")
    assert "5.2.3" in problem and ">= 6.1" in problem and "ROCm" in fix
    assert hip_version_problem("6.1.2") is None and hip_version_problem("6.4") is None


def test_cpu_backends_carry_the_hosts_warnings_in_doctor():
    warn = ("AMX CPU with gcc 12", "build with --no-amx")
    assert backends.get("cpu").doctor_checks(_tc(), HostFacts((warn,))).reasons == [warn]
    assert backends.get("cpu").doctor_checks(_tc(), HostFacts()).can_run is True


def test_vulkan_retries_with_its_hidden_device_env_and_says_lavapipe_is_the_cpu():
    vk = backends.get("vulkan")
    assert vk.hidden_device_env({}) == {"GGML_VK_VISIBLE_DEVICES": "0"}
    assert vk.hidden_device_env({"GGML_VK_VISIBLE_DEVICES": "1"}) is None
    assert backends.get("cuda").hidden_device_env({}) is None
    assert vk.verify_capabilities(["llvmpipe (LLVM 15.0.6, 256 bits)"], False) == {"vulkan_cpu_device": True}
    assert vk.verify_capabilities(["NVIDIA H200"], False) == {"vulkan_cpu_device": False}
    assert backends.get("cpu").verify_capabilities(["x"], False) == {}
    assert vk.cpu_device({"verification": {"devices": [{"name": "llvmpipe"}]}})
    assert not backends.get("cuda").cpu_device({"capabilities": {"vulkan_cpu_device": True}})


def test_env_knobs_belong_to_their_backend():
    for b in backends.known():
        assert all(k.backends == (b.name,) for k in b.env_knobs), b.name
    assert "GGML_VK_DISABLE_COOPMAT" in {k.name for k in backends.get("vulkan").env_knobs}
    assert "CUDA_VISIBLE_DEVICES" in {k.name for k in backends.get("cuda").env_knobs}
    assert "HIP_VISIBLE_DEVICES" in {k.name for k in backends.get("hip").env_knobs}


def test_quirks_are_listed_per_backend():
    assert "no-repack" in {q.name for q in backends.get("cpu").quirks}
    assert all(q.backends is None or "cuda" in q.backends for q in backends.get("cuda").quirks)


def test_order_labels_and_colours_are_the_backends_own():
    assert sorted(["cpu", "vulkan", "cuda", "rocm"], key=backends.rank) == ["cuda", "vulkan", "cpu", "rocm"]
    assert [backends.label(n) for n in ("hip", " CUDA ", "npu", None)] == ["ROCm", "CUDA", "npu", "?"]
    assert all(b.label for b in backends.known())
    assert backends.get("cuda").color and backends.get("vulkan").color and backends.get("cpu").color
