"""Bursts and recovery inside a trace replay (analysis/burst.py) on a synthetic trace with known bursts:
the burst windows, the peak queue, the drain time and the SLO recovery time against the ground truth
the test built (within one telemetry sample interval), and the trace's burstiness."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.burst import burst_summary, burst_windows, burstiness, step_bursts
from analysis.telemetry_stats import TelemetryIndex
from llmload.config import SLO

SAMPLE_S = 0.5
SLO_1S = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5})
#: the truth: bursts [40, 44) (20 req/s) and [80, 83) (12 req/s) over 2 req/s
BURSTS = ((40.0, 44.0, 18.0), (80.0, 83.0, 10.0))
#: arrivals before this time in the first burst's aftermath wait 3 s for their first token
SLOW_UNTIL = 49.3
#: the queue: 0 until 40, up to 30 at 44, back to 0 at 50.2 (linear), small bump in the second burst
def queue_at(t: np.ndarray) -> np.ndarray:
    up = np.where((t >= 40) & (t < 44), 30 * (t - 40) / 4, 0.0)
    down = np.where((t >= 44) & (t < 50.2), 30 * (50.2 - t) / 6.2, 0.0)
    bump = np.where((t >= 80) & (t < 84), 2.0, 0.0)
    return up + down + bump


def _requests() -> pd.DataFrame:
    base = np.arange(0.0, 120.0, 0.5)
    extra = [np.linspace(a, b, int((b - a) * r), endpoint=False) + 0.01 for a, b, r in BURSTS]
    sched = np.sort(np.concatenate([base, *extra]))
    ttft = np.where((sched >= 40.0) & (sched < SLOW_UNTIL), 3.0, 0.2)
    return pd.DataFrame({"step": "burst", "scheduled_at": sched, "sent_at": sched, "ttft_s": ttft,
                         "end_at": sched + ttft + 1.0, "finished": True, "outcome": "ok",
                         "good": ttft <= 1.0, "e2e_s": ttft + 1.0, "in_window": True})


def _telemetry() -> TelemetryIndex:
    t = np.arange(-10.0, 130.0, SAMPLE_S)
    return TelemetryIndex(pd.DataFrame({"t": t, "source": "server:x", "metric": "waiting", "value": queue_at(t)}))


STEP = {"label": "burst", "phase": "burst", "start_at": 0.0, "window_start": 0.0, "window_end": 120.0,
        "drained_at": 125.0, "verdict": "fail"}


def test_burst_windows_are_found_exactly():
    sched = _requests()["scheduled_at"].to_numpy()
    assert burst_windows(sched, 0.0, 120.0) == [(40.0, 44.0), (80.0, 83.0)]
    assert burst_windows(np.arange(0.0, 120.0, 0.5), 0.0, 120.0) == []  # even arrivals: no burst


def test_drain_and_recovery_within_one_sample_of_the_truth():
    first, second = step_bursts(_requests(), STEP, _telemetry(), SLO_1S)
    assert first["arrivals"] == 8 + 72 and first["peak_queue"] == pytest.approx(30.0)
    assert first["pre_burst_queue"] == 0.0 and first["queue_basis"] == "waiting"
    # truth: the queue is at most 0.5 from t = 50.2 - 0.5 * 6.2 / 30, i.e. 6.1 s after the burst's end
    assert first["drain_s"] == pytest.approx(50.2 - 0.5 * 6.2 / 30 - 44.0, abs=SAMPLE_S)
    # truth: arrivals from 49.3 on meet the TTFT target: 5.3 s after the burst's end
    assert first["recovery_s"] == pytest.approx(SLOW_UNTIL - 44.0, abs=1.0)
    assert first["met_slo"] is False and first["good_share"] < 0.1
    assert second["met_slo"] is True and second["recovery_s"] == 0.0
    assert second["peak_queue"] == 2.0 and second["drain_s"] == pytest.approx(1.0, abs=SAMPLE_S)


def test_bursts_without_telemetry_use_client_in_flight():
    first = step_bursts(_requests(), STEP, TelemetryIndex(None), SLO_1S)[0]
    assert first["queue_basis"] == "client_in_flight" and first["peak_queue"] > 10


def test_burstiness_against_poisson():
    rng = np.random.default_rng(7)
    poisson = np.cumsum(rng.exponential(0.25, 4000))
    assert burstiness(poisson)["versus_poisson"] == "similar"
    even = burstiness(np.arange(0.0, 300.0, 0.25))
    assert even["versus_poisson"] == "less" and even["interarrival_cv"] < 0.01
    assert even["peak_to_mean_10s"] == pytest.approx(1.0, abs=0.01)
    # evenly spaced arrivals with two dense bursts: peaked, yet less variable than Poisson between arrivals
    synthetic = burstiness(_requests()["scheduled_at"].to_numpy())
    assert synthetic["peak_to_mean_10s"] > 2 and synthetic["versus_poisson"] == "less"
    clusters = np.repeat(np.cumsum(rng.exponential(2.0, 300)), 8) + rng.uniform(0, 0.2, 2400)
    assert burstiness(clusters)["versus_poisson"] == "more"


def test_burst_summary_only_for_trace_replays():
    steps = pd.DataFrame([STEP])
    out = burst_summary(_requests(), steps, [STEP], _telemetry(), SLO_1S)
    assert [b["start"] for b in out["bursts"]] == [40.0, 80.0] and out["burstiness"]["burst"]["arrivals"] == 240 + 72 + 30
    ladder = pd.DataFrame([{**STEP, "phase": "ladder"}])
    assert burst_summary(_requests(), ladder, [STEP], _telemetry(), SLO_1S) is None
