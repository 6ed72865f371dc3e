"""A small fake of pynvml's API (not collected): enough for llamaforge.gpu and the telemetry sampler."""

from __future__ import annotations

from types import SimpleNamespace


class FakeNvmlError(Exception):
    pass


class FakePynvml:
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, n: int = 1, *, procs: list[tuple[int, int]] | None = None, throttle: int = 0,
                 no_power: bool = False, fail_init: bool = False) -> None:
        self.n, self.procs, self.throttle, self.no_power, self.fail_init = n, procs or [], throttle, no_power, fail_init
        self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=10 * 2**30, total=140 * 2**30, free=130 * 2**30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * 2**20) for pid, mib in self.procs] if h == 0 else []

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:  # noqa: N802
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:  # noqa: N802
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:  # noqa: N802
        return 5120

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "570.86"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:  # noqa: N802
        return 12080

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        if self.no_power:
            raise FakeNvmlError("Not Supported")
        return 350_000

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        return 61

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=97, memory=80)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:  # noqa: N802
        return self.throttle

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-0000000{h}-fake-uuid"
