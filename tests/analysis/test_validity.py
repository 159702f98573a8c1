"""The generator-validity rule (analysis.validity): a step is invalid only when the generator's deviation
could have changed the server's load or a judged number; each failed check says its value, limit, key
and what to do."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from analysis.summary import build_summary
from analysis.validity import generator_checks, send_lag_limit, suggested_processes
from llmload.config import SLO, Client


def _metrics(**kw) -> dict:
    base = {"offered_rate": 4.0, "achieved_rate": 4.0, "send_lag_p99_s": 0.0, "worker_cpu_max": 0.1,
            "outcomes": {"ok": 10}, "workers": 1}
    return {**base, **kw}


def test_a_lag_is_judged_against_the_gap_between_arrivals_and_the_latency_targets():
    ttft_1s = SLO.model_validate({"ttft_p95": "1s"})
    itl_50ms = SLO.model_validate({"itl_p95": "50ms"})
    # the two cases: 30 ms is irrelevant at 4 req/s with a 1 s TTFT target ...
    limit, key, _ = send_lag_limit(4.0, ttft_1s, Client())
    assert limit == pytest.approx(0.1) and key == "client.send_lag_share_of_target"
    assert generator_checks(_metrics(send_lag_p99_s=0.030), ttft_1s, Client()) == []
    # ... and fatal at 400 req/s with a 50 ms ITL target (one 2.5 ms gap between arrivals)
    limit, key, basis = send_lag_limit(400.0, itl_50ms, Client())
    assert limit == pytest.approx(0.0025) and key == "client.send_lag_share_of_interarrival"
    failed = generator_checks(_metrics(offered_rate=400.0, achieved_rate=400.0, send_lag_p99_s=0.030),
                              itl_50ms, Client())
    assert [f["check"] for f in failed] == ["send_lag"]
    assert failed[0]["measured"] == 0.030 and failed[0]["limit"] == pytest.approx(0.0025)
    # TPOT spreads a delay over the whole answer and the server queue is the server's: not lag-sensitive
    assert send_lag_limit(4.0, SLO.model_validate({"tpot_p95": "20ms", "server_queue_p95": "10ms"}),
                          Client())[0] == pytest.approx(0.25)
    # a limit set in the config wins; closed loop without latency targets has none
    assert send_lag_limit(4.0, ttft_1s, Client(max_send_lag_p99="5ms"))[:2] == (0.005, "client.max_send_lag_p99")
    assert send_lag_limit(math.nan, SLO(), Client())[0] is None


def test_a_lag_smaller_than_a_numbers_distance_from_its_target_cannot_flip_its_verdict():
    slo = SLO.model_validate({"ttft_p95": "1s"})
    # TTFT p95 155 ms against 1 s: a 125 ms lag (over 0.1 x 1 s) cannot carry it across the target
    far = _metrics(ttft_p95_s=0.155, send_lag_p99_s=0.125)
    assert send_lag_limit(math.nan, slo, Client(), far)[0] == pytest.approx(0.845)
    assert send_lag_limit(4.0, slo, Client(), far)[0] == pytest.approx(0.25)  # the 250 ms gap is tighter
    assert generator_checks(far, slo, Client()) == []
    # nor one far over it (the fail stands) ...
    assert generator_checks(_metrics(ttft_p95_s=3.0, send_lag_p99_s=0.125), slo, Client()) == []
    # ... but near the target it could: back to 0.1 x 1 s
    near = _metrics(ttft_p95_s=0.95, send_lag_p99_s=0.125)
    assert [c["check"] for c in generator_checks(near, slo, Client())] == ["send_lag"]
    # and the load term still holds: 125 ms late at 10 req/s bunches arrivals 100 ms apart
    busy = _metrics(offered_rate=10.0, achieved_rate=10.0, ttft_p95_s=0.155, send_lag_p99_s=0.125)
    assert [c["check"] for c in generator_checks(busy, slo, Client())] == ["send_lag"]


def test_an_invalid_step_says_value_limit_key_and_what_to_do():
    slo = SLO.model_validate({"ttft_p95": "200ms"})
    busy = generator_checks(_metrics(send_lag_p99_s=0.045, worker_cpu_max=0.95, ttft_p95_s=0.19), slo, Client())
    assert [f["check"] for f in busy] == ["send_lag", "worker_cpu"]
    lag = busy[0]
    assert "45 ms" in lag["message"] and "20 ms" in lag["message"]
    assert "client.send_lag_share_of_target" in lag["message"]
    # N sized from the measured CPU: 95% of a core -> 3 processes at under 45% each
    assert suggested_processes(1, 0.95, Client()) == 3
    assert lag["advice"].startswith("run with --processes 3") and "95%" in lag["advice"]
    assert busy[1]["key"] == "client.max_worker_cpu" and busy[1]["limit"] == 0.9
    # a lag while the generator itself was idle: more processes would not help, the machine is busy
    idle = generator_checks(_metrics(send_lag_p99_s=0.045, worker_cpu_max=0.05, ttft_p95_s=0.19), slo, Client())
    assert "run with --processes" not in idle[0]["advice"] and "quieter machine" in idle[0]["advice"]
    short = generator_checks(_metrics(achieved_rate=3.0), slo, Client())
    assert short[0]["check"] == "rate_shortfall" and short[0]["key"] == "client.max_rate_shortfall"
    assert short[0]["limit"] == pytest.approx(3.92)


def test_the_reasons_reach_summary_json_and_the_warnings():
    slo = SLO.model_validate({"min_samples": 1, "ttft_p95": "200ms"})
    rows = [request(f"r{i}", "s", float(i), wait=0.05, ttft=0.19) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)]), slo, Client())
    steps = result.steps
    summary = build_summary(steps, slo, {}, warnings=result.warnings)
    entry = summary["steps"][0]
    assert entry["verdict"] == "invalid"
    (reason,) = entry["invalid_reasons"]
    assert reason["check"] == "send_lag" and reason["key"] == "client.send_lag_share_of_target"
    assert reason["measured"] == pytest.approx(0.05) and reason["limit"] == pytest.approx(0.02)
    assert any(w.startswith("step s invalid: send lag p99 50 ms over its limit 20 ms") for w in result.warnings)
    assert isinstance(steps, pd.DataFrame)


def test_client_errors_make_the_step_invalid_and_stay_out_of_the_servers_counts():
    slo = SLO.model_validate({"min_samples": 1, "ttft_p95": "1s"})
    rows = [request(f"r{i}", "s", float(i)) for i in range(8)]
    rows += [request(f"c{i}", "s", 8.0 + i, ttft=None, e2e=None, out=None, outcome="client_error")
             for i in range(2)]
    row = analyze(run_of(rows, [plan_step("s", 0)]), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "invalid" and list(row["failing"]) == ["client_error"]
    # the server answered every request it was given within its SLO: attainment 1, no error ratio
    assert row["slo_attainment"] == 1.0 and row["error_ratio"] == 0.0
    assert row["goodput"] == pytest.approx(0.8)  # the 8 good ones over the 10 s window
    assert row["outcomes"]["client_error"] == 2


def test_a_workers_clock_known_too_loosely_for_the_latency_targets_makes_the_step_invalid():
    """Issue 29: a worker on another host runs on the master's clock as measured (llmload.runtime.wire.clocksync);
    its error over the step (half the round trip plus the drift) is judged like a constant send lag."""
    slo = SLO.model_validate({"min_samples": 1, "ttft_p95": "1s"})
    rows = [request(f"r{i}", "s", float(i), ttft=0.95, e2e=1.5) for i in range(10)]  # limit 100 ms: near 1 s
    loose = {"1": {"offset_s": 0.002, "uncertainty_s": 0.0001, "drift_s": 0.0, "error_s": 0.0001},
             "2": {"offset_s": 1.5, "uncertainty_s": 0.09, "drift_s": -0.03, "error_s": 0.12}}
    row = analyze(run_of(rows, [plan_step("s", 0) | {"clock": loose}]), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "invalid" and list(row["failing"]) == ["clock"]
    (reason,) = row["invalid_reasons"]
    assert reason["measured"] == pytest.approx(0.12) and reason["limit"] == pytest.approx(0.1)
    assert "worker 2's clock is known only to 120 ms" in reason["message"]
    assert "half its round trip to the master 90 ms, drift -30 ms" in reason["message"]
    assert "sync worker 2's host with NTP" in reason["advice"]
    assert row["clock"]["worker"] == "2"
    tight = {"1": loose["1"], "2": {"offset_s": 1.5, "uncertainty_s": 0.0004, "drift_s": 0.0002, "error_s": 0.0006}}
    row = analyze(run_of(rows, [plan_step("s", 0) | {"clock": tight}]), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "pass" and row["clock"]["error_s"] == pytest.approx(0.0006)
    # a worker that answered no exchange is not judged on its clock (no error known)
    silent = {"1": {"offset_s": None, "uncertainty_s": None, "drift_s": None, "error_s": None}}
    row = analyze(run_of(rows, [plan_step("s", 0) | {"clock": silent}]), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "pass" and row["clock"] is None
