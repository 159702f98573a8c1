"""End to end: a short `llmload run` against the simulated server, analysed, checked against the sim's
ground-truth log (server-side times of every request). Bounded: one 5 s step at 4 req/s on 127.0.0.1
(tests/conftest.py's `truth_step_run`, a run shared with tests/runtime/test_runs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_said

from analysis import analyze, load_run
from analysis.stats import time_average
from llmload.config import SLO

pytestmark = pytest.mark.slow


@pytest.mark.quiet  # client TTFT within 10 ms of the server's: few neighbours
def test_step_numbers_match_the_sims_ground_truth(truth_step_run) -> None:
    # tests/conftest.py's truth step, shared with tests/runtime/test_runs.py's low-load test
    sim, run_dir = truth_step_run.sim, truth_step_run.run_dir
    assert truth_step_run.returncode == 0, f"{run_said(run_dir)}\n{truth_step_run.output}"

    result = analyze(load_run(run_dir), SLO.model_validate({"ttft_p95": "1s", "min_samples": 5}))
    step = result.steps.iloc[0]
    req = result.requests
    in_window = set(req.loc[req["in_window"], "request_id"])
    truth = [row for row in sim.ground_truth_rows() if row["request_id"] in in_window]
    assert step["arrivals"] == len(in_window) and step["completed"] == len(truth)
    assert step["verdict"] == "pass" and step["outcomes"] == {"ok": len(truth)}, run_said(run_dir)

    server_ttft = np.array([r["first_token_at"] - r["received_at"] for r in truth])
    server_tpot = np.array([(r["token_times"][-1] - r["first_token_at"]) / (len(r["token_times"]) - 1)
                            for r in truth])
    server_itl = np.concatenate([np.diff(r["token_times"]) for r in truth])
    # the client sees each time a little after the server wrote it: a few ms on a busy 2-core machine
    assert step["ttft_p50_s"] == pytest.approx(np.percentile(server_ttft, 50), abs=0.01)
    assert step["tpot_p50_s"] == pytest.approx(np.percentile(server_tpot, 50), abs=0.005)
    assert step["itl_p50_s"] == pytest.approx(np.percentile(server_itl, 50), abs=0.005)
    assert step["tpot_excluded"] == 0
    # client in-flight (sent -> last token) against the server's (received -> finished)
    ws, we = step["window_start"], step["window_end"]
    all_truth = sim.ground_truth_rows()
    server_in_flight = time_average(np.array([r["received_at"] for r in all_truth]),
                                    np.array([r["finished_at"] for r in all_truth]), np.array([ws, we]))[0]
    assert step["in_flight_mean"] == pytest.approx(server_in_flight, rel=0.1, abs=0.05)
    # the server queue mean from the histogram's _sum/_count equals the logged queue times' mean (low load: ~0)
    assert step["server_queue_basis"] == "histogram"
    assert step["server_queue_mean_s"] == pytest.approx(np.mean([r["queue_s"] for r in truth]), abs=0.01)
