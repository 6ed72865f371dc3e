"""Memory sampling during a point: a background thread that polls every ``interval`` seconds.

* Peak RSS of a process tree (the server and its children) via psutil.
* VRAM via NVML (``pynvml``): per-device used/total (peak over the point) and this process
  tree's own use (``nvmlDeviceGetComputeRunningProcesses``). Without a GPU or driver everything
  VRAM-related stays ``None`` — never invented.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

import psutil

MiB = 1024 * 1024


class Nvml:
    """A tiny NVML wrapper that is simply unavailable when there is no NVIDIA driver."""

    def __init__(self) -> None:
        self.ok = False
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.ok = bool(self.handles)
        except Exception:  # noqa: BLE001 - no library, no driver, no device: all mean "no NVML"
            self.ok = False

    def memory(self) -> list[tuple[float, float, float]]:
        """Per device (used, total, free) in MiB."""
        out = []
        for h in self.handles:
            m = self.nv.nvmlDeviceGetMemoryInfo(h)
            out.append((m.used / MiB, m.total / MiB, m.free / MiB))
        return out

    def process_used(self, pids: set[int]) -> float | None:
        """MiB used on all devices by the given pids (``None`` if the driver does not say)."""
        total = 0.0
        seen = False
        for h in self.handles:
            try:
                procs = self.nv.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:  # noqa: BLE001
                continue
            for p in procs:
                if p.pid in pids and p.usedGpuMemory is not None:
                    total += p.usedGpuMemory / MiB
                    seen = True
        return total if seen else None

    def close(self) -> None:
        if self.ok:
            with contextlib.suppress(Exception):
                self.nv.nvmlShutdown()


def free_vram_mib() -> list[float] | None:
    """Free memory per NVIDIA device (MiB), or ``None`` without NVML."""
    n = Nvml()
    try:
        return [free for _u, _t, free in n.memory()] if n.ok else None
    finally:
        n.close()


@dataclass
class MonitorResult:
    rss_peak_mib: float | None = None
    vram_used_mib: float | None = None     # peak device-used over the point (sum over devices)
    vram_total_mib: float | None = None
    vram_self_mib: float | None = None     # peak of the process tree's own use
    samples: int = 0
    per_device_peak_mib: list[float] = field(default_factory=list)


class Monitor(threading.Thread):
    """``with Monitor(pid) as m: ...; m.result`` — samples until the block ends."""

    def __init__(self, pid: int, interval: float = 0.25, use_nvml: bool = True) -> None:
        super().__init__(daemon=True, name=f"monitor-{pid}")
        self.pid = pid
        self.interval = interval
        self._stop_evt = threading.Event()
        self.result = MonitorResult()
        self._nvml = Nvml() if use_nvml else None

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> None:
        procs = self._tree()
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
        r = self.result
        if procs and rss:
            r.rss_peak_mib = max(r.rss_peak_mib or 0.0, rss / MiB)
        nv = self._nvml
        if nv is not None and nv.ok:
            with contextlib.suppress(Exception):
                mem = nv.memory()
                used = sum(u for u, _t, _f in mem)
                r.vram_used_mib = max(r.vram_used_mib or 0.0, used)
                r.vram_total_mib = sum(t for _u, t, _f in mem)
                if not r.per_device_peak_mib:
                    r.per_device_peak_mib = [0.0] * len(mem)
                r.per_device_peak_mib = [max(a, u) for a, (u, _t, _f) in zip(r.per_device_peak_mib, mem, strict=False)]
                own = nv.process_used({p.pid for p in procs})
                if own is not None:
                    r.vram_self_mib = max(r.vram_self_mib or 0.0, own)
        r.samples += 1

    def run(self) -> None:
        while not self._stop_evt.is_set():
            self.sample()
            self._stop_evt.wait(self.interval)

    def stop(self) -> MonitorResult:
        self._stop_evt.set()
        if self.is_alive():
            self.join(timeout=5)
        if self._nvml is not None:
            self._nvml.close()
        return self.result

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
