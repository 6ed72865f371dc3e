"""Build keys, manifests, toolchain checks, verification parsing — no compiler needed."""

import json
from pathlib import Path

import pytest

from llamaforge.backends import FlagOptions, known
from llamaforge.backends import get as get_backend
from llamaforge.backends import parse as parse_backends
from llamaforge.backends.toolchain import Tool, Toolchain
from llamaforge.backends.vulkan import VulkanHeaders, inspect_vulkan_headers, parse_glslc_support
from llamaforge.builds.builder import (
    MANIFEST,
    MANIFEST_VERSION,
    first_error,
    make_key,
    read_manifest,
    write_json_atomic,
)
from llamaforge.builds.verify import diagnose
from llamaforge.errors import ConfigError, ToolchainError
from llamaforge.findings.labels import display_name
from llamaforge.llamacpp.devices import parse_devices, parse_version, parse_vulkan_lines


def _tc(**kw) -> Toolchain:
    t = Tool("x", "/usr/bin/x", "1.0")
    base = dict(cmake=Tool("cmake", "/usr/bin/cmake", "3.25.1"), ninja=t, cc=t, cxx=t, ccache=None)
    base.update(kw)
    return Toolchain(**base)


def test_key_changes_with_every_component_and_is_stable():
    fp = {"cc": "gcc 12"}
    k1, _ = make_key("0c1e57098abc", "cpu", {"GGML_NATIVE": "ON"}, fp)
    assert k1 == make_key("0c1e57098abc", "cpu", {"GGML_NATIVE": "ON"}, dict(fp))[0]
    assert k1.startswith("0c1e57098-cpu-")
    others = [make_key("0c1e57099", "cpu", {"GGML_NATIVE": "ON"}, fp)[0],
              make_key("0c1e57098", "vulkan", {"GGML_NATIVE": "ON"}, fp)[0],
              make_key("0c1e57098", "cpu", {"GGML_NATIVE": "OFF"}, fp)[0],
              make_key("0c1e57098", "cpu", {"GGML_NATIVE": "ON"}, {"cc": "gcc 13"})[0]]
    assert len({k1, *others}) == 5


def test_manifest_is_a_cache_hit_only_when_complete(tmp_path: Path):
    (tmp_path / "out" / "bin").mkdir(parents=True)
    binp = tmp_path / "out" / "bin" / "llama-server"
    binp.write_bytes(b"x" * 10)
    m = {"manifest_version": MANIFEST_VERSION, "status": "ok", "key": "k",
         "binaries": {"llama-server": {"path": "out/bin/llama-server", "size": 10, "sha256": "-"}}}
    assert read_manifest(tmp_path) is None                       # no manifest: interrupted build
    write_json_atomic(tmp_path / MANIFEST, m)
    assert read_manifest(tmp_path)["key"] == "k"
    binp.write_bytes(b"x" * 11)                                   # binary changed under us
    assert read_manifest(tmp_path) is None
    binp.write_bytes(b"x" * 10)
    (tmp_path / MANIFEST).write_text(json.dumps(m)[:-5])          # torn write
    assert read_manifest(tmp_path) is None
    assert not list(tmp_path.glob("*.tmp*"))


def test_every_backend_has_the_name_reports_give_it():
    assert all(b.label for b in known())
    assert (display_name("hip"), display_name(" CUDA "), display_name("npu"), display_name(None)) == ("ROCm", "CUDA", "npu", "?")


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        parse_backends("cpu,rocm")
    assert "rocm" in e.value.message and "vulkan" in e.value.fix


def test_cuda_without_nvcc_or_archs_is_a_toolchain_error(monkeypatch):
    monkeypatch.setattr("llamaforge.backends.cuda.gpu_visible", lambda: False)
    with pytest.raises(ToolchainError) as e:
        get_backend("cuda").cmake_flags(_tc(nvcc=None), FlagOptions())
    assert "nvcc" in e.value.message
    nvcc = Tool("nvcc", "/usr/local/cuda/bin/nvcc", "13.0")
    with pytest.raises(ToolchainError) as e:
        get_backend("cuda").cmake_flags(_tc(nvcc=nvcc), FlagOptions())
    assert "--cuda-archs" in e.value.fix
    flags = get_backend("cuda").cmake_flags(_tc(nvcc=nvcc), FlagOptions(cuda_archs="90"))
    assert flags["CMAKE_CUDA_ARCHITECTURES"] == "90" and flags["GGML_CUDA"] == "ON"


def _headers(root: Path, version: int, layer_settings: bool, spirv: bool) -> Path:
    inc = root / "include"
    (inc / "vulkan").mkdir(parents=True)
    (inc / "vulkan" / "vulkan_core.h").write_text(
        f"#define VK_HEADER_VERSION {version}\n"
        "#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)\n")
    (inc / "vulkan" / "vulkan_structs.hpp").write_text("struct LayerSettingEXT {};" if layer_settings else "")
    if spirv:
        (inc / "spirv" / "unified1").mkdir(parents=True)
        (inc / "spirv" / "unified1" / "spirv.hpp").write_text("")
    return inc


def test_too_old_vulkan_headers_are_detected_before_cmake(tmp_path: Path):
    old = inspect_vulkan_headers(_headers(tmp_path / "old", 239, False, True))
    assert old is not None and old.version == "1.3.239" and not old.ok
    glslc = Tool("glslc", "/usr/bin/glslc", "2023.2")
    probs = get_backend("vulkan").build_problems(_tc(glslc=glslc, vulkan_headers=None, vulkan_seen=[old]))
    assert any("too old" in p and "fetch-vulkan-headers" in f for p, f in probs)
    new = inspect_vulkan_headers(_headers(tmp_path / "new", 309, True, True))
    assert new.ok


def test_vulkan_flags_point_cmake_at_the_found_headers_and_glslc(tmp_path: Path):
    inc = _headers(tmp_path, 309, True, True)
    vh = VulkanHeaders(inc, "1.3.309", True, True, None)
    glslc = Tool("glslc", "/opt/glslc", "2025.2")
    flags = get_backend("vulkan").cmake_flags(_tc(glslc=glslc, vulkan_headers=vh), FlagOptions())
    assert flags["GGML_VULKAN"] == "ON" and flags["Vulkan_INCLUDE_DIR"] == str(inc)
    assert flags["Vulkan_GLSLC_EXECUTABLE"] == "/opt/glslc" and flags["BUILD_SHARED_LIBS"] == "OFF"


def test_glslc_support_from_configure_output():
    log = ("-- GL_KHR_cooperative_matrix supported by glslc\n-- GL_NV_cooperative_matrix2 not supported by glslc\n"
           "-- GL_EXT_integer_dot_product supported by glslc\n-- GL_EXT_bfloat16 not supported by glslc\n")
    assert parse_glslc_support(log, "") == {"coopmat": True, "coopmat2": False, "integer_dot": True, "bf16": False}
    assert parse_glslc_support("", "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT:INTERNAL=ON\n") == {"coopmat2": True}


def test_first_compiler_error_is_found():
    log = "[1/3] Building x\n/src/a.cpp:10:5: error: 'foo' was not declared\n[2/3] ..."
    assert "'foo' was not declared" in first_error(log)
    assert first_error("all fine\n") is None


def test_device_listing_and_version_parsing():
    text = ("ggml_vulkan: 0 = NVIDIA H200 (NVIDIA) | uma: 0 | fp16: 1 | bf16: 1 | warp size: 32 | "
            "shared memory: 49152 | int dot: 1 | matrix cores: NV_coopmat2\n"
            "Available devices:\n  Vulkan0: NVIDIA H200 (143155 MiB, 142629 MiB free)\n")
    devs = parse_devices(text)
    assert [(d.backend, d.index, d.name, d.memory_total_mib) for d in devs] == [("Vulkan", 0, "NVIDIA H200", 143155)]
    vk = parse_vulkan_lines(text)[0]
    assert vk["matrix_cores"] == "NV_coopmat2" and vk["int_dot"] == 1
    assert parse_version("version: 0.5.0-dev (build 0, commit 0c1e57098)\n")["commit"] == "0c1e57098"
    assert parse_devices("Available devices:\n  (none)\n") == []


def test_cuda_build_that_sees_only_vulkan_is_the_seed_trap():
    devs = parse_devices("Available devices:\n  Vulkan0: NVIDIA GeForce RTX 3090 (24576 MiB, 23000 MiB free)\n")
    probs, fixes = diagnose("cuda", "0c1e57098", {"commit": "0c1e57098"}, devs)
    assert probs == ["built for CUDA but the binary sees only Vulkan0 (NVIDIA GeForce RTX 3090)"]
    probs, _ = diagnose("vulkan", "0c1e57098", {"commit": "0c1e57098"}, [])
    assert probs == ["the Vulkan build sees no device"]
    probs, _ = diagnose("cpu", "0c1e57098", {"commit": "deadbeef"}, [])
    assert "reports commit deadbeef" in probs[0]


def test_disk_full_during_a_build_says_so_and_never_leaves_a_manifest(tmp_path: Path, monkeypatch):
    from llamaforge.builds.builder import _raise_failed
    from llamaforge.errors import BuildError

    log = tmp_path / "build.log"
    out = "[12/214] Building CXX object x.o\nFAILED: x.o\n/usr/bin/ld: final link failed: No space left on device\n"
    with pytest.raises(BuildError) as e:
        _raise_failed("build", get_backend("cpu"), out, log)
    assert "disk full" in e.value.message and "free disk space" in e.value.fix
    assert e.value.log_path == str(log)
    # a manifest write that hits ENOSPC leaves no (partial) manifest behind
    import errno

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("json.dump", full)
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / MANIFEST, {"a": 1})
    assert read_manifest(tmp_path) is None and not (tmp_path / MANIFEST).exists()
    assert not list(tmp_path.glob("*.tmp*"))
