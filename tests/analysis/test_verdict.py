"""Verdicts of a step (METRICS.md "Verdict of a step"): invalid, insufficient, fail with every
dimension named, pass; queue growth by a trend test; judge_step equal to the full analysis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analysis_frames import frame, plan_step, request, run_of

from analysis import analyze, judge_step
from analysis.summary import ladder_result
from llmload.config import SLO, Client


def _waiting(values: np.ndarray, *, start: float = 0.0) -> pd.DataFrame:
    t = start + np.arange(values.size, dtype=float)
    return pd.DataFrame({"t": t, "source": "server:a", "metric": "waiting", "value": values, "step": "s",
                         "labels": ""})


def _steady(n: int = 60, *, length: float = 60.0, **kw) -> list[dict]:
    return [request(f"r{i}", "s", i * length / n, **kw) for i in range(n)]


def test_growing_waiting_queue_fails_and_flat_noisy_one_does_not() -> None:
    slo = SLO.model_validate({"queue_growth": "forbid", "min_samples": 10})
    rng = np.random.default_rng(7)
    steps = [plan_step("s", 0, length=60.0)]
    growing = _waiting(np.linspace(0, 30, 60) + rng.normal(0, 2, 60))
    flat = _waiting(np.clip(5 + rng.normal(0, 2, 60), 0, None))
    grow_row = analyze(run_of(_steady(), steps, telemetry=growing), slo).steps.iloc[0]
    flat_row = analyze(run_of(_steady(), steps, telemetry=flat), slo).steps.iloc[0]
    assert grow_row["queue_trend_series"] == "waiting"
    assert bool(grow_row["queue_growth"]) and grow_row["verdict"] == "fail"
    assert list(grow_row["failing"]) == ["queue_growth"]
    assert grow_row["queue_trend_p"] < 0.05
    assert not bool(flat_row["queue_growth"]) and flat_row["verdict"] == "pass"


def test_growing_client_in_flight_is_caught_without_telemetry() -> None:
    slo = SLO.model_validate({"queue_growth": "forbid", "min_samples": 10})
    # each request takes longer than the last: in flight climbs from ~1 to ~30 over the window, more
    # than the arrival noise of its 60 arrivals explains (1.645 x sqrt(60) = 12.7 requests)
    rows = [request(f"r{i}", "s", float(i), ttft=0.1, e2e=1.0 + 0.5 * i) for i in range(60)]
    row = analyze(run_of(rows, [plan_step("s", 0, length=60.0)]), slo).steps.iloc[0]
    assert row["queue_trend_series"] == "in_flight"
    assert bool(row["queue_growth"]) and row["verdict"] == "fail"


def test_insufficient_when_too_few_completions() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 200})
    row = analyze(run_of(_steady(50), [plan_step("s", 0, length=60.0)]), slo).steps.iloc[0]
    assert row["verdict"] == "insufficient" and list(row["failing"]) == []


def test_the_default_floor_judges_a_short_step_of_a_slow_server_by_its_interval() -> None:
    """No min_samples written (issue 41): 60 completions whose TTFT is twice the target fail; 60 far
    under it pass; the floor (20) leaves 10 insufficient, saying how long a window would be judged."""
    slo = SLO.model_validate({"ttft_p95": "800ms"})
    over = [request(f"r{i}", "s", float(i) / 2, ttft=1.6 + 0.01 * (i % 7), e2e=2.0) for i in range(60)]
    under = [request(f"r{i}", "s", float(i) / 2, ttft=0.2 + 0.01 * (i % 7), e2e=0.5) for i in range(60)]
    few = [request(f"r{i}", "s", float(i) * 3, ttft=1.6, e2e=2.0) for i in range(10)]
    judged = {name: analyze(run_of(rows, [plan_step("s", 0, length=30.0)]), slo).steps.iloc[0]
              for name, rows in (("over", over), ("under", under), ("few", few))}
    assert judged["over"]["verdict"] == "fail" and list(judged["over"]["failing"]) == ["ttft_p95"]
    assert judged["under"]["verdict"] == "pass"
    assert judged["few"]["verdict"] == "insufficient"
    assert judged["few"]["needs_completions"] == 20
    assert judged["few"]["needs_window_s"] == pytest.approx(60.0)  # 10 completions in 30 s: 20 in 60


def test_an_undecided_step_says_how_many_completions_would_decide_it() -> None:
    """A step whose P95 interval straddles the target: its share over the target and the effective
    trials it showed give the completions that would put the share's interval on one side of 5%."""
    slo = SLO.model_validate({"ttft_p95": "1s"})
    rng = np.random.default_rng(0)
    ttft = rng.uniform(0.2, 0.6, 60)
    ttft[rng.choice(60, 5, replace=False)] = 1.2  # 5 of 60 over the target, spread in time
    rows = [request(f"r{i}", "s", float(i) / 2, ttft=float(ttft[i]), e2e=2.0) for i in range(60)]
    row = analyze(run_of(rows, [plan_step("s", 0, length=30.0)]), slo).steps.iloc[0]
    assert row["verdict"] == "inconclusive" and list(row["undecided_targets"]) == ["ttft_p95"]
    share = row["ttft_p95_over"]  # 5 of 60 over: 8.3%, near the 5% level
    assert share == pytest.approx(5 / 60)
    assert row["needs_completions"] > 60
    assert row["needs_window_s"] == pytest.approx(30.0 * row["needs_completions"] / 60)


def test_count_dimensions_fail_even_with_few_completions() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 200, "allow_oom": False})
    rows = _steady(50) + [request("o", "s", 30.5, ttft=None, e2e=None, outcome="oom")]
    row = analyze(run_of(rows, [plan_step("s", 0, length=60.0)]), slo).steps.iloc[0]
    assert row["verdict"] == "fail" and list(row["failing"]) == ["oom"]


def test_every_failing_dimension_named_furthest_first() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "e2e_p95": "2s", "tpot_p95": "1s", "max_reject_ratio": 0.5,
                              "min_samples": 10})
    # ttft 1.5 (1.5x), e2e 5 (2.5x), tpot (5-1.5)/4 = 0.875 (passes)
    rows = [request(f"r{i}", "s", float(i), ttft=1.5, e2e=5.0, out=5) for i in range(20)]
    row = analyze(run_of(rows, [plan_step("s", 0, length=20.0)]), slo).steps.iloc[0]
    assert row["verdict"] == "fail"
    assert list(row["failing"]) == ["e2e_p95", "ttft_p95"]


def test_invalid_when_the_generator_fell_behind() -> None:
    slo = SLO.model_validate({"min_samples": 1})
    steps = [plan_step("s", 0, length=10.0)]
    short = [request(f"r{i}", "s", float(i)) for i in range(9)] + [request("n", "s", 9.5, outcome="not_sent")]
    row = analyze(run_of(short, steps), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "invalid" and list(row["failing"]) == ["rate_shortfall"]  # 0.9 < 1.0 x 0.98
    # 50 ms late at 1 req/s, judged against a 200 ms TTFT target that TTFT (190 ms) is 10 ms from:
    # limit 0.1 x 200 ms = 20 ms
    slo = SLO.model_validate({"min_samples": 1, "ttft_p95": "200ms"})
    lagging = [request(f"r{i}", "s", float(i), wait=0.05, ttft=0.19) for i in range(10)]
    row = analyze(run_of(lagging, steps), slo, Client()).steps.iloc[0]
    assert row["verdict"] == "invalid" and list(row["failing"]) == ["send_lag"]
    # the same wait at the client cap is client wait, not generator lag: valid
    capped = [request(f"r{i}", "s", float(i), wait=0.05, ttft=0.19, capped=True) for i in range(10)]
    assert analyze(run_of(capped, steps), slo, Client()).steps.iloc[0]["verdict"] == "pass"


def test_closed_loop_step_has_no_rate_shortfall_check() -> None:
    slo = SLO.model_validate({"min_samples": 1})
    rows = [request(f"r{i}", "s", float(i)) for i in range(5)] + [request("n", "s", 6.0, outcome="not_sent")]
    step = plan_step("s", 0, rate=None, phase="concurrency", concurrency=4)
    row = analyze(run_of(rows, [step]), slo).steps.iloc[0]
    assert np.isnan(row["offered_rate"]) and row["verdict"] == "pass"


def test_judge_step_matches_the_full_analysis() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5, "max_reject_ratio": 0.0})
    # TTFTs in a scrambled order: a steady ramp would be one autocorrelated trend, whose p95 interval
    # (analysis.intervals) straddles the target (inconclusive), not the clear failure this test needs
    rows = [request(f"a{i}", "a", float(i), ttft=0.2 * ((3 * i) % 10)) for i in range(10)]
    rows += [request("x", "a", 3.5, ttft=None, e2e=None, outcome="rejected")]
    rows += [request(f"b{i}", "b", 20.0 + i) for i in range(10)]
    steps = [plan_step("a", 0), plan_step("b", 1, start=20.0)]
    full = analyze(run_of(rows, steps), slo).steps.iloc[0]
    verdict, failing, stats = judge_step(frame(rows), steps[0], slo, Client(), None)
    assert verdict == full["verdict"] == "fail"
    assert failing == list(full["failing"]) == ["reject_ratio", "ttft_p95"]
    for key in ("goodput", "slo_attainment", "ttft_p95_s", "in_flight_mean", "arrivals", "completion_throughput"):
        assert stats[key] == pytest.approx(full[key])


def test_ladder_result_last_passing_and_what_failed_first() -> None:
    steps = pd.DataFrame({
        "label": ["r1", "r2", "r4", "r3", "r8"], "index": [0, 1, 2, 3, 4],
        "phase": ["ladder", "ladder", "ladder", "refine", "ladder"], "target_rate": [1.0, 2.0, 4.0, 3.0, 8.0],
        "concurrency": [None] * 5, "verdict": ["pass", "pass", "fail", "pass", "not_run"],
        "failing": [[], [], ["ttft_p95", "queue_growth"], [], []],
    })
    result = ladder_result(steps)
    assert result["last_passing_rate"] == 3.0
    assert result["first_failing_rate"] == 4.0
    assert result["failed_first"] == ["ttft_p95", "queue_growth"]


def _queue_histogram(first: float, second: float) -> pd.DataFrame:
    """vLLM-like queue-time buckets (0.3, 0.5, +Inf): `first` observations under 0.3 s, `second` in (0.3, 0.5]."""
    cumulative = [first, first + second, first + second]
    return pd.DataFrame({"t": [-1.0] * 3 + [9.0] * 3, "source": "server:a", "metric": "queue_time_seconds_bucket",
                         "value": [0.0, 0.0, 0.0, *cumulative], "step": "s",
                         "labels": ["le=0.3", "le=0.5", "le=+Inf"] * 2})


def test_histogram_queue_percentile_judged_only_when_the_bucket_decides() -> None:
    rows = [request(f"r{i}", "s", float(i)) for i in range(10)]
    steps = [plan_step("s", 0)]
    # all in [0, 0.3]: p95 = 0.285, but the truth may be anywhere in the bucket: 200 ms is undecided
    slo = SLO.model_validate({"server_queue_p95": "200ms", "min_samples": 5})
    result = analyze(run_of(rows, steps, telemetry=_queue_histogram(10, 0)), slo)
    row = result.steps.iloc[0]
    assert row["server_queue_p95_s"] == pytest.approx(0.285) and row["verdict"] == "inconclusive"
    assert list(row["undecided"]) == ["server_queue_p95"] and list(row["undecided_targets"]) == ["server_queue_p95"]
    assert any("straddles" in w for w in result.warnings)
    # all in (0.3, 0.5]: every value is over 250 ms whatever the interpolation says: fail
    slo = SLO.model_validate({"server_queue_p95": "250ms", "min_samples": 5})
    row = analyze(run_of(rows, steps, telemetry=_queue_histogram(0, 10)), slo).steps.iloc[0]
    assert row["verdict"] == "fail" and list(row["failing"]) == ["server_queue_p95"]
    assert row["server_queue_p95_resolution_s"] == pytest.approx(0.2)


# ---------------------------------------------------------------- no false passes (issue 19)

def test_a_step_whose_latency_targets_are_all_unmeasured_does_not_pass() -> None:
    """ok records without any output time (as empty 200 streams once were) carry no TTFT or E2E:
    nothing was judged, so the step is insufficient, never pass."""
    slo = SLO.model_validate({"ttft_p95": "1s", "e2e_p95": "5s", "min_samples": 5})
    rows = [request(f"r{i}", "s", float(i), ttft=None, e2e=None) for i in range(10)]
    row = analyze(run_of(rows, [plan_step("s", 0)]), slo).steps.iloc[0]
    assert row["completed"] == 10 and list(row["unmeasured"]) == ["ttft_p95", "e2e_p95"]
    assert row["verdict"] == "insufficient"


def test_a_checked_target_that_was_not_measured_never_leaves_a_step_pass() -> None:
    """Issue 33 item 6: TTFT measured and met, server queue checked but the server reports none: the
    step is inconclusive and names the unmeasured target (before, it passed on TTFT alone)."""
    slo = SLO.model_validate({"ttft_p95": "1s", "server_queue_p95": "300ms", "min_samples": 5})
    rows = [request(f"r{i}", "s", float(i)) for i in range(10)]
    row = analyze(run_of(rows, [plan_step("s", 0)]), slo).steps.iloc[0]
    assert list(row["unmeasured"]) == ["server_queue_p95"] and list(row["failing"]) == []
    assert row["verdict"] == "inconclusive" and list(row["undecided_targets"]) == ["server_queue_p95"]
    met = analyze(run_of(rows, [plan_step("s", 0)]), SLO.model_validate({"ttft_p95": "1s", "min_samples": 5}))
    assert met.steps.iloc[0]["verdict"] == "pass"  # the same step, the target not checked: it passes


def test_most_requests_failing_fails_the_step_without_a_written_error_limit() -> None:
    """The sim exiting 12 s into a 15 s step: 52 ok, 100 connect errors. No `max_error_ratio` written:
    the default limit fails it; an explicit `null` turns the check off."""
    rows = [request(f"ok{i}", "s", i * 0.07) for i in range(52)]
    rows += [request(f"ce{i}", "s", 3.64 + i * 0.06, ttft=None, e2e=None, outcome="connect_error")
             for i in range(100)]
    steps = [plan_step("s", 0, rate=10.0, length=10.0)]
    row = analyze(run_of(rows, steps), SLO.model_validate({"ttft_p95": "1s", "min_samples": 5})).steps.iloc[0]
    assert row["verdict"] == "fail" and list(row["failing"]) == ["error_ratio"]
    off = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5, "max_error_ratio": None})
    assert analyze(run_of(rows, steps), off).steps.iloc[0]["verdict"] == "pass"


def test_a_partial_step_never_passes_and_its_stop_cancellations_are_not_errors() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5})
    rows = _steady(50, length=10.0) + [request(f"c{i}", "s", 9.5 + i * 0.1, ttft=None, e2e=None,
                                               outcome="cancelled") for i in range(5)]
    partial = analyze(run_of(rows, [plan_step("s", 0, status="partial", length=10.0)]), slo).steps.iloc[0]
    assert partial["error_ratio"] == pytest.approx(5 / 55)  # over the default limit, but all cancellations
    assert partial["verdict"] == "insufficient" and list(partial["failing"]) == []
    full = analyze(run_of(rows, [plan_step("s", 0, length=10.0)]), slo).steps.iloc[0]
    assert full["verdict"] == "fail" and list(full["failing"]) == ["error_ratio"]
    assert ladder_result(analyze(run_of(_steady(50, length=10.0), [plan_step("s", 0, status="partial", length=10.0)]),
                                 slo).steps)["last_passing_rate"] is None
