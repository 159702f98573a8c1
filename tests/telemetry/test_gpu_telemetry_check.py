"""bench/gpu_telemetry_check.py's logic on synthetic series (no GPU needed): a recorder that follows the
child's memory steps within one sample interval passes; one that lags more, misses a free or drifts
off a level fails; the steps it saw are found where they happened; the report's GPU chart is drawn."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
GIB = 2 ** 30
BASE = 600 * 2 ** 20  # the CUDA context and whatever else the GPU holds
INTERVAL = 0.5
#: the child's marks: context up at 10 s, +1 GiB, +1 GiB, then frees
EVENTS = [{"step": 0, "t": 10.0, "held_bytes": 0}, {"step": 1, "t": 12.0, "held_bytes": GIB},
          {"step": 2, "t": 14.0, "held_bytes": 2 * GIB}, {"step": 3, "t": 16.0, "held_bytes": GIB},
          {"step": 4, "t": 18.0, "held_bytes": 0}]


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_telemetry_check", REPO / "bench" / "gpu_telemetry_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _series(delay_s: float = 0.0, *, keep_after_free: bool = False, seed: int = 1):
    """Samples every INTERVAL from 9.03 s: the held memory of the last mark `delay_s` before, plus noise."""
    rng = np.random.default_rng(seed)
    times = np.arange(9.03, 20.0, INTERVAL)
    used = []
    for t in times:
        done = [e for e in EVENTS if e["t"] <= t - delay_s]
        held = done[-1]["held_bytes"] if done else 0
        if keep_after_free and done and done[-1]["step"] >= 3:
            held = 2 * GIB  # the caching allocator kept the freed blocks
        used.append(BASE + held + rng.integers(-8, 8) * 2 ** 20)
    return list(times), used


def _follow(check, times, used):
    base = check.baseline_of(times, used, EVENTS)
    return base, check.follow_steps(times, used, EVENTS, baseline_bytes=base, limit_s=INTERVAL + 0.05,
                                    tolerance_bytes=64 * 2 ** 20)


def test_a_recorder_that_follows_within_one_interval_passes(check):
    base, steps = _follow(check, *_series())
    assert abs(base - BASE) <= 8 * 2 ** 20
    assert [s.step for s in steps] == [1, 2, 3, 4] and all(s.followed for s in steps), steps
    assert all(0 <= s.lag_s <= INTERVAL for s in steps)


def test_a_read_that_overlaps_the_next_allocation_judges_nothing(check):
    """A slow read that began before the child's next step began but returned after it may see the new
    level (the allocation lands before the child's mark): it judges neither step. The same value read
    wholly inside the step still fails it."""
    events = [dict(e, began=e["t"] - 0.3) for e in EVENTS]
    times, used = _series()
    i = next(k for k, t in enumerate(times) if 13.5 < t < 13.7)  # the last sample before step 2 began (13.7 s)
    ends = list(times)
    times[i], ends[i], used[i] = 13.6, 13.9, BASE + 2 * GIB  # began before 13.7, returned after: ambiguous
    base = check.baseline_of(times, used, events)
    steps = check.follow_steps(times, used, events, baseline_bytes=base, limit_s=INTERVAL + 0.05,
                               tolerance_bytes=64 * 2 ** 20, ends=ends)
    assert all(s.followed for s in steps), steps
    ends[i] = 13.65  # the whole read before the next step began: step 1 left its level
    steps = check.follow_steps(times, used, events, baseline_bytes=base, limit_s=INTERVAL + 0.05,
                               tolerance_bytes=64 * 2 ** 20, ends=ends)
    assert [s.step for s in steps if not s.followed] == [1], steps


def test_a_lagging_recorder_fails_on_every_step(check):
    _, steps = _follow(check, *_series(delay_s=1.2))
    assert not any(s.followed for s in steps)
    assert all(s.lag_s == pytest.approx(1.2, abs=INTERVAL) for s in steps), steps


def test_memory_not_given_back_fails_the_frees(check):
    _, steps = _follow(check, *_series(keep_after_free=True))
    assert [s.followed for s in steps] == [True, True, False, False]
    assert steps[2].first_at_level is None


def test_a_sample_off_the_level_fails_its_step(check):
    times, used = _series()
    i = next(k for k, t in enumerate(times) if 15.0 < t < 16.0)
    used[i] += GIB // 2
    _, steps = _follow(check, times, used)
    assert [s.followed for s in steps] == [True, False, True, True] and steps[1].left_level == 1


def test_the_steps_seen_are_where_they_happened(check):
    times, used = _series()
    seen = check.detect_steps(times, used, min_jump_bytes=GIB / 2)
    assert len(seen) == 4
    for (t, jump), event, sign in zip(seen, EVENTS[1:], (1, 1, -1, -1), strict=True):
        assert event["t"] <= t <= event["t"] + INTERVAL and np.sign(jump) == sign
        assert abs(abs(jump) - GIB) <= 16 * 2 ** 20


def test_the_reports_gpu_chart_is_drawn_from_the_series(check):
    svg = check.gpu_chart({"nvml": _series()}, EVENTS)
    assert svg and svg.lstrip().startswith(("<?xml", "<svg")) and "GPU memory" in svg


def test_without_a_gpu_it_says_so_and_exits_0(check, tmp_path, monkeypatch):
    from llmload.telemetry import gpu

    monkeypatch.setattr(gpu.NvmlSampler, "open", lambda self, log_missing=True: False)
    out = tmp_path / "r.json"
    assert check.main(["--out", str(out)]) == 0
    import json

    doc = json.loads(out.read_text())
    assert doc["gpu"] is False and doc["message"].startswith("no NVIDIA GPU here") and doc["exit_code"] == 0


def test_energy_over_a_span_from_counter_and_power(check):
    """300 W for 10 s: 3000 J both ways over the span both series cover; missing series say None."""
    counter = [(t, "gpu_energy_joules", 1e6 + 300.0 * t) for t in np.arange(0.0, 11.0, 0.5)]
    power = [(t + 0.25, "gpu_power_watts", 300.0) for t in np.arange(0.0, 10.5, 0.5)]
    got = check.energy_over(counter + power)
    assert got["span_s"] == pytest.approx(10.0)
    assert got["counter_j"] == pytest.approx(3000.0) and got["power_j"] == pytest.approx(3000.0)
    assert got["counter_vs_power"] == pytest.approx(1.0)
    only_power = check.energy_over(power)
    assert only_power["counter_j"] is None and only_power["power_j"] == pytest.approx(3000.0)
    assert check.energy_over([])["span_s"] is None
    assert "3000.0 J (counter)" in check._energy_text(got) and check._energy_text({"span_s": None}) == "not reported"


FAKE_CHILD = r"""
import json, os, sys, time
steps = [int(s) for s in sys.argv[1].split(",")]
hold = float(sys.argv[2])
state = os.environ["FAKE_GPU_STATE"]
def say(i, held):
    began = time.time()
    with open(state + ".tmp", "w") as f:  # whole or not at all: a reader between a truncate and the write
        f.write(str(held))                 # read 0 held (beside two hogs: a -512 MiB step that never was)
    os.replace(state + ".tmp", state)
    print(json.dumps({"step": i, "began": began, "t": time.time(), "held_bytes": held}), flush=True)
say(0, 0)
time.sleep(hold)
held, i = [], 0
for mib in steps:
    held.append(mib * 1024 * 1024)
    i += 1
    say(i, sum(held))
    time.sleep(hold)
while held:
    held.pop()
    i += 1
    say(i, sum(held))
    time.sleep(hold)
"""


@pytest.mark.slow
def test_the_whole_check_on_a_fake_gpu(check, tmp_path, monkeypatch):
    """The orchestration end to end with NVML and torch faked: the child marks its steps and sets the
    fake GPU's memory; llmload's NVML sampler and a gpu-agent (in-process, same fake NVML) record it.
    Generous slack: this checks the wiring and the files, not timing."""
    from types import SimpleNamespace

    from llmload.telemetry import gpu
    from llmload.telemetry.gpu_agent import GpuAgent

    from .fake_nvml import FakeNvml

    state = tmp_path / "held"
    state.write_text("0")

    class FileNvml(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
            used = BASE + int(state.read_text() or 0)
            return SimpleNamespace(used=used, total=self.total, free=self.total - used)

        def nvmlDeviceGetTotalEnergyConsumption(self, h):  # noqa: N802 (250 W since the epoch, in mJ)
            return int(250_000 * time.time())

        def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
            return 250_000

    fake = FileNvml(gpus=1)
    real_sampler = gpu.NvmlSampler
    monkeypatch.setattr(gpu, "NvmlSampler", lambda nvml=None: real_sampler(fake))
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True)))
    monkeypatch.setenv("FAKE_GPU_STATE", str(state))
    monkeypatch.setattr(check, "CHILD", FAKE_CHILD)

    def start_agent(interval_s):
        agent = GpuAgent(port=0, interval_s=interval_s, nvml=FileNvml(gpus=1)).start()
        return SimpleNamespace(terminate=agent.stop, wait=lambda timeout=None: 0), agent.url

    monkeypatch.setattr(check, "_start_agent", start_agent)
    out = tmp_path / "check" / "r.json"
    code = check.main(["--steps-mib", "256", "256", "--hold-s", "1", "--interval", "0.25", "--slack-s", "2",
                       "--out", str(out)])
    import json

    doc = json.loads(out.read_text())
    assert code == 0 == doc["exit_code"], doc["message"]
    assert [e["step"] for e in doc["events"]] == [0, 1, 2, 3, 4]
    for name in ("nvml", "gpu-agent"):
        rec = doc["recorders"][name]
        assert rec["followed"] and [s["step"] for s in rec["steps"]] == [1, 2, 3, 4], rec
        assert rec["baseline_bytes"] == BASE and len(rec["seen_steps"]) == 4
    series = (tmp_path / "check" / "gpu_telemetry_series.csv").read_text().splitlines()
    assert series[0] == "t,recorder,used_bytes,child_step,child_held_bytes" and len(series) > 20
    assert "GPU memory" in (tmp_path / "check" / "gpu_telemetry_chart.svg").read_text()
    for name in ("nvml", "gpu-agent"):  # energy printed beside: both bases, agreeing (the agent's page lags)
        energy = doc["recorders"][name]["energy"]
        assert energy["counter_j"] > 0 and energy["counter_vs_power"] == pytest.approx(1.0, abs=0.15), energy
    assert "nvml energy over" in doc["message"] and "J (power)" in doc["message"]
