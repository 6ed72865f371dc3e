"""``llamaforge doctor``: which backends this machine can build and run, and why not (with fixes)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field

from .. import proc
from .backends import BACKENDS, FlagOptions, problems
from .hostcpu import has_amx, native_cpu
from .toolchain import Toolchain, discover


@dataclass
class BackendStatus:
    backend: str
    can_build: bool
    can_run: bool | None           # None = unknown / not checked (untested backends)
    devices: list[str] = field(default_factory=list)
    reasons: list[tuple[str, str]] = field(default_factory=list)   # (problem, fix)
    tested: bool = True


def vulkan_devices() -> list[dict[str, str]]:
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


def nvidia_gpus() -> list[str]:
    from ..gpu import device_names

    return device_names()


def gcc_major(cc_path: str | None) -> int | None:
    """The major version of a GCC compiler (None for clang/others or when it cannot be run)."""
    if not cc_path:
        return None
    r = proc.run([cc_path, "--version"], timeout=30)
    return parse_gcc_major(r.output)


def parse_gcc_major(version_output: str) -> int | None:
    """``cc (Debian 12.2.0-14+deb12u1) 12.2.0 … Free Software Foundation`` → 12; clang → None."""
    first = (version_output.splitlines() or [""])[0]
    if "clang" in version_output.lower() or "Free Software Foundation" not in version_output:
        return None
    m = re.search(r"(\d+)\.\d+(?:\.\d+)?\s*$", first)
    return int(m.group(1)) if m else None


def amx_gcc_warning(cpu: dict, gcc: int | None) -> tuple[str, str] | None:
    """(problem, fix) when an AMX CPU meets GCC < 13: builds made so crashed on every CPU load
    (GP fault at ldtilecfg in ggml_backend_amx_mul_mat; see llamacpp/quirks.py)."""
    if gcc is None or gcc >= 13 or not has_amx(cpu):
        return None
    return (f"AMX CPU with gcc {gcc}: llama.cpp's AMX path crashed on load in gcc-12 builds",
            "llamaforge detects it in the smoke run and records the no-repack quirk; or build with --no-amx, "
            "or use gcc >= 13 (CC/CXX)")


def check(tc: Toolchain | None = None) -> list[BackendStatus]:
    tc = tc or discover()
    out = []
    for name, b in BACKENDS.items():
        reasons = problems(b, tc, FlagOptions(cuda_archs="x"))   # archs: judged under "run" below
        st = BackendStatus(name, not reasons, None, reasons=list(reasons), tested=b.tested)
        if name == "cpu":
            st.can_run = True
            warn = amx_gcc_warning(native_cpu(), gcc_major(tc.cc.path if tc.cc else None))
            if warn:
                st.reasons.append(warn)
        elif name == "cuda":
            gpus = nvidia_gpus()
            st.devices = gpus
            st.can_run = bool(gpus)
            if not gpus:
                st.reasons.append(("no NVIDIA GPU visible (NVML)",
                                   "run on a machine with an NVIDIA GPU and driver; building still works with --cuda-archs"))
        elif name == "vulkan":
            devs = vulkan_devices()
            st.devices = [f"{d['name']} [{d['type'].replace('PHYSICAL_DEVICE_TYPE_', '').lower()}]" for d in devs]
            st.can_run = bool(devs)
            if not devs:
                st.reasons.append(("no Vulkan device (vulkaninfo)",
                                   "apt-get install mesa-vulkan-drivers vulkan-tools (lavapipe), or a GPU driver"))
            elif all("CPU" in d["type"] for d in devs):
                st.reasons.append(("only a CPU Vulkan device (lavapipe): slow, for tests",
                                   "llamaforge runs it with GGML_VK_VISIBLE_DEVICES=0 automatically"))
        else:
            st.reasons.append(("declared but untested by llamaforge", b.note or "see llama.cpp's build docs"))
        out.append(st)
    return out
