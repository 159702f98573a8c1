"""Energy per good output token (METRICS.md "Energy"): the real NVML sampler on the stand-in NVML, its
points as the collector writes them, and the analysis of a hand-made run over them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from analysis.energy import energy_at_knee, energy_sentence
from analysis.telemetry_stats import TelemetryIndex
from llmload.config import SLO
from llmload.telemetry.collector import TelemetryCollector
from llmload.telemetry.gpu import NvmlSampler
from tests.telemetry.fake_nvml import FakeNvml
from tests.telemetry.helpers import config_for

SLO1 = SLO(ttft_p95=1.0, min_samples=5)
WATTS = (300.0, 100.0)  # two GPUs of one instance


def _sampled(nvml: FakeNvml, times: list[float], *, reset_at: float | None = None) -> pd.DataFrame:
    """The long telemetry frame of the sampler's polls at `times`, the GPUs drawing `WATTS` throughout
    (the counter restarts from 0 at `reset_at`: a driver reload)."""
    sampler = NvmlSampler(nvml)
    assert sampler.open()
    nvml.power_mw = [int(w * 1000) for w in WATTS]
    nvml.energy_mj = [5_000_000, 7_000_000]  # the counter runs since the driver loaded
    rows, last = [], times[0]
    for t in times:
        nvml.advance(t - last)
        if reset_at is not None and last < reset_at <= t:
            nvml.energy_mj = [w * (t - reset_at) for w in nvml.power_mw]
        last = t
        rows += [{"t": t, "source": p.source, "metric": p.metric, "value": p.value, "step": None,
                  "labels": p.labels} for p in sampler.poll()]
    sampler.close()
    return pd.DataFrame(rows)


def _step_rows(label: str, start: float, *, n: int = 10, ttft: float = 0.1, slow_every: int = 0) -> list[dict]:
    """`n` requests over a 10 s window, 5 output tokens each, finished inside it; every `slow_every`-th
    one (from the first) over the TTFT target: not good."""
    def slow(i: int) -> bool:
        return ttft > 1.0 or bool(slow_every) and i % slow_every == 0

    return [request(f"{label}-{i}", label, start + i * 10.0 / n, ttft=2.0 if slow(i) else ttft,
                    e2e=2.05 if slow(i) else 0.2, out=5) for i in range(n)]


def _times(start: float, end: float, every: float) -> list[float]:
    out, t = [], start
    while t <= end + 1e-9:
        out.append(round(t, 6))
        t += every
    return out


@pytest.mark.parametrize("energy", [True, False], ids=["counter", "power"])
def test_constant_power_gives_p_t_over_n_exactly(energy: bool) -> None:
    """P x T / N: 400 W over the 10 s window, 8 good requests of 5 output tokens (2 of 10 too slow:
    their tokens are not good) -> 4000 J / 40 tokens = 100 J per good output token, polls off the
    window's edges (every 0.7 s from -1.3 s)."""
    tel = _sampled(FakeNvml(2, energy=energy), _times(-1.3, 14.0, 0.7))
    rows = _step_rows("r1", 0.0, slow_every=5)
    result = analyze(run_of(rows, [plan_step("r1", 0, rate=1.0)], telemetry=tel), SLO1)
    step = result.steps.iloc[0]
    assert step["energy_basis"] == ("counter" if energy else "power")
    assert step["energy_j"] == pytest.approx(sum(WATTS) * 10.0, rel=1e-9)
    assert step["good_output_tokens_per_s"] * 10.0 == pytest.approx(40.0)
    assert step["joules_per_good_output_token"] == pytest.approx(100.0, rel=1e-9)
    entry = result.summary["steps"][0]
    assert entry["energy_basis"] == step["energy_basis"]
    assert entry["joules_per_good_output_token"] == pytest.approx(100.0, rel=1e-9)


def test_counter_and_power_agree_and_a_reset_is_counted_from_zero() -> None:
    """The same GPUs read both ways give the same joules; a counter restart inside the window loses
    only what it lost (the rise before the first sample after the reset)."""
    times = _times(-2.0, 13.0, 1.0)
    both = _sampled(FakeNvml(2), times)
    power_only = both[both["metric"] != "gpu_energy_joules"]
    counter_only = both[both["metric"] != "gpu_power_watts"]
    a, basis_a = TelemetryIndex(counter_only).energy(0.25, 9.75)
    b, basis_b = TelemetryIndex(power_only).energy(0.25, 9.75)
    assert (basis_a, basis_b) == ("counter", "power")
    assert a == pytest.approx(b, rel=1e-9) and a == pytest.approx(400.0 * 9.5, rel=1e-9)
    reset = _sampled(FakeNvml(2), times, reset_at=4.5)  # restarted 0.5 s before the poll at 5.0
    joules, _ = TelemetryIndex(reset[reset["metric"] == "gpu_energy_joules"]).energy(0.0, 10.0)
    assert joules == pytest.approx(400.0 * 10.0 - 400.0 * 0.5, rel=1e-9)


def test_a_window_the_samples_do_not_cover_has_no_energy() -> None:
    tel = TelemetryIndex(_sampled(FakeNvml(2), _times(1.0, 8.0, 1.0)))
    assert math.isnan(tel.energy(0.0, 10.0)[0]) and tel.energy(0.0, 10.0)[1] is None
    assert tel.energy(2.0, 7.0) == (pytest.approx(2000.0), "counter")


def test_no_gpu_leaves_the_columns_blank_and_says_nothing() -> None:
    rows = (_step_rows("r1", 0.0) + _step_rows("r2", 20.0, n=20, slow_every=20)
            + _step_rows("r4", 40.0, n=40, slow_every=2))
    steps = [plan_step("r1", 0, rate=1.0, start=0.0), plan_step("r2", 1, rate=2.0, start=20.0),
             plan_step("r4", 2, rate=4.0, start=40.0)]
    result = analyze(run_of(rows, steps), SLO1)
    assert result.summary["knee"]["rate"] is not None
    assert result.steps["energy_j"].isna().all() and result.steps["energy_basis"].isna().all()
    assert result.steps["joules_per_good_output_token"].isna().all()
    assert "energy_at_knee" not in result.summary
    assert all("energy_j" not in s for s in result.summary["steps"])
    from llmload.report.answer import answer_sentences

    assert not any("J per good" in s for s in answer_sentences(result, {})[1])
    from llmload.report.page import step_table

    assert "J per good" not in step_table(result.steps, SLO1)


def test_energy_at_the_knee_is_interpolated_between_the_judged_steps_around_it() -> None:
    """Three ladder steps, the knee between the second and third: the figure at the knee is the line
    between their joules per good token, in summary.json and the answer, beside the cost."""
    rows = _step_rows("r1", 0.0) + _step_rows("r2", 20.0, n=20) + _step_rows("r4", 40.0, n=40, slow_every=4)
    steps = [plan_step("r1", 0, rate=1.0, start=0.0), plan_step("r2", 1, rate=2.0, start=20.0),
             plan_step("r4", 2, rate=4.0, start=40.0)]
    tel = _sampled(FakeNvml(2), _times(-1.0, 60.0, 0.5))
    manifest = {"config": {"conditions": {"cost_per_hour": 3.6}}}
    result = analyze(run_of(rows, steps, telemetry=tel, manifest=manifest), SLO1)
    knee = result.summary["knee"]["rate"]
    assert 2.0 < knee < 4.0, result.summary["knee"]
    jpt = result.steps.set_index("label")["joules_per_good_output_token"]
    # 400 W x 10 s over 50, 100 and 150 (a quarter of 40 too slow) good output tokens
    assert list(jpt) == pytest.approx([4000.0 / 50, 4000.0 / 100, 4000.0 / 150], rel=1e-9)
    energy = result.summary["energy_at_knee"]
    assert energy["steps"] == ["r2", "r4"] and energy["rates"] == pytest.approx([2.0, 4.0])
    want = 40.0 + (4000.0 / 150 - 40.0) * (knee - 2.0) / 2.0
    assert energy["joules_per_good_output_token"] == pytest.approx(want, rel=1e-9)
    tokens = 10.0 + (15.0 - 10.0) * (knee - 2.0) / 2.0
    assert energy["cost_per_million_good_output_tokens"] == pytest.approx(3.6 / (tokens * 3600) * 1e6, rel=1e-9)
    from llmload.report.answer import answer_sentences

    said = [s for s in answer_sentences(result, manifest)[1] if "J per good output token" in s]
    assert len(said) == 1 and "between steps r2 and r4" in said[0] and "per million good tokens" in said[0]
    from llmload.report.page import step_table

    assert "J per good output token" in step_table(result.steps, SLO1)


def test_energy_at_knee_from_step_rows() -> None:
    rows = [{"label": "a", "phase": "ladder", "verdict": "pass", "offered_rate": 2.0, "status": "run",
             "joules_per_good_output_token": 0.6, "good_output_tokens_per_s": 1000.0, "energy_basis": "counter"},
            {"label": "b", "phase": "ladder", "verdict": "fail", "offered_rate": 4.0, "status": "run",
             "joules_per_good_output_token": 0.4, "good_output_tokens_per_s": 1500.0, "energy_basis": "counter"},
            {"label": "w", "phase": "warmup", "verdict": "pass", "offered_rate": 3.0, "status": "run",
             "joules_per_good_output_token": 9.0, "good_output_tokens_per_s": 1.0, "energy_basis": "counter"}]
    got = energy_at_knee(rows, {"rate": 3.0}, cost_per_hour=2.5)
    assert got["joules_per_good_output_token"] == pytest.approx(0.5)
    assert got["kwh_per_million_good_output_tokens"] == pytest.approx(0.5 * 1e6 / 3.6e6)
    assert got["good_output_tokens_per_s"] == pytest.approx(1250.0)
    assert got["cost_per_million_good_output_tokens"] == pytest.approx(2.5 / (1250.0 * 3600) * 1e6)
    assert got["steps"] == ["a", "b"] and got["basis"] == "counter"
    text = energy_sentence(got)
    assert "0.5 J per good output token" in text and "between steps a and b" in text and "0.556" in text
    assert energy_at_knee(rows, {"rate": 2.0})["steps"] == ["a", "a"]
    assert energy_at_knee(rows, {"rate": 5.0}) is None  # beyond the last step: not extrapolated
    assert energy_at_knee(rows, {"rate": None}) is None and energy_at_knee(rows, None) is None


def test_gpus_0_samples_nothing(tmp_path: Path) -> None:
    """`conditions.gpus: 0` with `telemetry.gpu: auto`: NVML is not even opened, no energy sampled."""
    nvml = FakeNvml(2)
    config = config_for("http://127.0.0.1:9", telemetry={"metrics_url": "off", "gpu": "auto"},
                        conditions={"gpus": 0})
    collector = TelemetryCollector(config, tmp_path, nvml=nvml)
    collector.start()
    points = collector.sample_now()
    collector.stop()
    assert nvml.initialised == 0 and not [p for p in points if p.metric.startswith("gpu_")]


def test_collector_to_parquet_to_energy(tmp_path: Path) -> None:
    """The real collector polls the stand-in NVML (250 W and 50 W, its counter following the wall clock)
    into telemetry.jsonl; read back from the run directory, counter and power give P x T."""
    import time

    from llmload.telemetry.sink import finalise_telemetry, read_telemetry

    class ClockNvml(FakeNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
            return int(self.power_mw[h] * time.time())

    nvml = ClockNvml(2)
    nvml.power_mw = [250_000, 50_000]
    config = config_for("http://127.0.0.1:9", telemetry={"metrics_url": "off", "gpu": "auto"})
    collector = TelemetryCollector(config, tmp_path, nvml=nvml)
    collector.start()
    for _ in range(4):
        collector.sample_now()
        time.sleep(0.2)
    collector.stop()
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    t = frame.loc[frame["metric"] == "gpu_energy_joules", "t"]
    t0, t1 = float(t.min()), float(t.max())
    assert t1 > t0
    counter = frame[frame["metric"] == "gpu_energy_joules"]
    power = frame[frame["metric"] == "gpu_power_watts"]
    a, basis_a = TelemetryIndex(counter).energy(t0, t1)
    b, basis_b = TelemetryIndex(power).energy(t0, t1)
    assert (basis_a, basis_b) == ("counter", "power")
    assert b == pytest.approx(300.0 * (t1 - t0), rel=1e-9)
    # the counter is read a moment after the poll's time stamp (ms; more on a loaded machine): the two
    # agree to those moments over a span of 0.6 s or more
    assert t1 - t0 >= 0.6 and a == pytest.approx(b, rel=0.15)
    assert TelemetryIndex(frame).energy(t0, t1)[1] == "counter"
