"""Find the tools builds need and fingerprint them.

CMake and ninja are found with scikit-build-core's program search (``cmake``/``ninja`` from PATH or the
PyPI wheels); compilers and ccache from PATH (``CC``/``CXX``). Each backend finds its own tools
(:meth:`~llamaforge.backends.base.Backend.probe`: nvcc for cuda, glslc and the Vulkan headers for vulkan)
and names their versions (:meth:`~llamaforge.backends.base.Backend.fingerprint`).

The fingerprint (versions of everything that can change the binaries) is part of the build key.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from scikit_build_core import program_search

from . import registry
from .tools import Tool, find_exe

if TYPE_CHECKING:
    from .vulkan import VulkanHeaders


@functools.cache
def find_cmake() -> Tool | None:
    p = program_search.best_program(program_search.get_cmake_programs(), version=SpecifierSet(">=3.18"))
    return Tool("cmake", str(p.path), str(p.version)) if p and p.version else None


@functools.cache
def find_ninja() -> Tool | None:
    p = program_search.best_program(program_search.get_ninja_programs(), version=SpecifierSet(">=1.5"))
    return Tool("ninja", str(p.path), str(p.version)) if p and p.version else None


def find_cc() -> Tool | None:
    return find_exe(os.environ.get("CC", "cc"))


def find_cxx() -> Tool | None:
    return find_exe(os.environ.get("CXX", "c++"))


def find_ccache() -> Tool | None:
    return find_exe("ccache")


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
        fp.update(registry.get(backend).fingerprint(self))
        return fp

    def to_dict(self) -> dict:
        d = {k: (asdict(v) if isinstance(v, Tool) else None) for k, v in
             (("cmake", self.cmake), ("ninja", self.ninja), ("cc", self.cc), ("cxx", self.cxx),
              ("ccache", self.ccache), ("nvcc", self.nvcc), ("glslc", self.glslc))}
        if self.vulkan_headers:
            d["vulkan_headers"] = {"include": str(self.vulkan_headers.include), "version": self.vulkan_headers.version}
        return d


def discover(*, nvcc: str | None = None, glslc: str | None = None, vulkan_include: str | None = None,
             backends: tuple[str, ...] | None = None) -> Toolchain:
    """The common tools, and those of ``backends`` (default: every backend) each found by its backend."""
    tc = Toolchain(find_cmake(), find_ninja(), find_cc(), find_cxx(), find_ccache())
    explicit = {"nvcc": nvcc, "glslc": glslc, "vulkan_include": vulkan_include}
    for name in registry.names() if backends is None else backends:
        registry.get(name).probe(tc, explicit)
    return tc
