"""Find the tools a backend needs and fingerprint them.

CMake and ninja are found with scikit-build-core's program search (``cmake``/``ninja`` from PATH
or the PyPI wheels); compilers, ccache, nvcc and glslc from PATH (or explicit options /
``CUDACXX`` / ``VULKAN_SDK``). Vulkan headers are searched in: an explicit directory,
``$VULKAN_SDK/include``, ``~/.cache/llamaforge/vulkan-sdk/usr/include`` (what
``scripts/fetch-vulkan-headers.sh`` writes), ``/usr/include``. They are checked for
``vk::LayerSettingEXT`` — current llama.cpp needs it and Debian 12's 1.3.239 lacks it — before
CMake runs.

The fingerprint (versions of everything that can change the binaries) is part of the build key.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from scikit_build_core import program_search

from .. import proc
from ..paths import cache_root


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: str


def _version_of(exe: str, args: tuple[str, ...] = ("--version",), pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str:
    try:
        r = proc.run([exe, *args], timeout=20)
    except OSError:
        return "unknown"
    m = re.search(pattern, r.output)
    return m.group(1) if m else (r.output.strip().splitlines() or ["unknown"])[0][:80]


@functools.cache
def find_cmake() -> Tool | None:
    p = program_search.best_program(program_search.get_cmake_programs(), version=SpecifierSet(">=3.18"))
    return Tool("cmake", str(p.path), str(p.version)) if p and p.version else None


@functools.cache
def find_ninja() -> Tool | None:
    p = program_search.best_program(program_search.get_ninja_programs(), version=SpecifierSet(">=1.5"))
    return Tool("ninja", str(p.path), str(p.version)) if p and p.version else None


@functools.cache
def find_exe(name: str, explicit: str | None = None, version_pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> Tool | None:
    path = explicit or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        return None
    return Tool(name, path, _version_of(path, pattern=version_pattern))


def find_cc() -> Tool | None:
    return find_exe(os.environ.get("CC", "cc"))


def find_cxx() -> Tool | None:
    return find_exe(os.environ.get("CXX", "c++"))


def find_ccache() -> Tool | None:
    return find_exe("ccache")


def find_nvcc(explicit: str | None = None) -> Tool | None:
    cand = explicit or os.environ.get("CUDACXX")
    if not cand:
        cand = shutil.which("nvcc")
        if not cand and Path("/usr/local/cuda/bin/nvcc").exists():
            cand = "/usr/local/cuda/bin/nvcc"
    return find_exe("nvcc", cand, r"release (\d+\.\d+)") if cand else None


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


@dataclass
class Toolchain:
    """Everything a build may use, with versions. ``fingerprint(backend)`` enters the build key."""

    cmake: Tool | None
    ninja: Tool | None
    cc: Tool | None
    cxx: Tool | None
    ccache: Tool | None
    nvcc: Tool | None = None
    glslc: Tool | None = None
    vulkan_headers: VulkanHeaders | None = None
    vulkan_seen: list[VulkanHeaders] = field(default_factory=list)

    def fingerprint(self, backend: str) -> dict[str, str]:
        fp = {
            "cmake": self.cmake.version if self.cmake else "missing",
            "generator": f"ninja {self.ninja.version}" if self.ninja else "make",
            "cc": f"{Path(self.cc.path).name} {self.cc.version}" if self.cc else "missing",
            "cxx": f"{Path(self.cxx.path).name} {self.cxx.version}" if self.cxx else "missing",
        }
        if backend == "cuda":
            fp["nvcc"] = self.nvcc.version if self.nvcc else "missing"
        if backend == "vulkan":
            fp["glslc"] = self.glslc.version if self.glslc else "missing"
            fp["vulkan_headers"] = self.vulkan_headers.version if self.vulkan_headers else "missing"
        return fp

    def to_dict(self) -> dict:
        d = {k: (asdict(v) if isinstance(v, Tool) else None) for k, v in
             (("cmake", self.cmake), ("ninja", self.ninja), ("cc", self.cc), ("cxx", self.cxx),
              ("ccache", self.ccache), ("nvcc", self.nvcc), ("glslc", self.glslc))}
        if self.vulkan_headers:
            d["vulkan_headers"] = {"include": str(self.vulkan_headers.include), "version": self.vulkan_headers.version}
        return d


def discover(*, nvcc: str | None = None, glslc: str | None = None, vulkan_include: str | None = None,
             backends: tuple[str, ...] = ("cpu", "cuda", "vulkan")) -> Toolchain:
    tc = Toolchain(find_cmake(), find_ninja(), find_cc(), find_cxx(), find_ccache())
    if "cuda" in backends:
        tc.nvcc = find_nvcc(nvcc)
    if "vulkan" in backends:
        tc.glslc = find_glslc(glslc)
        tc.vulkan_headers, tc.vulkan_seen = find_vulkan_headers(vulkan_include)
    return tc
