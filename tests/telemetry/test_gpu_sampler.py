"""NVML sampler with a stand-in NVML, the peak logic, missing NVML, DCGM scrape and the gpu-agent."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from llmload.cli import main
from llmload.errors import TelemetryError
from llmload.telemetry.collector import TelemetryCollector
from llmload.telemetry.gpu import MIB, DcgmPoller, NvmlSampler
from llmload.telemetry.gpu_agent import GpuAgent
from llmload.telemetry.series import gpu_memory_peak, gpu_memory_peak_per_step
from llmload.telemetry.sink import finalise_telemetry, read_telemetry

from .exposition_samples import DCGM, DCGM_ENERGY
from .fake_nvml import GIB, FakeNvml
from .helpers import CannedServer, config_for


def _collector(tmp_path: Path, nvml: FakeNvml, gpu: str = "auto") -> TelemetryCollector:
    config = config_for("http://127.0.0.1:9", telemetry={"metrics_url": "off", "gpu": gpu})
    return TelemetryCollector(config, tmp_path, nvml=nvml)


def test_sampler_points_per_gpu() -> None:
    nvml = FakeNvml(2)
    nvml.used, nvml.util, nvml.processes[0] = [10 * GIB, 2 * GIB], [95, 0], {4242: 9 * GIB}
    sampler = NvmlSampler(nvml)
    assert sampler.open()
    got = {(p.source, p.metric, p.labels): p.value for p in sampler.poll()}
    assert got[("gpu:0", "gpu_memory_used_bytes", "")] == 10 * GIB
    assert got[("gpu:1", "gpu_memory_total_bytes", "")] == 80 * GIB
    assert got[("gpu:0", "gpu_utilization", "")] == pytest.approx(0.95)
    assert got[("gpu:0", "gpu_process_memory_bytes", "pid=4242")] == 9 * GIB
    assert sampler.devices()[0] == {"index": 0, "driver_version": "550.54.15", "name": "NVIDIA H100 80GB HBM3",
                                    "uuid": "GPU-0000", "memory_total_bytes": 80 * GIB}
    sampler.close()
    assert nvml.shutdowns == 1


def test_peak_per_step_from_series(tmp_path: Path) -> None:
    """Peaks are the largest total over GPUs at one sample, per step, from what the collector wrote."""
    nvml = FakeNvml(2)
    collector = _collector(tmp_path, nvml)
    for step, used in (("r1", [10, 5]), ("r1", [30, 2]), ("r1", [20, 20]), ("r2", [8, 8]), (None, [70, 70])):
        collector.set_step(step)
        nvml.used = [u * GIB for u in used]
        collector.sample_now()
    assert collector.latest()["gpu:1"]["gpu_memory_used_bytes"] == 70 * GIB
    collector.stop()
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    peaks = dict(gpu_memory_peak_per_step(frame).itertuples(index=False))
    assert peaks == {"r1": 40 * GIB, "r2": 16 * GIB}  # 40 = 20 + 20 beats 32 = 30 + 2 (one sample)
    r2 = frame[frame["step"] == "r2"]
    assert gpu_memory_peak(frame, r2["t"].min(), r2["t"].max()) == 16 * GIB
    assert gpu_memory_peak(frame) == 140 * GIB
    assert nvml.shutdowns == 1


def test_missing_nvml_says_so_once_and_the_run_goes_on(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="llmload.telemetry")
    collector = _collector(tmp_path, FakeNvml(fail_init=True))
    collector.start()
    collector.set_step("r1")
    collector.stop()
    lines = [r.getMessage() for r in caplog.records if "NVML" in r.getMessage()]
    assert len(lines) == 1 and "Driver Not Loaded" in lines[0] and "goes on" in lines[0]
    assert collector.latest() == {}


def test_real_pynvml_here_is_reported_unavailable() -> None:
    sampler = NvmlSampler()  # this machine has no NVIDIA driver
    if sampler.open(log_missing=False):
        sampler.close()
        pytest.skip("this machine has a GPU")
    assert "NVML" in sampler.reason or "pynvml" in sampler.reason


def test_dcgm_exporter_scrape(canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, DCGM, 0.0)
    got = {(p.source, p.metric): p.value for p in DcgmPoller(canned.url + "/metrics", timeout_s=2).poll()}
    assert got[("gpu:0", "gpu_memory_used_bytes")] == 80000 * MIB
    assert got[("gpu:0", "gpu_memory_total_bytes")] == 81000 * MIB
    assert got[("gpu:1", "gpu_utilization")] == pytest.approx(0.40)
    canned.routes["/metrics"] = (200, "process_cpu_seconds_total 1\n", 0.0)
    with pytest.raises(TelemetryError, match="no DCGM"):
        DcgmPoller(canned.url + "/metrics", timeout_s=2).poll()


def test_sampler_energy_counter_power_and_a_board_without_them() -> None:
    """NVML's millijoules and milliwatts become joules and watts; a board that raises NotSupported for
    the counter gives power only, one without either gives neither (memory still sampled)."""
    def points(nvml: FakeNvml) -> dict:
        nvml.energy_mj, nvml.power_mw = [1_234_567, 2_000], [350_500, 80_000]
        sampler = NvmlSampler(nvml)
        assert sampler.open()
        return {(p.source, p.metric): p.value for p in sampler.poll()}

    got = points(FakeNvml(2))
    assert got[("gpu:0", "gpu_energy_joules")] == pytest.approx(1234.567)
    assert got[("gpu:1", "gpu_power_watts")] == pytest.approx(80.0)
    no_counter = points(FakeNvml(2, energy=False))
    assert ("gpu:0", "gpu_energy_joules") not in no_counter and no_counter[("gpu:0", "gpu_power_watts")] == 350.5
    neither = points(FakeNvml(2, energy=False, power=False))
    assert not [k for k in neither if k[1] in ("gpu_energy_joules", "gpu_power_watts")]
    assert ("gpu:0", "gpu_memory_used_bytes") in neither


def test_dcgm_energy_counter_and_power(canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, DCGM_ENERGY, 0.0)
    got = {(p.source, p.metric): p.value for p in DcgmPoller(canned.url + "/metrics", timeout_s=2).poll()}
    assert got[("gpu:0", "gpu_energy_joules")] == pytest.approx(123456789.012)  # mJ -> J
    assert got[("gpu:0", "gpu_power_watts")] == 512.25 and got[("gpu:1", "gpu_power_watts")] == 90.5
    assert ("gpu:1", "gpu_energy_joules") not in got


def test_gpu_agent_serves_exact_bytes_in_dcgm_form() -> None:
    nvml = FakeNvml(1)
    nvml.used, nvml.util, nvml.processes[0] = [12 * GIB + 12345], [50], {77: 3 * GIB}
    nvml.energy_mj, nvml.power_mw = [987_654_321], [420_000]
    agent = GpuAgent(port=0, interval_s=60, nvml=nvml).start()
    try:
        got = {(p.source, p.metric, p.labels): p.value for p in DcgmPoller(agent.url, timeout_s=2).poll()}
    finally:
        agent.stop()
    assert got[("gpu:0", "gpu_memory_used_bytes", "")] == 12 * GIB + 12345  # exact, not MiB-rounded
    assert got[("gpu:0", "gpu_memory_total_bytes", "")] == 80 * GIB
    assert got[("gpu:0", "gpu_utilization", "")] == pytest.approx(0.5)
    assert got[("gpu:0", "gpu_process_memory_bytes", "pid=77")] == 3 * GIB
    assert got[("gpu:0", "gpu_energy_joules", "")] == pytest.approx(987_654.321)
    assert got[("gpu:0", "gpu_power_watts", "")] == pytest.approx(420.0)
    assert nvml.shutdowns == 1


def test_gpu_agent_without_nvml_is_one_line_and_exit_2(capsys) -> None:
    assert main(["gpu-agent", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpu-agent: no NVML on this host" in err[0]
