"""Issue 10 and the report's frames: soak drift, per-instance sums, Little's-law planning, burst vs
uniform, the steps columns the report draws, the timeline."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze, plan_in_flight
from analysis.pipeline import OPTIONAL_COLUMNS, RUN_COLUMNS
from analysis.requests import derive_requests
from llmload.config import SLO

SLO_SOAK = SLO.model_validate({"ttft_p95": "2s", "min_samples": 10})
_NAMES = (
    "label index phase status target_rate concurrency window_start window_end window_s arrivals sent "
    "completed ok offered_rate achieved_rate completion_throughput goodput slo_attainment in_flight_mean "
    "running_mean waiting_mean tpot_excluded outcomes reject_ratio error_ratio oom queue_growth "
    "queue_trend_p input_tokens_mean input_tokens_p50 input_tokens_p95 output_tokens_mean output_tokens_p50 "
    "output_tokens_p95 output_mismatch_ratio kv_usage_peak preemptions gpu_memory_peak_bytes worker_cpu_max "
    "littles_law_ratio verdict failing"
)
_LATENCIES = ("ttft", "user_ttft", "tpot", "itl", "itl_token", "e2e", "user_e2e", "client_wait", "server_queue",
              "send_lag")
STEP_COLUMNS = _NAMES.split() + [f"{m}_{q}_s" for m in _LATENCIES for q in ("p50", "p95", "p99", "max")]


def _soak(ttft_of_slice, *, errors_in: int | None = None, memory=None) -> tuple:
    rng = np.random.default_rng(3)
    rows, steps, tel = [], [], []
    for k in range(6):
        start = k * 60.0
        steps.append(plan_step(f"soak-{k}", k, start=start, length=60.0, phase="soak"))
        for i in range(60):
            ttft = max(0.01, ttft_of_slice(k) + rng.normal(0, 0.02))
            outcome = "http_error" if errors_in == k and i % 6 == 0 else "ok"
            rows.append(request(f"{k}-{i}", f"soak-{k}", start + i, ttft=ttft, e2e=ttft + 0.5, outcome=outcome))
        if memory is not None:
            tel.append({"t": start + 30.0, "source": "gpu:0", "metric": "gpu_memory_used_bytes",
                        "value": memory(k), "step": f"soak-{k}", "labels": ""})
    return rows, steps, (pd.DataFrame(tel) if tel else None)


def test_soak_drift_is_flagged_and_a_steady_soak_is_not() -> None:
    rows, steps, tel = _soak(lambda k: 0.2 + 0.1 * k, memory=lambda k: 4e9 * (1 + 0.05 * k))
    drifting = analyze(run_of(rows, steps, telemetry=tel), SLO_SOAK)
    soak = drifting.summary["soak"]
    assert "ttft_p95_s" in soak["drifting"] and "e2e_p95_s" in soak["drifting"]
    assert soak["memory_growth"] is True
    assert len(drifting.slices) == 6 and soak["error_bursts"] == []

    rows, steps, tel = _soak(lambda k: 0.3, memory=lambda k: 4e9)
    steady = analyze(run_of(rows, steps, telemetry=tel), SLO_SOAK).summary["soak"]
    assert steady["drifting"] == [] and steady["memory_growth"] is False


def test_soak_error_burst_flags_the_slice() -> None:
    rows, steps, _ = _soak(lambda k: 0.3, errors_in=2)
    result = analyze(run_of(rows, steps), SLO_SOAK)
    assert result.summary["soak"]["error_bursts"] == ["soak-2"]
    slices = result.slices.set_index("label")
    assert slices.loc["soak-2", "errors"] == 10 and bool(slices.loc["soak-2", "error_burst"])
    assert slices.loc["soak-2", "error_rate"] == pytest.approx(10 / 60)


def test_per_instance_tables_add_up_to_the_combined_ones() -> None:
    rows = []
    for i in range(30):
        inst = "http://a:8000" if i % 3 else "http://b:8000"
        outcome = "rejected" if i % 7 == 0 else "ok"
        rows.append(request(f"r{i}", "s", i / 3.0, instance=inst, outcome=outcome,
                            ttft=None if outcome != "ok" else 0.1, e2e=None if outcome != "ok" else 0.5))
    rows.append(request("lost", "s", 5.5, outcome="not_sent"))  # never routed to an instance
    result = analyze(run_of(rows, [plan_step("s", 0)]), SLO.model_validate({"min_samples": 1}))
    combined, per = result.steps.iloc[0], result.instances
    assert set(per["instance"]) == {"http://a:8000", "http://b:8000", "(none)"}
    for key in ("arrivals", "sent", "completed", "ok"):
        assert per[key].sum() == combined[key]
    for key in ("goodput", "completion_throughput", "offered_rate"):
        assert per[key].sum() == pytest.approx(combined[key])
    merged: Counter = Counter()
    for outcomes in per["outcomes"]:
        merged.update(outcomes)
    assert dict(merged) == combined["outcomes"] == {"ok": 25, "rejected": 5, "not_sent": 1}


def test_plan_in_flight_by_littles_law() -> None:
    # one request a second, each with user E2E 2 s, passing
    rows = [request(f"r{i}", "s", float(i), ttft=0.5, e2e=2.0) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)]), SLO.model_validate({"min_samples": 1}))
    plan = plan_in_flight(result, users=4, think_time_s=6.0)
    # lambda = 4 / (6 + 2) = 0.5 req/s, L = 0.5 x 2 = 1 request in flight
    assert plan["arrival_rate"] == pytest.approx(0.5)
    assert plan["expected_in_flight"] == pytest.approx(1.0)
    assert plan["within_passing_rate"] is True and "steady state" in plan["assumption"]
    over = plan_in_flight(result, users=40, think_time_s=6.0)
    assert over["within_passing_rate"] is False and "exceeds" in over["note"]


def test_burst_vs_uniform_side_by_side() -> None:
    uniform = [request(f"u{i}", "u", float(i), ttft=0.2) for i in range(10)]
    burst = [request(f"b{i}", "b", 20.0 + i * 0.1, ttft=0.6) for i in range(10)]
    steps = [plan_step("u", 0, phase="uniform"), plan_step("b", 1, start=20.0, phase="burst")]
    result = analyze(run_of(uniform + burst, steps), SLO.model_validate({"min_samples": 1}))
    table = result.burst.set_index("metric")
    assert table.loc["ttft_p95_s", "burst"] == pytest.approx(0.6)
    assert table.loc["ttft_p95_s", "uniform"] == pytest.approx(0.2)
    assert table.loc["ttft_p95_s", "difference"] == pytest.approx(0.4)
    assert table.loc["ttft_p95_s", "ratio"] == pytest.approx(3.0)
    assert table.loc["offered_rate", "difference"] == pytest.approx(0.0)
    assert {"goodput", "slo_attainment", "rejected"} <= set(table.index)


def test_steps_columns_and_timeline() -> None:
    rows = [request(f"r{i}", "s", float(i), ttft=0.1, e2e=2.0) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)]), SLO.model_validate({"min_samples": 1}))
    assert set(STEP_COLUMNS) <= set(result.steps.columns)
    tl = result.timeline
    assert tl["arrivals"].sum() == 10 and tl["completed"].sum() == 10
    # one arrival a second, 2 s each: 2 in flight once the first two have started
    assert tl.set_index("t").loc[5.0, "in_flight"] == pytest.approx(2.0)
    assert (tl.set_index("t").loc[0.0:9.0, "step"] == "s").all()
    derived = {"ttft_s", "user_ttft_s", "e2e_s", "user_e2e_s", "tpot_s", "client_wait_s", "send_lag_s",
               "in_window", "good"}
    run = run_of(rows, [plan_step("s", 0)])
    assert derived <= set(derive_requests(run.records, {"s": (0.0, 100.0)}, SLO()).columns)
    # the analysis keeps, for every request, only what its whole-run readers draw (issue 46: a step's
    # other derived columns live while the step is analysed)
    assert set(RUN_COLUMNS) <= set(result.requests.columns) <= set(RUN_COLUMNS) | set(OPTIONAL_COLUMNS)


def test_split_without_server_queue_names_the_llamacpp_deferred_count() -> None:
    tel = pd.DataFrame({"t": np.arange(10.0), "source": "server:a", "metric": "deferred",
                        "value": [0, 1, 2, 3, 4, 4, 3, 2, 1, 0], "step": "s", "labels": ""})
    rows = [request(f"r{i}", "s", float(i), ttft=0.3, e2e=0.8) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)], telemetry=tel), SLO.model_validate({"min_samples": 1}))
    assert result.steps.iloc[0]["deferred_mean"] == pytest.approx(2.0)
    split = result.split.set_index("component")
    assert split.loc["server_queue", "basis"] == "not_reported"
    assert "2.00 requests deferred" in split.loc["server_queue", "note"]
    # no queue time: the first-token row is the whole TTFT (a remainder), and the means still add up
    assert split.loc["prefill_to_first_token", "basis"] == "remainder"
    assert split.loc["prefill_to_first_token", "mean_s"] == pytest.approx(0.3)
    parts = split.loc[["client_wait", "prefill_to_first_token", "decode"], "mean_s"].sum()
    assert parts == pytest.approx(split.loc["user_e2e", "mean_s"])
