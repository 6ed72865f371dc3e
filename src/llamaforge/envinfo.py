"""The environment a run was measured in, stored with every run (``runs.env_json``).

GPU name / driver / clocks / memory and bus width / theoretical memory bandwidth via NVML when
there is an NVIDIA driver; CUDA and Vulkan versions from ``nvidia-smi`` / ``vulkaninfo --summary``
when present; CPU model, cores, RAM, OS, Python. Everything missing is simply absent.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import sys
from typing import Any

import psutil

from . import proc


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _nvml_gpus() -> tuple[list[dict], str | None, str | None]:
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver
        return [], None, None
    gpus: list[dict] = []
    driver = cuda = None
    try:
        with contextlib.suppress(Exception):
            driver = nv.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        with contextlib.suppress(Exception):
            v = nv.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            g: dict[str, Any] = {"index": i}
            with contextlib.suppress(Exception):
                name = nv.nvmlDeviceGetName(h)
                g["name"] = name.decode() if isinstance(name, bytes) else name
            with contextlib.suppress(Exception):
                m = nv.nvmlDeviceGetMemoryInfo(h)
                g["memory_total_mib"] = m.total // (1024 * 1024)
                g["memory_free_mib"] = m.free // (1024 * 1024)
            for key, clock in (("sm", nv.NVML_CLOCK_SM), ("mem", nv.NVML_CLOCK_MEM)):
                with contextlib.suppress(Exception):
                    g[f"clock_{key}_mhz"] = nv.nvmlDeviceGetClockInfo(h, clock)
                with contextlib.suppress(Exception):
                    g[f"clock_{key}_max_mhz"] = nv.nvmlDeviceGetMaxClockInfo(h, clock)
            with contextlib.suppress(Exception):
                g["memory_bus_width_bits"] = nv.nvmlDeviceGetMemoryBusWidth(h)
            if "clock_mem_max_mhz" in g and "memory_bus_width_bits" in g:
                # DDR: two transfers per clock → bytes/s = clock × 2 × bus width / 8
                g["memory_bandwidth_gbps"] = round(g["clock_mem_max_mhz"] * 1e6 * 2 * g["memory_bus_width_bits"] / 8 / 1e9, 1)
            with contextlib.suppress(Exception):
                g["power_limit_w"] = nv.nvmlDeviceGetPowerManagementLimit(h) / 1000
            with contextlib.suppress(Exception):
                g["temperature_c"] = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            with contextlib.suppress(Exception):
                cc = nv.nvmlDeviceGetCudaComputeCapability(h)
                g["compute_capability"] = f"{cc[0]}.{cc[1]}"
            gpus.append(g)
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    return gpus, driver, cuda


def _tool_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    if shutil.which("nvidia-smi"):
        r = proc.run(["nvidia-smi"], timeout=20)
        m = re.search(r"CUDA Version:\s*([\d.]+)", r.output)
        if m:
            out["cuda_driver_api"] = m.group(1)
    if shutil.which("nvcc"):
        r = proc.run(["nvcc", "--version"], timeout=20)
        m = re.search(r"release ([\d.]+)", r.output)
        if m:
            out["nvcc"] = m.group(1)
    if shutil.which("vulkaninfo"):
        r = proc.run(["vulkaninfo", "--summary"], timeout=30)
        m = re.search(r"Vulkan Instance Version:\s*([\d.]+)", r.output)
        if m:
            out["vulkan_instance"] = m.group(1)
        devs = re.findall(r"deviceName\s*=\s*(.+)", r.output)
        if devs:
            out["vulkan_devices"] = "; ".join(d.strip() for d in devs)
        drv = re.findall(r"driverInfo\s*=\s*(.+)", r.output)
        if drv:
            out["vulkan_driver_info"] = "; ".join(d.strip() for d in drv)
    return out


def collect_env() -> dict:
    """A JSON-able description of this machine (takes ~a second)."""
    vm = psutil.virtual_memory()
    gpus, driver, cuda = _nvml_gpus()
    env: dict[str, Any] = {
        "host": platform.node(),
        # a stable name for this machine across runs (fleet hosts set it from fleet.toml's machine = "...")
        "machine": os.environ.get("LLAMAFORGE_MACHINE") or platform.node(),
        "os": platform.platform(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "cpu_model": _cpu_model(),
        "cpu_cores_logical": psutil.cpu_count(logical=True),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_total_mib": vm.total // (1024 * 1024),
        "ram_available_mib": vm.available // (1024 * 1024),
        "gpus": gpus,
        "nvidia_driver": driver,
        "cuda_driver": cuda,
    }
    env.update(_tool_versions())
    try:
        from . import __version__

        env["llamaforge"] = __version__
    except ImportError:  # pragma: no cover
        pass
    return env
