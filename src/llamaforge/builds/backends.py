"""Backends and their CMake flags.

``cpu``, ``cuda`` and ``vulkan`` are built and tested by CI / on the lent H200; ``hip``, ``sycl``
and ``metal`` are declared (flag sets follow llama.cpp's docs) but untested — see the README.

Every flag that can change speed is part of the build key: build type, ``GGML_NATIVE``, CUDA
architectures, ``GGML_CUDA_FA_ALL_QUANTS``, and any ``-D`` the user adds.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, ToolchainError
from .toolchain import Toolchain

COMMON_FLAGS: dict[str, str] = {
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_USE_PREBUILT_UI": "OFF",   # would download the web UI at configure time
    "LLAMA_CURL": "OFF",              # older commits: no libcurl dependency
    "LLAMA_OPENSSL": "OFF",
    "BUILD_SHARED_LIBS": "OFF",       # self-contained binaries, hashed in the manifest
}

#: llama.cpp without its AMX code: the GGML_AMX_* options cover non-native builds; with GGML_NATIVE
#: (-march=native) the compiler enables AMX on an AMX CPU by itself, which -mno-amx-* undoes
NO_AMX_FLAGS: dict[str, str] = {
    "GGML_AMX_TILE": "OFF", "GGML_AMX_INT8": "OFF", "GGML_AMX_BF16": "OFF",
    "CMAKE_C_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "CMAKE_CXX_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
}

TARGETS_REQUIRED = ("llama-server", "llama-bench")
TARGETS_OPTIONAL = ("llama-fit-params",)


@dataclass(frozen=True)
class Backend:
    name: str
    device_prefix: str | None     # what `--list-devices` prints for this backend's devices
    flags: dict[str, str] = field(default_factory=dict)
    tested: bool = True
    note: str = ""


#: how reports and exports name each backend: :data:`llamaforge.findings.labels.DISPLAY_NAMES`
BACKENDS: dict[str, Backend] = {
    "cpu": Backend("cpu", None, {}),
    "cuda": Backend("cuda", "CUDA", {"GGML_CUDA": "ON"}),
    "vulkan": Backend("vulkan", "Vulkan", {"GGML_VULKAN": "ON"}),
    "hip": Backend("hip", "ROCm", {"GGML_HIP": "ON"}, tested=False, note="needs ROCm; set --define AMDGPU_TARGETS=gfx1100"),
    "sycl": Backend("sycl", "SYCL", {"GGML_SYCL": "ON", "CMAKE_C_COMPILER": "icx", "CMAKE_CXX_COMPILER": "icpx"},
                    tested=False, note="needs oneAPI (source setvars.sh first)"),
    "metal": Backend("metal", "MTL", {"GGML_METAL": "ON"}, tested=False, note="macOS only"),
}


_CPU_VULKAN = re.compile(r"llvmpipe|lavapipe|swiftshader", re.I)


def is_cpu_vulkan_name(name: str) -> bool:
    """A Vulkan device that is really the CPU (Mesa lavapipe/llvmpipe, SwiftShader)."""
    return bool(_CPU_VULKAN.search(name or ""))


def get_backend(name: str) -> Backend:
    b = BACKENDS.get(name.strip().lower())
    if b is None:
        raise ConfigError(f"unknown backend {name!r}", f"use one of: {', '.join(BACKENDS)}")
    return b


def parse_backends(text: str | list[str]) -> list[Backend]:
    names = text if isinstance(text, list) else [t for t in str(text).split(",") if t.strip()]
    if not names:
        raise ConfigError("no backend given", f"pass --backends with some of: {', '.join(BACKENDS)}")
    out: list[Backend] = []
    for n in names:
        b = get_backend(n)
        if b not in out:
            out.append(b)
    return out


@dataclass
class FlagOptions:
    """User choices that become CMake flags (and so part of the build key)."""

    build_type: str = "Release"
    native: bool = True
    cuda_archs: str | None = None        # e.g. "90" or "86;89"; None = native if a GPU is visible
    cuda_fa_all_quants: bool = False
    defines: dict[str, str] = field(default_factory=dict)   # extra -DKEY=VALUE
    no_amx: bool = False                 # compile without AMX (gcc < 13 × AMX CPUs: see llamacpp/quirks.py)


def gpu_visible() -> bool:
    """True when an NVIDIA GPU is visible to this process (NVML), for CUDA ``native`` archs."""
    from ..gpu import device_count

    return device_count() > 0


def _vulkan_library() -> str | None:
    for pat in ("/usr/lib/x86_64-linux-gnu/libvulkan.so", "/usr/lib/*/libvulkan.so", "/usr/lib64/libvulkan.so",
                "/usr/lib/*/libvulkan.so.1", "/usr/lib64/libvulkan.so.1", "/usr/lib/libvulkan.so*"):
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    sdk = os.environ.get("VULKAN_SDK")
    if sdk:
        hits = sorted(glob.glob(os.path.join(sdk, "lib", "libvulkan.so*")))
        if hits:
            return hits[0]
    return None


def problems(backend: Backend, tc: Toolchain, opts: FlagOptions | None = None) -> list[tuple[str, str]]:
    """Why ``backend`` cannot be built here: a list of (problem, fix); empty when it can."""
    out: list[tuple[str, str]] = []
    if tc.cmake is None:
        out.append(("cmake >= 3.18 not found", "apt-get install cmake  (or: pip install cmake)"))
    if tc.cc is None or tc.cxx is None:
        out.append(("no C/C++ compiler", "apt-get install build-essential"))
    if backend.name == "cuda":
        if tc.nvcc is None:
            out.append(("nvcc (CUDA toolkit) not found",
                        "install the CUDA toolkit, or pass --nvcc /path/to/nvcc (or set CUDACXX)"))
        if opts is not None and not opts.cuda_archs and not gpu_visible():
            out.append(("no CUDA GPU visible, so CUDA architectures cannot be 'native'",
                        "pass --cuda-archs, e.g. 90 (H100/H200), 89 (RTX 40xx), 86 (RTX 30xx)"))
    if backend.name == "vulkan":
        if tc.glslc is None:
            out.append(("glslc (shader compiler) not found",
                        "apt-get install glslc  (or install the LunarG Vulkan SDK and set VULKAN_SDK)"))
        if tc.vulkan_headers is None:
            if any(not h.has_layer_settings for h in tc.vulkan_seen):
                old = ", ".join(f"{h.version} at {h.include}" for h in tc.vulkan_seen)
                out.append((f"Vulkan headers too old ({old}; llama.cpp needs vk::LayerSettingEXT, >= 1.3.261)",
                            "run scripts/fetch-vulkan-headers.sh (Debian 13 headers into ~/.cache/llamaforge/vulkan-sdk), "
                            "or pass --vulkan-include DIR / set VULKAN_SDK"))
            elif tc.vulkan_seen:
                out.append(("SPIRV-Headers not found next to the Vulkan headers",
                            "apt-get install spirv-headers, or run scripts/fetch-vulkan-headers.sh"))
            else:
                out.append(("Vulkan headers not found", "apt-get install libvulkan-dev, or run scripts/fetch-vulkan-headers.sh"))
        if _vulkan_library() is None:
            out.append(("Vulkan loader library (libvulkan) not found", "apt-get install libvulkan1 libvulkan-dev"))
    if backend.name == "hip" and not (shutil.which("hipcc") or os.path.isdir("/opt/rocm")):
        out.append(("ROCm (hipcc) not found", "install ROCm (https://rocm.docs.amd.com) and add /opt/rocm/bin to PATH"))
    if backend.name == "sycl" and not shutil.which("icpx"):
        out.append(("Intel oneAPI compiler (icpx) not found", "install oneAPI and `source /opt/intel/oneapi/setvars.sh`"))
    if backend.name == "metal" and sys.platform != "darwin":
        out.append(("Metal needs macOS", "build the metal backend on a Mac"))
    return out


#: ``option(LLAMA_BUILD_UI "…" ON)``: a tree whose web UI is built by default
_UI_ON = re.compile(r'option\(\s*LLAMA_BUILD_UI\s+"[^"]*"\s+ON\s*\)')


def source_flags(src: Path) -> dict[str, str]:
    """-D flags a source tree needs beyond the common ones: ``LLAMA_BUILD_UI=OFF`` where its CMakeLists.txt
    defaults it ON. Such commits (lcpp-0.3.33's 78d2f5246) run ``npm install`` (~1,000 packages from the npm
    registry, install scripts included) and a vite build inside the build when npm is on the PATH: code from
    the network, and 133 s of a 2-core cold build; a benchmark needs no web UI. Only where the default is ON,
    so the keys of every other commit's builds stay what they were."""
    try:
        text = (Path(src) / "CMakeLists.txt").read_text(errors="replace")
    except OSError:
        return {}
    return {"LLAMA_BUILD_UI": "OFF"} if _UI_ON.search(text) else {}


def cmake_flags(backend: Backend, tc: Toolchain, opts: FlagOptions) -> dict[str, str]:
    """The -D flags for a build (without commit/build-number, which come from the source)."""
    probs = problems(backend, tc, opts)
    if probs:
        what, fix = probs[0]
        raise ToolchainError(f"cannot build {backend.name}: {what}", fix)
    flags = dict(COMMON_FLAGS)
    flags["CMAKE_BUILD_TYPE"] = opts.build_type
    flags["GGML_NATIVE"] = "ON" if opts.native else "OFF"
    flags.update(backend.flags)
    if opts.no_amx:
        flags.update(NO_AMX_FLAGS)
    if backend.name == "cuda":
        assert tc.nvcc is not None
        flags["CMAKE_CUDA_COMPILER"] = tc.nvcc.path
        flags["CMAKE_CUDA_ARCHITECTURES"] = opts.cuda_archs or "native"
        if opts.cuda_fa_all_quants:
            flags["GGML_CUDA_FA_ALL_QUANTS"] = "ON"
    if backend.name == "vulkan":
        assert tc.glslc is not None and tc.vulkan_headers is not None
        flags["Vulkan_GLSLC_EXECUTABLE"] = tc.glslc.path
        flags["Vulkan_INCLUDE_DIR"] = str(tc.vulkan_headers.include)
        lib = _vulkan_library()
        if lib:
            flags["Vulkan_LIBRARY"] = lib
        if tc.vulkan_headers.cmake_prefix:
            flags["CMAKE_PREFIX_PATH"] = str(tc.vulkan_headers.cmake_prefix)
    flags.update(opts.defines)
    return flags
