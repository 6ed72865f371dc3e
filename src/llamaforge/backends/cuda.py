"""The CUDA backend: nvcc, the CUDA architectures, NVIDIA GPUs through NVML, the ggml-cuda switches."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, DoctorCheck, EnvKnob, FlagOptions, HostFacts, Problem
from .tools import Tool, find_exe

if TYPE_CHECKING:
    from .toolchain import Toolchain

_CUDA = ("cuda",)


def find_nvcc(explicit: str | None = None) -> Tool | None:
    cand = explicit or os.environ.get("CUDACXX")
    if not cand:
        cand = shutil.which("nvcc")
        if not cand and Path("/usr/local/cuda/bin/nvcc").exists():
            cand = "/usr/local/cuda/bin/nvcc"
    return find_exe("nvcc", cand, r"release (\d+\.\d+)") if cand else None


def gpu_visible() -> bool:
    """True when an NVIDIA GPU is visible to this process (NVML), for CUDA ``native`` archs."""
    from ..gpu import device_count  # start-up: NVML loads only when asked

    return device_count() > 0


def _cache_value(cmake_cache: str, name: str) -> str | None:
    m = re.search(rf"^{re.escape(name)}:\w+=(.*)$", cmake_cache, re.M)
    return m.group(1).strip() if m else None


class Cuda(Backend):
    name = "cuda"
    label = "CUDA"
    device_prefix = "CUDA"
    flags = MappingProxyType({"GGML_CUDA": "ON"})
    launcher_languages = ("CUDA",)
    demo = "if-available"
    rank = 0
    color = "#4c9a2a"
    no_device_fix = "check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
    env_knobs = (
        # ggml-cuda: runtime switches
        EnvKnob("GGML_CUDA_DISABLE_GRAPHS", _CUDA, "no CUDA graphs"),
        EnvKnob("GGML_CUDA_DISABLE_FUSION", _CUDA, "no operator fusion (value 1)"),
        EnvKnob("GGML_CUDA_GRAPH_OPT", _CUDA, "CUDA graph optimisation (value 1)"),
        EnvKnob("GGML_CUDA_PDL", _CUDA, "programmatic dependent launch"),
        EnvKnob("GGML_CUDA_ENABLE_UNIFIED_MEMORY", _CUDA, "unified memory (may spill to host RAM)"),
        EnvKnob("GGML_CUDA_NO_PINNED", _CUDA, "no pinned host buffers"),
        EnvKnob("GGML_CUDA_P2P", _CUDA, "peer-to-peer copies between GPUs"),
        # the CUDA runtime underneath llama.cpp
        EnvKnob("CUDA_VISIBLE_DEVICES", _CUDA, "which CUDA devices the CUDA runtime shows", "devices"),
    )

    def probe(self, tc: Toolchain, explicit: Mapping[str, str | None]) -> None:
        tc.nvcc = find_nvcc(explicit.get("nvcc"))

    def fingerprint(self, tc: Toolchain) -> dict[str, str]:
        return {"nvcc": tc.nvcc.version if tc.nvcc else "missing"}

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        out: list[Problem] = []
        if tc.nvcc is None:
            out.append(("nvcc (CUDA toolkit) not found",
                        "install the CUDA toolkit, or pass --nvcc /path/to/nvcc (or set CUDACXX)"))
        if opts is not None and not opts.cuda_archs and not gpu_visible():
            out.append(("no CUDA GPU visible, so CUDA architectures cannot be 'native'",
                        "pass --cuda-archs, e.g. 90 (H100/H200), 89 (RTX 40xx), 86 (RTX 30xx)"))
        return out

    def toolchain_flags(self, tc: Toolchain, opts: FlagOptions) -> dict[str, str]:
        assert tc.nvcc is not None
        flags = {"CMAKE_CUDA_COMPILER": tc.nvcc.path, "CMAKE_CUDA_ARCHITECTURES": opts.cuda_archs or "native"}
        if opts.cuda_fa_all_quants:
            flags["GGML_CUDA_FA_ALL_QUANTS"] = "ON"
        return flags

    def build_capabilities(self, log_text: str, cmake_cache: str) -> dict:
        caps = {"cuda_archs": _cache_value(cmake_cache, "CMAKE_CUDA_ARCHITECTURES")}
        native = _cache_value(cmake_cache, "CMAKE_CUDA_ARCHITECTURES_NATIVE")
        if native:
            caps["cuda_archs_native"] = native
        return caps

    def describe_capabilities(self, caps: Mapping) -> list[str]:
        return [f"archs: {caps['cuda_archs']}"] if caps.get("cuda_archs") else []

    def host_devices(self) -> list[str]:
        from ..gpu import device_names  # start-up: NVML loads only when asked

        return device_names()

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        gpus = self.host_devices()
        st = DoctorCheck(bool(gpus), gpus)
        if not gpus:
            st.reasons.append(("no NVIDIA GPU visible (NVML)",
                               "run on a machine with an NVIDIA GPU and driver; building still works with --cuda-archs"))
        return st


CUDA = Cuda()
