"""The one home for NVML (``pynvml`` from nvidia-ml-py): devices, memory, compute processes, telemetry.

Everything here is simply unavailable without an NVIDIA driver (``Nvml().ok`` is False, the
helpers return ``None`` / empty lists): nothing is ever invented. Every NVML query is wrapped on
its own, because drivers and GPUs differ in what they support (a query that raises
``NVMLError_NotSupported`` leaves that one field ``None``).

``Nvml(module=fake)`` takes any object with pynvml's API; the unit tests use a small fake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

MiB = 1024 * 1024

#: pynvml's clocks-event (throttle) reason bits, by the constant's name (their values are stable)
THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
#: the reasons that mean "this point ran slower than the card can" (idle and settings do not)
SLOWDOWN_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")


def throttle_names(mask: int) -> list[str]:
    return [name for name, bit in THROTTLE_REASONS.items() if mask & bit]


def _load_pynvml() -> Any:
    import pynvml

    return pynvml


class Nvml:
    """An initialised NVML session (``close()`` it), or ``ok = False`` when there is none."""

    def __init__(self, module: Any = None) -> None:
        self.ok = False
        self.handles: list[Any] = []
        self.nv: Any = None
        try:
            nv = module if module is not None else _load_pynvml()
            nv.nvmlInit()
            self.nv = nv
            self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
            self.ok = bool(self.handles)
        except Exception:  # noqa: BLE001 - no library, no driver, no device: all mean "no NVML"
            self.ok = False

    def close(self) -> None:
        if self.nv is not None:
            with contextlib.suppress(Exception):
                self.nv.nvmlShutdown()
            self.nv = None

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _q(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - not supported on this GPU/driver: leave it unknown
            return None

    def _texts(self, query: str) -> list[str | None]:
        """``nvmlDevice<query>(handle)`` of every device as text (NVML may answer bytes); None where unknown."""
        out: list[str | None] = []
        for h in self.handles:
            v = self._q(lambda h=h: getattr(self.nv, query)(h))
            out.append(None if v is None else v.decode() if isinstance(v, bytes) else str(v))
        return out

    def names(self) -> list[str]:
        return [str(n) for n in self._texts("nvmlDeviceGetName")]

    def uuids(self) -> list[str]:
        """Each device's UUID (``GPU-…``; stable across reboots, different on another card); unknown ones left out."""
        return [u for u in self._texts("nvmlDeviceGetUUID") if u]

    def memory(self) -> list[tuple[float, float, float]]:
        """Per device (used, total, free) in MiB."""
        out = []
        for h in self.handles:
            m = self.nv.nvmlDeviceGetMemoryInfo(h)
            out.append((m.used / MiB, m.total / MiB, m.free / MiB))
        return out

    def compute_processes(self) -> list[dict]:
        """Every process computing on any device: ``{"device", "pid", "used_mib"}``."""
        out = []
        for i, h in enumerate(self.handles):
            procs = self._q(lambda h=h: self.nv.nvmlDeviceGetComputeRunningProcesses(h)) or []
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                out.append({"device": i, "pid": int(p.pid), "used_mib": used / MiB if used is not None else None})
        return out

    def process_used(self, pids: set[int]) -> float | None:
        """MiB used on all devices by the given pids (``None`` if the driver does not say)."""
        mine = [p["used_mib"] for p in self.compute_processes() if p["pid"] in pids and p["used_mib"] is not None]
        return sum(mine) if mine else None

    def telemetry(self) -> list[dict]:
        """One sample per device: clocks (MHz), power (W), temperature (°C), utilisation (%), throttle mask."""
        nv = self.nv
        out = []
        for h in self.handles:
            util = self._q(lambda h=h: nv.nvmlDeviceGetUtilizationRates(h))
            power = self._q(lambda h=h: nv.nvmlDeviceGetPowerUsage(h))
            out.append({
                "sm_clock_mhz": self._q(lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                "mem_clock_mhz": self._q(lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                "power_w": power / 1000 if power is not None else None,
                "temperature_c": self._q(lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                "gpu_util_pct": getattr(util, "gpu", None),
                "mem_util_pct": getattr(util, "memory", None),
                "throttle_mask": self._q(lambda h=h: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
            })
        return out

    def versions(self) -> tuple[str | None, str | None]:
        """(driver version, CUDA driver API version ``12.4``), each None where unknown."""
        if self.nv is None:
            return None, None
        driver = self._q(lambda: self.nv.nvmlSystemGetDriverVersion())
        v = self._q(lambda: self.nv.nvmlSystemGetCudaDriverVersion_v2())
        cuda = f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else None
        return (driver.decode() if isinstance(driver, bytes) else driver), cuda

    def inventory(self) -> list[dict]:
        """Per device, what a run's environment records (:class:`llamaforge.records.GpuInfo` fields):
        name, memory, current and max clocks, bus width, theoretical memory bandwidth, power limit,
        temperature, compute capability. Unknown fields are absent."""
        nv = self.nv
        out: list[dict] = []
        for i, h in enumerate(self.handles):
            g: dict[str, Any] = {"index": i}
            name = self._q(lambda h=h: nv.nvmlDeviceGetName(h))
            m = self._q(lambda h=h: nv.nvmlDeviceGetMemoryInfo(h))
            cc = self._q(lambda h=h: nv.nvmlDeviceGetCudaComputeCapability(h))
            power = self._q(lambda h=h: nv.nvmlDeviceGetPowerManagementLimit(h))
            vals = {
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_total_mib": m.total // MiB if m is not None else None,
                "memory_free_mib": m.free // MiB if m is not None else None,
                "clock_sm_mhz": self._q(lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                "clock_sm_max_mhz": self._q(lambda h=h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
                "clock_mem_mhz": self._q(lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                "clock_mem_max_mhz": self._q(lambda h=h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
                "memory_bus_width_bits": self._q(lambda h=h: nv.nvmlDeviceGetMemoryBusWidth(h)),
                "power_limit_w": power / 1000 if power is not None else None,
                "temperature_c": self._q(lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
            }
            g.update({k: v for k, v in vals.items() if v is not None})
            if "clock_mem_max_mhz" in g and "memory_bus_width_bits" in g:
                # DDR: two transfers per clock → bytes/s = clock × 2 × bus width / 8
                g["memory_bandwidth_gbps"] = round(g["clock_mem_max_mhz"] * 1e6 * 2 * g["memory_bus_width_bits"] / 8 / 1e9, 1)
            out.append(g)
        return out


def inventory() -> tuple[list[dict], str | None, str | None]:
    """(GPUs as :meth:`Nvml.inventory` describes them, driver version, CUDA driver version); empty without NVML."""
    with Nvml() as n:
        return n.inventory(), *n.versions()


def device_count() -> int:
    with Nvml() as n:
        return len(n.handles) if n.ok else 0


def device_names() -> list[str]:
    with Nvml() as n:
        return n.names() if n.ok else []


def gpu_uuids(module: Any = None) -> list[str]:
    """The UUIDs of the NVIDIA devices (``[]`` without NVML); ``module``: a pynvml stand-in (tests)."""
    with Nvml(module) as n:
        return n.uuids() if n.ok else []


def free_vram_mib() -> list[float] | None:
    """Free memory per NVIDIA device (MiB), or ``None`` without NVML."""
    with Nvml() as n:
        return [free for _u, _t, free in n.memory()] if n.ok else None


def other_gpu_processes(exclude: set[int] | None = None, nvml: Nvml | None = None) -> list[dict]:
    """Processes computing on a GPU other than ``exclude`` (with their command line where readable)."""
    n = nvml or Nvml()
    try:
        if not n.ok:
            return []
        procs = [p for p in n.compute_processes() if p["pid"] not in (exclude or set())]
    finally:
        if nvml is None:
            n.close()
    import psutil

    for p in procs:
        try:
            p["command"] = " ".join(psutil.Process(p["pid"]).cmdline())[:200]
        except psutil.Error:
            p["command"] = None
    return procs
