"""Memory and telemetry sampling during a point: a background thread that polls every ``interval`` seconds.

* Peak RSS of a process tree (the server and its children) via psutil, and — what answers "how much
  RAM do I need" — its anonymous and file-backed parts separately (Linux ``/proc/PID/status``
  ``RssAnon`` / ``RssFile``, peak over the point). RSS counts the model's mmapped file pages, which
  the kernel can drop and re-read; anonymous memory (buffers, KV cache, copied weights) it cannot.
* VRAM via NVML (:mod:`llamaforge.gpu`): per-device used/total (peak over the point) and this
  process tree's own use. Without a GPU or driver everything VRAM-related stays ``None``.
* Telemetry (:mod:`llamaforge.bench.telemetry`): GPU clocks, power, temperature, utilisation,
  throttle reasons, other processes on the GPU; host load average, CPU frequency and the CPU time
  other processes took while the point ran.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import psutil

from ..gpu import Nvml, free_vram_mib
from ..store import Point
from .telemetry import TelemetrySampler

MiB = 1024 * 1024

__all__ = ["Monitor", "MonitorResult", "Nvml", "free_vram_mib", "proc_rss_split"]


def proc_rss_split(pid: int) -> tuple[int, int] | None:
    """(RssAnon, RssFile) of a process in bytes from ``/proc/PID/status`` (Linux), or ``None``."""
    try:
        text = open(f"/proc/{pid}/status", encoding="ascii", errors="replace").read()  # noqa: SIM115
    except OSError:
        return None
    vals: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            parts = rest.split()
            if parts and parts[0].isdigit():
                vals[key] = int(parts[0]) * 1024  # the kernel writes kB
    if "RssAnon" not in vals or "RssFile" not in vals:
        return None
    return vals["RssAnon"], vals["RssFile"]


@dataclass
class MonitorResult:
    rss_peak_mib: float | None = None
    rss_anon_peak_mib: float | None = None   # anonymous resident memory (peak of the tree's sum)
    rss_file_peak_mib: float | None = None   # file-backed resident memory: mmapped model pages, libraries
    vram_used_mib: float | None = None     # peak device-used over the point (sum over devices)
    vram_total_mib: float | None = None
    vram_self_mib: float | None = None     # peak of the process tree's own use
    samples: int = 0
    per_device_peak_mib: list[float] = field(default_factory=list)
    telemetry: dict | None = None            # TelemetrySampler.summary()

    def host_mem(self) -> dict | None:
        """What goes into a point's ``detail.host_mem``."""
        if self.rss_anon_peak_mib is None and self.rss_file_peak_mib is None:
            return None
        return {"rss_anon_peak_mib": self.rss_anon_peak_mib, "rss_file_peak_mib": self.rss_file_peak_mib,
                "source": "/proc/PID/status RssAnon/RssFile, summed over the process tree, peak over the point"}


class Monitor(threading.Thread):
    """``with Monitor(pid) as m: ...; m.result`` — samples until the block ends."""

    def __init__(self, pid: int, interval: float = 0.25, use_nvml: bool = True) -> None:
        super().__init__(daemon=True, name=f"monitor-{pid}")
        self.pid = pid
        self.interval = interval
        self._stop_evt = threading.Event()
        self.result = MonitorResult()
        self._nvml = Nvml() if use_nvml else None
        self.telemetry = TelemetrySampler(self._nvml)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> None:
        procs = self._tree()
        rss = anon = file = 0
        split_ok = bool(procs)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
            sp = proc_rss_split(p.pid)
            if sp is None:
                split_ok = False
            else:
                anon, file = anon + sp[0], file + sp[1]
        r = self.result
        if procs and rss:
            r.rss_peak_mib = max(r.rss_peak_mib or 0.0, rss / MiB)
        if split_ok and (anon or file):
            r.rss_anon_peak_mib = max(r.rss_anon_peak_mib or 0.0, anon / MiB)
            r.rss_file_peak_mib = max(r.rss_file_peak_mib or 0.0, file / MiB)
        with contextlib.suppress(Exception):
            self.telemetry.sample(procs)
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
        self.result.telemetry = self.telemetry.summary()
        if self._nvml is not None:
            self._nvml.close()
        return self.result

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def store_monitor(point: Point, mres: MonitorResult) -> None:
    """Memory, host-memory split and telemetry of a Monitor into a point (``detail``: host_mem, telemetry)."""
    point.rss_peak_mib = mres.rss_peak_mib
    point.vram_used_mib = mres.vram_used_mib
    point.vram_total_mib = mres.vram_total_mib
    point.vram_self_mib = mres.vram_self_mib
    if mres.host_mem() is not None:
        point.detail.host_mem = mres.host_mem()
    if mres.telemetry is not None:
        point.detail.telemetry = mres.telemetry
