"""The Vulkan backend: glslc, the Vulkan headers and loader, devices from ``vulkaninfo``, lavapipe (a CPU
Vulkan device llama.cpp hides unless ``GGML_VK_VISIBLE_DEVICES`` asks for it) and the ggml-vulkan knobs.

Vulkan headers are searched in: an explicit directory, ``$LLAMAFORGE_VULKAN_INCLUDE``, ``$VULKAN_SDK/include``,
``~/.cache/llamaforge/vulkan-sdk/usr/include`` (what ``scripts/fetch-vulkan-headers.sh`` writes),
``/usr/include``. They are checked for ``vk::LayerSettingEXT`` — current llama.cpp needs it and Debian 12's
1.3.239 lacks it — before CMake runs.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from .. import proc
from ..paths import cache_root
from .base import Backend, DoctorCheck, EnvKnob, FlagOptions, HostFacts, Problem
from .tools import Tool, find_exe, first_file

if TYPE_CHECKING:
    from .toolchain import Toolchain

_VK = ("vulkan",)
_CPU_VULKAN = re.compile(r"llvmpipe|lavapipe|swiftshader", re.I)
#: what llama.cpp reads to show a CPU-type Vulkan device (it hides them by default)
VISIBLE_DEVICES = "GGML_VK_VISIBLE_DEVICES"


def is_cpu_vulkan_name(name: str) -> bool:
    """A Vulkan device that is really the CPU (Mesa lavapipe/llvmpipe, SwiftShader)."""
    return bool(_CPU_VULKAN.search(name or ""))


def find_glslc(explicit: str | None = None) -> Tool | None:
    cand = explicit or os.environ.get("LLAMAFORGE_GLSLC")
    sdk = os.environ.get("VULKAN_SDK")
    if not cand and sdk and Path(sdk, "bin", "glslc").exists():
        cand = str(Path(sdk, "bin", "glslc"))
    cand = cand or shutil.which("glslc")
    return find_exe("glslc", cand, r"shaderc v?(\S+)") if cand else None


@dataclass(frozen=True)
class VulkanHeaders:
    include: Path
    version: str                 # e.g. "1.4.309"
    has_layer_settings: bool     # vk::LayerSettingEXT present (needed by llama.cpp >= mid-2025)
    has_spirv_headers: bool
    cmake_prefix: Path | None    # a prefix holding share/cmake/SPIRV-Headers (for find_package)

    @property
    def ok(self) -> bool:
        return self.has_layer_settings and self.has_spirv_headers


def _header_version(include: Path) -> str | None:
    core = include / "vulkan" / "vulkan_core.h"
    if not core.is_file():
        return None
    text = core.read_text(errors="replace")
    patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    comp = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+), VK_HEADER_VERSION\)", text)
    if not patch:
        return None
    return f"{comp.group(1)}.{comp.group(2)}.{patch.group(1)}" if comp else f"?.?.{patch.group(1)}"


def vulkan_header_candidates(explicit: str | None = None) -> list[Path]:
    out: list[Path] = []
    if explicit:
        out.append(Path(explicit))
    if os.environ.get("LLAMAFORGE_VULKAN_INCLUDE"):
        out.append(Path(os.environ["LLAMAFORGE_VULKAN_INCLUDE"]))
    if os.environ.get("VULKAN_SDK"):
        out.append(Path(os.environ["VULKAN_SDK"]) / "include")
    out.append(cache_root() / "vulkan-sdk" / "usr" / "include")
    out.append(Path("/usr/include"))
    return out


def inspect_vulkan_headers(include: Path) -> VulkanHeaders | None:
    version = _header_version(include)
    if version is None:
        return None
    vk = include / "vulkan"
    has_ls = any("struct LayerSettingEXT" in p.read_text(errors="replace")
                 for p in (vk / "vulkan_structs.hpp", vk / "vulkan.hpp") if p.is_file())
    has_spirv = (include / "spirv" / "unified1" / "spirv.hpp").is_file()
    prefix = include.parent
    cmake_prefix = prefix if (prefix / "share" / "cmake" / "SPIRV-Headers").is_dir() else None
    return VulkanHeaders(include, version, has_ls, has_spirv, cmake_prefix)


def find_vulkan_headers(explicit: str | None = None) -> tuple[VulkanHeaders | None, list[VulkanHeaders]]:
    """The first usable header set, and every set seen (for error messages)."""
    seen: list[VulkanHeaders] = []
    for inc in vulkan_header_candidates(explicit):
        h = inspect_vulkan_headers(inc)
        if h is None:
            continue
        seen.append(h)
        if h.ok:
            return h, seen
    return None, seen


def vulkan_library() -> str | None:
    """The Vulkan loader library (libvulkan), from the system folders or ``$VULKAN_SDK/lib``."""
    hit = first_file(("/usr/lib/x86_64-linux-gnu/libvulkan.so", "/usr/lib/*/libvulkan.so", "/usr/lib64/libvulkan.so",
                      "/usr/lib/*/libvulkan.so.1", "/usr/lib64/libvulkan.so.1", "/usr/lib/libvulkan.so*"))
    sdk = os.environ.get("VULKAN_SDK")
    if hit is None and sdk:
        hit = first_file((os.path.join(sdk, "lib", "libvulkan.so*"),))
    return hit


def vulkaninfo_devices() -> list[dict[str, str]]:
    """Devices ``vulkaninfo --summary`` reports: [{name, type, driver}] (empty when unavailable)."""
    exe = shutil.which("vulkaninfo")
    if not exe:
        return []
    r = proc.run([exe, "--summary"], timeout=60)
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in r.output.splitlines():
        m = re.match(r"\s+(deviceType|deviceName|driverName)\s*=\s*(.*)", line)
        if m:
            cur[m.group(1)] = m.group(2).strip()
            if m.group(1) == "driverName":
                out.append({"name": cur.get("deviceName", "?"), "type": cur.get("deviceType", "?"), "driver": cur["driverName"]})
                cur = {}
    return out


def parse_glslc_support(configure_log: str, cmake_cache: str) -> dict[str, bool]:
    """Vulkan shader features the build's glslc supports (configure output, or CMakeCache on older commits)."""
    names = {"GL_KHR_cooperative_matrix": "coopmat", "GL_NV_cooperative_matrix2": "coopmat2",
             "GL_EXT_integer_dot_product": "integer_dot", "GL_EXT_bfloat16": "bf16"}
    out: dict[str, bool] = {}
    for ext, key in names.items():
        m = re.search(rf"{re.escape(ext)} (not )?supported by glslc", configure_log)
        if m:
            out[key] = m.group(1) is None
    for line in cmake_cache.splitlines():
        m = re.match(r"GGML_VULKAN_(\w+)_GLSLC_SUPPORT:\w+=(\w+)", line)
        if m:
            key = {"COOPMAT": "coopmat", "COOPMAT2": "coopmat2", "INTEGER_DOT": "integer_dot", "BFLOAT16": "bf16"}.get(
                m.group(1), m.group(1).lower())
            out.setdefault(key, m.group(2).upper() in ("ON", "TRUE", "1"))
    return out


def _header_problems(tc: Toolchain) -> list[Problem]:
    if tc.vulkan_headers is not None:
        return []
    if any(not h.has_layer_settings for h in tc.vulkan_seen):
        old = ", ".join(f"{h.version} at {h.include}" for h in tc.vulkan_seen)
        return [(f"Vulkan headers too old ({old}; llama.cpp needs vk::LayerSettingEXT, >= 1.3.261)",
                 "run scripts/fetch-vulkan-headers.sh (Debian 13 headers into ~/.cache/llamaforge/vulkan-sdk), "
                 "or pass --vulkan-include DIR / set VULKAN_SDK")]
    if tc.vulkan_seen:
        return [("SPIRV-Headers not found next to the Vulkan headers",
                 "apt-get install spirv-headers, or run scripts/fetch-vulkan-headers.sh")]
    return [("Vulkan headers not found", "apt-get install libvulkan-dev, or run scripts/fetch-vulkan-headers.sh")]


class Vulkan(Backend):
    name = "vulkan"
    label = "Vulkan"
    device_prefix = "Vulkan"
    flags = MappingProxyType({"GGML_VULKAN": "ON"})
    demo = "if-available"
    rank = 40
    color = "#c0392b"
    no_device_fix = ("install a Vulkan driver (apt-get install mesa-vulkan-drivers for lavapipe; the NVIDIA/AMD "
                     "driver for GPUs) and check `vulkaninfo --summary`")
    env_knobs = (
        # ggml-vulkan.cpp: device features and selection
        EnvKnob(VISIBLE_DEVICES, _VK, "which Vulkan devices llama.cpp uses (e.g. 0, or 0,1)", "devices"),
        EnvKnob("GGML_VK_DISABLE_COOPMAT", _VK, "do not use KHR_cooperative_matrix (matrix cores)", "matrix_cores",
                "KHR_coopmat"),
        EnvKnob("GGML_VK_DISABLE_COOPMAT2", _VK, "do not use NV_cooperative_matrix2", "matrix_cores", "NV_coopmat2"),
        EnvKnob("GGML_VK_DISABLE_COOPMAT2_DECODE_VECTOR", _VK, "coopmat2 without the decode-vector path",
                "matrix_cores", "NV_coopmat2v"),
        EnvKnob("GGML_VK_DISABLE_INTEGER_DOT_PRODUCT", _VK, "do not use integer dot products (int dot: 0)", "int_dot",
                "1"),
        EnvKnob("GGML_VK_DISABLE_F16", _VK, "no fp16 arithmetic (fp16: 0)", "fp16", "1,dot2"),
        EnvKnob("GGML_VK_DISABLE_DOT2", _VK, "no fp16 dot2 (fp16: dot2 → 1)", "fp16", "dot2"),
        EnvKnob("GGML_VK_DISABLE_BFLOAT16", _VK, "no bf16 (bf16: 0)", "bf16", "1"),
        EnvKnob("GGML_VK_DISABLE_OCP_FP4", _VK, "no OCP fp4 (fp4: 0)", "fp4", "1"),
        EnvKnob("GGML_VK_DISABLE_MMVQ", _VK, "no quantized matrix-vector kernels"),
        EnvKnob("GGML_VK_FORCE_MMVQ", _VK, "always the quantized matrix-vector kernels"),
        EnvKnob("GGML_VK_DISABLE_FUSION", _VK, "no operator fusion"),
        EnvKnob("GGML_VK_DISABLE_GRAPH_OPTIMIZE", _VK, "no graph reordering"),
        EnvKnob("GGML_VK_DISABLE_MULTI_ADD", _VK, "no fused multi-add"),
        EnvKnob("GGML_VK_DISABLE_ASYNC", _VK, "no asynchronous transfers"),
        EnvKnob("GGML_VK_ASYNC_USE_TRANSFER_QUEUE", _VK, "asynchronous transfers on the transfer queue"),
        EnvKnob("GGML_VK_FA_SPARSE_DISABLE", _VK, "no sparse flash-attention path"),
        EnvKnob("GGML_VK_PREFER_HOST_MEMORY", _VK, "allocate buffers in host memory"),
        EnvKnob("GGML_VK_DISABLE_HOST_VISIBLE_VIDMEM", _VK, "no host-visible device memory"),
        EnvKnob("GGML_VK_ALLOW_SYSMEM_FALLBACK", _VK, "fall back to system memory when VRAM is full"),
        # the Vulkan loader and drivers underneath llama.cpp
        EnvKnob("VK_DRIVER_FILES", _VK, "the Vulkan ICD (driver) JSON files the loader uses", "devices"),
        EnvKnob("VK_ICD_FILENAMES", _VK, "older name of VK_DRIVER_FILES", "devices"),
        EnvKnob("AMD_VULKAN_ICD", _VK, "RADV or AMDVLK when both are installed", "devices"),
        EnvKnob("RADV_PERFTEST", _VK, "RADV (Mesa) experimental features, e.g. coop_matrix"),
    )

    def probe(self, tc: Toolchain, explicit: Mapping[str, str | None]) -> None:
        tc.glslc = find_glslc(explicit.get("glslc"))
        tc.vulkan_headers, tc.vulkan_seen = find_vulkan_headers(explicit.get("vulkan_include"))

    def fingerprint(self, tc: Toolchain) -> dict[str, str]:
        return {"glslc": tc.glslc.version if tc.glslc else "missing",
                "vulkan_headers": tc.vulkan_headers.version if tc.vulkan_headers else "missing"}

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        out: list[Problem] = []
        if tc.glslc is None:
            out.append(("glslc (shader compiler) not found",
                        "apt-get install glslc  (or install the LunarG Vulkan SDK and set VULKAN_SDK)"))
        out += _header_problems(tc)
        if vulkan_library() is None:
            out.append(("Vulkan loader library (libvulkan) not found", "apt-get install libvulkan1 libvulkan-dev"))
        return out

    def toolchain_flags(self, tc: Toolchain, opts: FlagOptions) -> dict[str, str]:
        assert tc.glslc is not None and tc.vulkan_headers is not None
        flags = {"Vulkan_GLSLC_EXECUTABLE": tc.glslc.path, "Vulkan_INCLUDE_DIR": str(tc.vulkan_headers.include)}
        lib = vulkan_library()
        if lib:
            flags["Vulkan_LIBRARY"] = lib
        if tc.vulkan_headers.cmake_prefix:
            flags["CMAKE_PREFIX_PATH"] = str(tc.vulkan_headers.cmake_prefix)
        return flags

    def build_capabilities(self, log_text: str, cmake_cache: str) -> dict:
        return {"vulkan_glslc": parse_glslc_support(log_text, cmake_cache)}

    def hidden_device_env(self, env: Mapping[str, str]) -> dict[str, str] | None:
        return None if VISIBLE_DEVICES in env else {VISIBLE_DEVICES: "0"}

    def verify_capabilities(self, device_names: list[str], retried: bool) -> dict:
        return {"vulkan_cpu_device": retried or any(is_cpu_vulkan_name(n) for n in device_names)}

    def cpu_device(self, manifest: Mapping) -> bool:
        caps = manifest.get("capabilities") or {}
        if "vulkan_cpu_device" in caps:
            return bool(caps["vulkan_cpu_device"])
        devs = (manifest.get("verification") or {}).get("devices") or []
        return any(is_cpu_vulkan_name(str(d.get("name", ""))) for d in devs)

    def describe_capabilities(self, caps: Mapping) -> list[str]:
        out = []
        v = caps.get("vulkan")
        if isinstance(v, Mapping):
            out.append(f"matrix cores: {v.get('matrix_cores')} | int dot: {v.get('int_dot')}")
        if caps.get("vulkan_glslc"):
            out.append("glslc: " + (", ".join(k for k, on in caps["vulkan_glslc"].items() if on) or "none"))
        return out

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        devs = vulkaninfo_devices()
        st = DoctorCheck(bool(devs), [f"{d['name']} [{d['type'].replace('PHYSICAL_DEVICE_TYPE_', '').lower()}]"
                                      for d in devs])
        if not devs:
            st.reasons.append(("no Vulkan device (vulkaninfo)",
                               "apt-get install mesa-vulkan-drivers vulkan-tools (lavapipe), or a GPU driver"))
        elif all("CPU" in d["type"] for d in devs):
            st.reasons.append(("only a CPU Vulkan device (lavapipe): slow, for tests",
                               f"llamaforge runs it with {VISIBLE_DEVICES}=0 automatically"))
        return st


VULKAN = Vulkan()
