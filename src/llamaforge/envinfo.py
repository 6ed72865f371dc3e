"""The environment a run was measured in, stored with every run (``runs.env_json``).

GPU name / driver / clocks / memory and bus width / theoretical memory bandwidth via NVML
(:func:`llamaforge.gpu.inventory`) when there is an NVIDIA driver; CUDA and Vulkan versions from ``nvidia-smi`` / ``vulkaninfo --summary``
when present; CPU model, cores, RAM and its measured bandwidth, OS, Python. Everything missing is
simply absent. The shape is :class:`llamaforge.records.Environment`.

Host RAM bandwidth (``ram_bandwidth_gbps``) is *measured*, because nothing unprivileged reports it
(DMI needs root, and a container hides it): every allowed core copies its share of a buffer much
larger than any cache, the best of a few rounds is kept, and read + written bytes are counted (as
STREAM's Copy does). It is what a CPU backend can stream, so it is the CPU's bound in the roofline.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import psutil

from . import proc
from .gpu import inventory
from .machine import current as current_machine


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


COPY_MIB = 256        # per round (source + destination: 512 MiB), split over the threads: beyond the caches
COPY_ROUNDS = 3


@functools.cache
def ram_bandwidth_gbps(threads: int | None = None, mib: int = COPY_MIB, rounds: int = COPY_ROUNDS) -> float | None:
    """Measured host RAM copy bandwidth, GB/s (read + written bytes); None if it fails. Measured once per
    process (a machine's RAM does not change between the runs of one command).

    numpy's copy releases the GIL, so ``threads`` (default: the allowed cores) copy in parallel; with
    several cores one thread is measured too and the better kept (a busy host can make threads slower).
    Both use the same two buffers, allocated and faulted in once."""
    n = max(1, threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
    size = max(n, mib * 2**20 // n * n)
    try:
        src = np.ones(size, dtype=np.uint8)
        dst = np.empty_like(src)
    except (MemoryError, RuntimeError):
        return None
    one = _copy_gbps(src, dst, 1, rounds) if n > 1 and threads is None else None
    many = _copy_gbps(src, dst, n, rounds)
    best = max((v for v in (one, many) if v), default=None)
    return round(best, 1) if best else None


def _copy_gbps(src: np.ndarray, dst: np.ndarray, n: int, rounds: int) -> float | None:
    """The best of ``rounds`` copies of ``src`` into ``dst``, split into ``n`` parts copied by ``n`` threads
    in parallel (the first round of the first call also faults ``dst`` in, so it rarely counts)."""
    per = src.size // n
    parts = [(dst[i * per:(i + 1) * per], src[i * per:(i + 1) * per]) for i in range(n)]
    best = 0.0
    try:
        with ThreadPoolExecutor(n) as pool:
            for _ in range(rounds):
                t0 = time.perf_counter()
                list(pool.map(lambda d_s: np.copyto(*d_s), parts))
                dt = time.perf_counter() - t0
                best = max(best, 2 * per * n / dt / 1e9 if dt > 0 else 0.0)
    except (MemoryError, RuntimeError):
        return None
    return best if best > 0 else None


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
    """A JSON-able description of this machine (takes a second or two: the RAM bandwidth is measured)."""
    vm = psutil.virtual_memory()
    gpus, driver, cuda = inventory()
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
        "ram_bandwidth_gbps": ram_bandwidth_gbps(),
        "gpus": gpus,
        "nvidia_driver": driver,
        "cuda_driver": cuda,
        "machine_identity": current_machine().to_json(),   # boot id, machine-id, GPU UUIDs → short id
    }
    env.update(_tool_versions())
    try:
        from . import __version__

        env["llamaforge"] = __version__
    except ImportError:  # pragma: no cover
        pass
    return env
