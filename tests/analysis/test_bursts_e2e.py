"""End to end: a trace with one known burst replayed against the sim (two batch slots), its burst found
and its drain and SLO recovery times checked against the sim's ground-truth log (one 18 s replay), whole
in virtual time (`llmload run --virtual`, `tests/virtual_truth.py`): the sim's engine, its /metrics
(the waiting queue the burst is read from) and its log on the run's clock; seconds of CPU."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from support import run_said
from virtual_truth import CLOSED, run_against_sim, truth_rows

from analysis.burst import _recovery

INTERVAL_S = 0.5
BURST = (6.0, 8.0)


def test_burst_drain_and_recovery_match_the_sims_log(tmp_path):
    offsets = sorted([*np.arange(0.0, 18.0, 0.5), *(np.arange(BURST[0], BURST[1], 1 / 15) + 0.01)])
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "".join(f"{t:.3f},16,16\n" for t in offsets))
    config = {"target": {"url": CLOSED, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
              "shape": {"trace": {"file": str(trace), "format": "llmload", "drain_timeout": "20s"}},
              "slo": {"ttft_p95": "500ms", "min_samples": 5},
              "client": {"max_concurrency": 64, "max_send_lag_p99": "500ms"},
              "telemetry": {"gpu": "off", "interval": f"{INTERVAL_S}s"}}
    code, run_dir = run_against_sim(tmp_path, config, sim={"max_num_seqs": 2, "step_base_s": "20ms"})
    assert code in (0, 1, 3), run_said(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())["steps"][0]
    bursts = summary["bursts"]
    assert len(bursts) == 1, bursts
    burst = bursts[0]
    assert burst["start"] - plan["start_at"] == pytest.approx(BURST[0], abs=1.0)
    assert burst["end"] - plan["start_at"] == pytest.approx(BURST[1], abs=1.0)
    assert burst["queue_basis"] == "waiting" and burst["met_slo"] is False

    truth = [r for r in truth_rows(run_dir) if r.get("admitted_at") is not None]
    received = np.array([r["received_at"] for r in truth])
    admitted = np.array([r["admitted_at"] for r in truth])
    grid = np.arange(burst["start"] - 5.0, burst["end"] + 20.0, 0.01)
    waiting = ((received[None, :] <= grid[:, None]) & (admitted[None, :] > grid[:, None])).sum(axis=1)
    pre = waiting[grid < burst["start"]].mean()
    peak_at = grid[np.argmax(waiting)]
    assert burst["peak_queue"] == pytest.approx(waiting.max(), abs=3)
    back = grid[(grid >= max(burst["end"], peak_at)) & (waiting <= pre + 0.5)][0]
    assert burst["drain_s"] == pytest.approx(back - burst["end"], abs=INTERVAL_S + 0.1)

    server = pd.DataFrame({"scheduled_at": received, "finished": True,
                           "ttft_s": [r["first_token_at"] - r["received_at"] for r in truth]})
    recovery = _recovery(server, burst["end"], burst["end"] + 20.0, (95.0, 0.5))
    assert burst["recovery_s"] == pytest.approx(recovery, abs=1.0) and recovery > 1.0
    assert summary["burstiness"]["burst"]["peak_to_mean_10s"] > 1.5
