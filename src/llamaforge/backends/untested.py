"""Backends llamaforge declares but has never built or run on real hardware: ``hip`` (AMD ROCm), ``sycl``
(Intel oneAPI) and ``metal`` (Apple). Their CMake flags follow llama.cpp's build docs; doctor names what
is missing here and labels each "untested on real hardware"."""

from __future__ import annotations

import os
import shutil
import sys
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, EnvKnob, FlagOptions, Problem
from .tools import Tool, find_exe

if TYPE_CHECKING:
    from .toolchain import Toolchain

_HIP = ("hip",)
#: the oldest ROCm/HIP llama.cpp's HIP backend accepts (``ggml/src/ggml-hip/CMakeLists.txt``)
MIN_HIP = (6, 1)


def find_hipcc() -> Tool | None:
    cand = shutil.which("hipcc") or ("/opt/rocm/bin/hipcc" if os.path.exists("/opt/rocm/bin/hipcc") else None)
    return find_exe("hipcc", cand, r"HIP version: (\d+\.\d+(?:\.\d+)?)") if cand else None


def hip_version_problem(version: str) -> Problem | None:
    """(problem, fix) when ``version`` (hipcc's "HIP version") is older than :data:`MIN_HIP`."""
    try:
        got = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return None
    if got >= MIN_HIP:
        return None
    need = ".".join(map(str, MIN_HIP))
    return (f"hipcc is ROCm/HIP {version}; llama.cpp's HIP backend needs >= {need} (Debian 12's hipcc 5.2.3 is too old)",
            f"install ROCm >= {need} from AMD's repository (https://rocm.docs.amd.com) and put /opt/rocm/bin first on PATH")


class Hip(Backend):
    name = "hip"
    label = "ROCm"
    device_prefix = "ROCm"
    flags = MappingProxyType({"GGML_HIP": "ON"})
    tested = False
    rank = 10
    note = "needs ROCm; set --define AMDGPU_TARGETS=gfx1100"
    env_knobs = (
        EnvKnob("HIP_VISIBLE_DEVICES", _HIP, "which ROCm devices HIP shows", "devices"),
        EnvKnob("ROCR_VISIBLE_DEVICES", _HIP, "which ROCm devices the ROCr runtime shows", "devices"),
        EnvKnob("ROCBLAS_USE_HIPBLASLT", _HIP, "hipBLASLt on (1) or off (0) under rocBLAS"),
    )

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        hipcc = find_hipcc()
        if hipcc is None:
            return [("ROCm (hipcc) not found", "install ROCm (https://rocm.docs.amd.com) and add /opt/rocm/bin to PATH")]
        old = hip_version_problem(hipcc.version)
        return [old] if old else []


class Sycl(Backend):
    name = "sycl"
    label = "SYCL"
    device_prefix = "SYCL"
    flags = MappingProxyType({"GGML_SYCL": "ON", "CMAKE_C_COMPILER": "icx", "CMAKE_CXX_COMPILER": "icpx"})
    tested = False
    rank = 30
    note = "needs oneAPI (source setvars.sh first)"

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        if not shutil.which("icpx"):
            return [("Intel oneAPI compiler (icpx) not found", "install oneAPI and `source /opt/intel/oneapi/setvars.sh`")]
        return []


class Metal(Backend):
    name = "metal"
    label = "Metal"
    device_prefix = "MTL"
    flags = MappingProxyType({"GGML_METAL": "ON"})
    tested = False
    rank = 20
    note = "macOS only"

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        if sys.platform != "darwin":
            return [("Metal needs macOS", "build the metal backend on a Mac")]
        return []


HIP, SYCL, METAL = Hip(), Sycl(), Metal()
