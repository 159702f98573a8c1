"""GPU memory and utilisation: NVML on this host, or a DCGM exporter (or `llmload gpu-agent`) elsewhere.

`NvmlSampler` reads per-GPU memory used/total, utilisation and per-process memory through `pynvml`
(nvidia-ml-py). The module is injected for tests (no NVML exists on CI machines); by default it is
imported lazily. Without a usable NVML `open()` returns False and logs one line: the run goes on with
no GPU series. `DcgmPoller` scrapes `DCGM_FI_DEV_FB_USED` / `_FB_FREE` (MiB) and `_GPU_UTIL` (percent);
it prefers the exact byte counts `llmload gpu-agent` adds under `llmload_gpu_*` names.

Energy (METRICS.md "Energy"): NVML's `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver
loaded; Volta and later) becomes the counter `gpu_energy_joules`; `nvmlDeviceGetPowerUsage` (milliwatts)
the gauge `gpu_power_watts`, what the analysis integrates where the counter is not supported. From DCGM:
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ) and `DCGM_FI_DEV_POWER_USAGE` (W).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from typing import Any

from llmload.errors import TelemetryError
from llmload.telemetry.exposition import format_labels, parse_exposition
from llmload.telemetry.http import fetch_text, public_url
from llmload.telemetry.sink import Point

__all__ = ["DcgmPoller", "GpuReading", "NvmlSampler"]

log = logging.getLogger("llmload.telemetry")

MIB = 1024 * 1024


class GpuReading(dict):
    """One GPU at one poll: index, name, uuid, used/total bytes, utilisation 0-1, {pid: bytes}, energy
    since the driver loaded (J) and power (W), each None where the board does not report it."""


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """Samples every GPU NVML sees. `open()` first; `poll()` gives points for sources `gpu:<index>`."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self.available = False
        self.reason = ""
        self._handles: list[Any] = []

    def open(self, *, log_missing: bool = True) -> bool:
        """Initialise NVML; False (and one logged line, unless told not) when there is no NVML or GPU."""
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            count = int(self._nvml.nvmlDeviceGetCount())
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError ...
            self.reason = f"{type(exc).__name__}: {exc}".strip(": ")
            if log_missing:
                log.warning("no GPU telemetry (NVML unavailable: %s); the run goes on without GPU figures "
                            "(conditions.gpus: 0 or telemetry.gpu: off says there is no GPU to look for)", self.reason)
            return False
        if not self._handles:
            self.reason = "NVML found no GPU"
            if log_missing:
                log.warning("no GPU telemetry (%s); the run goes on without GPU figures (conditions.gpus: 0 "
                            "or telemetry.gpu: off says there is no GPU to look for)", self.reason)
            self.close()
            return False
        self.available = True
        return True

    def readings(self) -> list[GpuReading]:
        """Current values of every GPU; TelemetryError when NVML fails mid-run."""
        nvml, out = self._nvml, []
        try:
            for i, handle in enumerate(self._handles):
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                reading = GpuReading(index=i, used_bytes=float(mem.used), total_bytes=float(mem.total),
                                     utilization=None, processes={}, energy_j=None, power_w=None)
                with contextlib.suppress(Exception):  # NOT_SUPPORTED on some boards
                    reading["utilization"] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0
                with contextlib.suppress(Exception):  # NVMLError_NotSupported before Volta: power instead
                    reading["energy_j"] = float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1000.0
                with contextlib.suppress(Exception):
                    reading["power_w"] = float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0
                try:
                    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                        used = getattr(proc, "usedGpuMemory", None)
                        if used is not None:
                            reading["processes"][int(proc.pid)] = float(used)
                except Exception:
                    pass
                out.append(reading)
        except Exception as exc:
            raise TelemetryError(f"NVML read failed: {type(exc).__name__}: {exc}") from None
        return out

    def poll(self) -> list[Point]:
        points: list[Point] = []
        for r in self.readings():
            src = f"gpu:{r['index']}"
            points.append(Point(src, "gpu_memory_used_bytes", r["used_bytes"]))
            points.append(Point(src, "gpu_memory_total_bytes", r["total_bytes"], always=False))
            if r["utilization"] is not None:
                points.append(Point(src, "gpu_utilization", r["utilization"]))
            if r.get("energy_j") is not None:  # a counter: every poll, so each window has its own edges
                points.append(Point(src, "gpu_energy_joules", r["energy_j"]))
            if r.get("power_w") is not None:
                points.append(Point(src, "gpu_power_watts", r["power_w"]))
            for pid, used in r["processes"].items():
                points.append(Point(src, "gpu_process_memory_bytes", used, format_labels({"pid": pid})))
        return points

    def devices(self) -> list[dict]:
        """Static facts for the manifest: index, name, uuid, memory total; driver version."""
        nvml, out = self._nvml, []
        driver = None
        with contextlib.suppress(Exception):
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        for i, handle in enumerate(self._handles):
            info: dict = {"index": i, "driver_version": driver}
            for key, call in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
                try:
                    info[key] = _text(getattr(nvml, call)(handle))
                except Exception:
                    info[key] = None
            try:
                info["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:
                info["memory_total_bytes"] = None
            out.append(info)
        return out

    def close(self) -> None:
        if self._nvml is not None and (self.available or self._handles):
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self.available = False


class DcgmPoller:
    """Scrapes a DCGM exporter (or `llmload gpu-agent`) into `gpu:<index>` points."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self.url, self.timeout_s = url, timeout_s
        self.source = f"dcgm:{public_url(url)}"

    def poll(self) -> list[Point]:
        samples = parse_exposition(fetch_text(self.url, timeout_s=self.timeout_s))
        per_gpu: dict[str, dict[str, float]] = defaultdict(dict)
        points: list[Point] = []
        for s in samples:
            gpu = s.labels.get("gpu")
            if gpu is None:
                continue
            src = f"gpu:{gpu}"
            if s.name.startswith(("DCGM_FI_", "llmload_gpu_")):
                per_gpu[src][s.name] = per_gpu[src].get(s.name, 0.0) + s.value
                if s.name == "llmload_gpu_process_memory_bytes" and "pid" in s.labels:
                    points.append(Point(src, "gpu_process_memory_bytes", s.value,
                                        format_labels({"pid": s.labels["pid"]})))
                else:
                    points.append(Point(src, s.name, s.value, format_labels(s.labels), always=False))
        if not per_gpu:
            raise TelemetryError(f"{self.url}: no DCGM_FI_DEV_* GPU series in the answer")
        for src, v in per_gpu.items():
            used = v.get("llmload_gpu_memory_used_bytes")
            total = v.get("llmload_gpu_memory_total_bytes")
            if used is None and "DCGM_FI_DEV_FB_USED" in v:
                used = v["DCGM_FI_DEV_FB_USED"] * MIB
            if total is None and "DCGM_FI_DEV_FB_USED" in v and "DCGM_FI_DEV_FB_FREE" in v:
                total = (v["DCGM_FI_DEV_FB_USED"] + v["DCGM_FI_DEV_FB_FREE"]
                         + v.get("DCGM_FI_DEV_FB_RESERVED", 0.0)) * MIB
            if used is not None:
                points.append(Point(src, "gpu_memory_used_bytes", used))
            if total is not None:
                points.append(Point(src, "gpu_memory_total_bytes", total, always=False))
            if "DCGM_FI_DEV_GPU_UTIL" in v:
                points.append(Point(src, "gpu_utilization", v["DCGM_FI_DEV_GPU_UTIL"] / 100.0))
            # mJ since the driver loaded; a counter in dcgm-exporter's default list, which the parser
            # names with `_total` when the page declares its TYPE
            energy = v.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", v.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"))
            if energy is not None:
                points.append(Point(src, "gpu_energy_joules", energy / 1000.0))
            if "DCGM_FI_DEV_POWER_USAGE" in v:  # W
                points.append(Point(src, "gpu_power_watts", v["DCGM_FI_DEV_POWER_USAGE"]))
        return points
