"""Telemetry of one point, sampled while it is measured (by :class:`~llamaforge.bench.monitor.Monitor`).

GPU (NVML, per device): SM and memory clocks, power draw, temperature, utilisation, throttle
reasons, and other processes computing on the GPU. Host: 1-minute load average, CPU frequency,
and the CPU cores that processes *outside* the measured process tree and llamaforge itself used
(system busy time minus their own CPU time, per second of wall time) — the load average alone cannot tell the
server's own threads from someone else's compile.

:meth:`TelemetrySampler.summary` is what a point stores (``detail.telemetry``);
:func:`llamaforge.findings.conditions.flags` turns it into the terminal's and the report's marks.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import psutil

from ..gpu import Nvml, throttle_names

_GPU_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "gpu_util_pct", "mem_util_pct")


def _stats(values: list[float]) -> dict | None:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}


class TelemetrySampler:
    """Collects samples; ``nvml`` may be ``None`` or not ``ok`` (then GPU fields stay empty)."""

    def __init__(self, nvml: Nvml | None) -> None:
        self.nvml = nvml
        self.gpu: list[list[dict]] = []            # per sample, per device
        self.others: dict[int, dict] = {}          # pid → process seen on the GPU
        self.load1: list[float] = []
        self.cpu_mhz: list[float] = []
        self.other_cores: list[float] = []
        self._last: tuple[float, float, dict[int, float]] | None = None   # (wall, system busy s, tree cpu s)
        self.n = 0
        self._me = psutil.Process()

    def _busy(self) -> float:
        t = psutil.cpu_times()
        return sum(v for k, v in t._asdict().items() if k not in ("idle", "iowait", "guest", "guest_nice"))

    def _host(self, procs: list[psutil.Process]) -> None:
        with contextlib.suppress(OSError):
            self.load1.append(os.getloadavg()[0])
        with contextlib.suppress(Exception):
            f = psutil.cpu_freq()
            if f is not None and f.current:
                self.cpu_mhz.append(float(f.current))
        now, busy = time.monotonic(), self._busy()
        tree: dict[int, float] = {}
        for p in [*procs, self._me]:   # llamaforge itself (client, sampler) is not "someone else"
            with contextlib.suppress(psutil.Error):
                c = p.cpu_times()
                tree[p.pid] = c.user + c.system
        if self._last is not None:
            t0, busy0, tree0 = self._last
            dt = now - t0
            if dt > 0.05:
                own = sum(v - tree0.get(pid, 0.0) for pid, v in tree.items())
                self.other_cores.append(max(0.0, (busy - busy0 - own) / dt))
        self._last = (now, busy, tree)

    def _gpu(self, procs: list[psutil.Process]) -> None:
        nv = self.nvml
        if nv is None or not nv.ok:
            return
        self.gpu.append(nv.telemetry())
        mine = {p.pid for p in procs} | {os.getpid()}
        for q in nv.compute_processes():
            if q["pid"] not in mine:
                seen = self.others.setdefault(q["pid"], {**q})
                if q["used_mib"] is not None:
                    seen["used_mib"] = max(seen.get("used_mib") or 0.0, q["used_mib"])

    def sample(self, procs: list[psutil.Process]) -> None:
        self.n += 1
        self._host(procs)
        with contextlib.suppress(Exception):
            self._gpu(procs)

    def summary(self) -> dict:
        out: dict[str, Any] = {"samples": self.n, "host": {
            "load1": _stats(self.load1), "cpu_mhz": _stats(self.cpu_mhz),
            "other_cpu_cores": _stats(self.other_cores), "cpu_count": psutil.cpu_count()}}
        if self.gpu:
            devices = []
            for i in range(len(self.gpu[0])):
                per = [s[i] for s in self.gpu if i < len(s)]
                d: dict[str, Any] = {f: _stats([x.get(f) for x in per]) for f in _GPU_FIELDS}
                masks = [x["throttle_mask"] for x in per if x.get("throttle_mask") is not None]
                reasons: dict[str, int] = {}
                for m in masks:
                    for name in throttle_names(int(m)):
                        reasons[name] = reasons.get(name, 0) + 1
                d["throttle_reasons"] = {k: v / len(masks) for k, v in reasons.items()}  # share of samples
                devices.append(d)
            out["gpu"] = devices
            out["other_gpu_processes"] = list(self.others.values())
        return out


