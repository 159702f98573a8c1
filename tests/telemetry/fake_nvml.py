"""A stand-in for the `pynvml` module (no NVML exists on CI machines): the functions the sampler calls,
returning values a test sets between polls."""

from __future__ import annotations

from types import SimpleNamespace

GIB = 1024**3


class FakeNvml:
    """`used[i]` bytes and `util[i]` percent of GPU i; `processes[i]` = {pid: bytes}; `energy_mj[i]`
    millijoules since the driver loaded and `power_mw[i]` milliwatts (`advance` runs them at that power).
    `energy=False`: a board without the energy counter (pre-Volta), which raises NotSupported as NVML does;
    `power=False`: nor power."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
        pass

    def __init__(self, gpus: int = 2, *, total: int = 80 * GIB, fail_init: bool = False, energy: bool = True,
                 power: bool = True) -> None:
        self.energy_mj = [0] * gpus
        self.power_mw = [0] * gpus
        self.energy_supported, self.power_supported = energy, power
        self.used = [0] * gpus
        self.util = [0] * gpus
        self.processes: list[dict[int, int]] = [{} for _ in range(gpus)]
        self.total, self.fail_init = total, fail_init
        self.initialised = self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")
        self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=self.used[h], total=self.total, free=self.total - self.used[h])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=self.util[h], memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in self.processes[h].items()]

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802 (old pynvml returns bytes)
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-{h:04d}"

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "550.54.15"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        if not self.energy_supported:
            raise self.NVMLError_NotSupported("Not Supported")
        return int(self.energy_mj[h])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        if not self.power_supported:
            raise self.NVMLError_NotSupported("Not Supported")
        return int(self.power_mw[h])

    def advance(self, seconds: float) -> None:
        """Every GPU draws its `power_mw` for `seconds`: its energy counter goes up by that much."""
        for i, mw in enumerate(self.power_mw):
            self.energy_mj[i] += mw * seconds
