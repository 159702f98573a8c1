"""Per-step numbers on hand-built records whose answers are worked out by hand (METRICS.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from analysis_frames import frame, plan_step, request, run_of

from analysis import analyze
from analysis.requests import derive_requests
from llmload.config import SLO

SLO_BASIC = SLO.model_validate({"ttft_p95": "1s", "tpot_p95": "100ms", "min_samples": 1})


def _step_row(rows: list[dict], slo: SLO = SLO_BASIC, **step_kw) -> pd.Series:
    result = analyze(run_of(rows, [plan_step("s", 0, **step_kw)]), slo)
    return result.steps.iloc[0]


def test_goodput_counts_ok_requests_meeting_every_threshold() -> None:
    # window [0, 10): ten arrivals, one a second
    rows = [request(f"g{i}", "s", float(i), ttft=0.2, e2e=0.6, out=5) for i in range(5)]  # tpot 0.1: good
    rows += [request("slow_ttft", "s", 5.0, ttft=1.5, e2e=1.9, out=5)]                    # ttft over 1 s
    rows += [request("slow_tpot", "s", 6.0, ttft=0.2, e2e=1.0, out=5)]                    # tpot 0.2 over
    rows += [request("one_token", "s", 7.0, ttft=0.3, e2e=0.3, out=1)]                    # no tpot: on ttft
    rows += [request("rejected", "s", 8.0, ttft=None, e2e=None, outcome="rejected")]
    rows += [request("late", "s", 9.0, ttft=0.2, e2e=0.6, out=5, outcome="quality_fail")]  # not ok: not good
    rows += [request("warmup", "s", -1.0, ttft=0.2, e2e=0.6, out=5)]                      # before the window
    row = _step_row(rows, start=0.0, length=10.0)
    # good: g0..g4 and one_token = 6 requests in 10 s
    assert row["goodput"] == pytest.approx(0.6)
    assert row["arrivals"] == 10
    assert row["slo_attainment"] == pytest.approx(6 / 10)
    assert row["ok"] == 8 and row["completed"] == 9  # quality_fail streamed to the end: a latency sample


def test_attainment_keeps_rejects_and_timeouts_in_the_denominator() -> None:
    rows = [request(f"ok{i}", "s", float(i), ttft=0.1, e2e=0.5) for i in range(6)]
    rows += [request("rej", "s", 6.0, ttft=None, e2e=None, outcome="rejected"),
             request("to", "s", 7.0, ttft=0.1, e2e=None, outcome="timeout"),
             request("cancel", "s", 8.0, ttft=None, e2e=None, outcome="cancelled"),
             request("oom", "s", 9.0, ttft=None, e2e=None, outcome="oom")]
    row = _step_row(rows)
    assert row["slo_attainment"] == pytest.approx(6 / 10)
    assert row["goodput"] == pytest.approx(0.6)
    assert row["reject_ratio"] == pytest.approx(0.1)
    assert row["error_ratio"] == pytest.approx(0.3)  # timeout, cancelled, oom
    assert row["oom"] == 1
    assert row["outcomes"] == {"ok": 6, "rejected": 1, "timeout": 1, "cancelled": 1, "oom": 1}
    # every ok request ended at scheduled + 0.5 s < 10: six completions in 10 s
    assert row["completion_throughput"] == pytest.approx(0.6)


def test_tpot_leaves_one_token_answers_out_and_counts_them() -> None:
    rows = [request("a", "s", 0.0, ttft=0.1, e2e=0.5, out=5),   # (0.5-0.1)/4 = 0.1
            request("b", "s", 1.0, ttft=0.1, e2e=0.5, out=3),   # 0.4/2 = 0.2
            request("c", "s", 2.0, ttft=0.1, e2e=0.9, out=2),   # 0.8/1 = 0.8
            request("d", "s", 3.0, ttft=0.3, e2e=0.3, out=1),   # no TPOT
            request("e", "s", 4.0, ttft=0.3, e2e=0.3, out=1)]   # no TPOT
    row = _step_row(rows)
    assert row["tpot_excluded"] == 2
    expected = np.percentile([0.1, 0.2, 0.8], [50, 95, 99])
    assert row["tpot_p50_s"] == pytest.approx(0.2)
    assert [row["tpot_p50_s"], row["tpot_p95_s"], row["tpot_p99_s"]] == pytest.approx(list(expected))
    assert row["tpot_max_s"] == pytest.approx(0.8)
    assert row["tpot_p95_s"] == pytest.approx(0.2 + 0.9 * 0.6)  # linear: rank 1.9 between 0.2 and 0.8


def test_percentiles_are_linear_interpolation_of_raw_values() -> None:
    rows = [request(f"r{i}", "s", float(i), ttft=0.1 * (i + 1), e2e=2.0) for i in range(10)]
    row = _step_row(rows)
    # sorted TTFTs 0.1..1.0; rank (n-1) q: p50 -> 4.5 -> 0.55, p95 -> 8.55 -> 0.955, p99 -> 8.91 -> 0.991
    assert row["ttft_p50_s"] == pytest.approx(0.55)
    assert row["ttft_p95_s"] == pytest.approx(0.955)
    assert row["ttft_p99_s"] == pytest.approx(0.991)
    assert row["ttft_max_s"] == pytest.approx(1.0)
    # user TTFT adds the client wait (0 here); E2E all 2.0
    assert row["user_ttft_p50_s"] == pytest.approx(0.55)
    assert row["e2e_p95_s"] == pytest.approx(2.0)


def test_itl_chunk_and_token_level() -> None:
    # 5 events from 0.1 to 0.5 s: gaps 0.1; events carry 2 tokens each -> token-level 0.05
    rows = [request("a", "s", 0.0, ttft=0.1, e2e=0.5, out=10, events=5, counts=[2, 2, 2, 2, 2]),
            request("b", "s", 1.0, ttft=0.1, e2e=0.9, out=3, events=3)]  # gaps 0.4, no counts
    row = _step_row(rows)
    assert row["itl_p50_s"] == pytest.approx(0.1)
    assert row["itl_max_s"] == pytest.approx(0.4)
    assert row["itl_token_p50_s"] == pytest.approx(0.05)
    assert row["itl_token_max_s"] == pytest.approx(0.05)


def test_client_wait_and_send_lag_split_by_cap() -> None:
    rows = [request("free", "s", 0.0, wait=0.002),
            request("capped", "s", 1.0, wait=3.0, capped=True)]
    row = _step_row(rows)
    assert row["client_wait_max_s"] == pytest.approx(3.0)
    assert row["send_lag_max_s"] == pytest.approx(0.002)  # the capped request's wait is not lag
    assert row["user_ttft_max_s"] == pytest.approx(3.1)


def test_records_without_a_capped_column_count_every_wait_as_send_lag() -> None:
    """Records that predate `capped` (or a hand-built frame) mean no request waited at a cap: the send
    lag is the whole wait (this raised `Array conditional must be same shape` before)."""
    rows = [{k: v for k, v in request(f"r{i}", "s", float(i), wait=0.001 * (i + 1)).items() if k != "capped"}
            for i in range(3)]
    out = derive_requests(pd.DataFrame(rows), {"s": (0.0, 10.0)}, SLO())
    assert out["send_lag_s"].to_list() == pytest.approx([0.001, 0.002, 0.003])
    assert out["send_lag_s"].equals(out["client_wait_s"])


def test_in_flight_time_average_and_littles_law() -> None:
    # one request a second, each 2 s long from sending: in flight 2 on average once running
    rows = [request(f"r{i}", "s", float(i), ttft=0.5, e2e=2.0) for i in range(-2, 10)]
    row = _step_row(rows)
    assert row["in_flight_mean"] == pytest.approx(2.0)
    # completions in [0,10): requests scheduled -2..7 end at 0..9 -> 10 / 10 s; mean E2E 2 -> L = 2
    assert row["completion_throughput"] == pytest.approx(1.0)
    assert row["littles_law_ratio"] == pytest.approx(1.0)


def test_output_mismatch_and_token_distribution() -> None:
    rows = [request("a", "s", 0.0, out=5, planned_out=5), request("b", "s", 1.0, out=3, planned_out=5),
            request("c", "s", 2.0, out=5, planned_out=5), request("d", "s", 3.0, out=5, planned_out=5)]
    row = _step_row(rows)
    assert row["output_mismatch_ratio"] == pytest.approx(0.25)
    assert row["output_tokens_mean"] == pytest.approx(4.5)
    assert row["input_tokens_p50"] == pytest.approx(100)


def test_offered_and_achieved_rate_with_unsent_arrivals() -> None:
    rows = [request(f"r{i}", "s", float(i)) for i in range(8)]
    rows += [request("n1", "s", 8.0, outcome="not_sent"), request("n2", "s", 9.0, outcome="not_sent")]
    row = _step_row(rows)
    assert row["offered_rate"] == pytest.approx(1.0)
    assert row["achieved_rate"] == pytest.approx(0.8)
    assert row["sent"] == 8


def test_telemetry_numbers_of_a_window() -> None:
    t = np.arange(0.0, 10.0, 1.0)
    tel = pd.DataFrame({
        "t": np.concatenate([t, t, t, t, [-1.0], t, t]),
        "source": ["server:a"] * 10 + ["server:b"] * 10 + ["server:a"] * 10 + ["gpu:0"] * 10 + ["server:a"] * 11
        + ["worker:1"] * 10,
        "metric": ["running"] * 20 + ["kv_usage"] * 10 + ["gpu_memory_used_bytes"] * 10
        + ["preemptions_total"] * 11 + ["worker_cpu"] * 10,
        "value": np.concatenate([np.full(10, 3.0), np.full(10, 1.0), np.linspace(0.1, 0.6, 10),
                                 np.full(10, 5e9), [4.0], [4, 4, 5, 5, 1, 2, 2, 2, 3, 3], np.full(10, 0.3)]),
        "step": "s", "labels": "",
    })
    rows = [request(f"r{i}", "s", float(i)) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)], telemetry=tel), SLO_BASIC)
    row = result.steps.iloc[0]
    assert row["running_mean"] == pytest.approx(4.0)  # two instances: 3 + 1
    assert row["kv_usage_peak"] == pytest.approx(0.6)
    assert row["gpu_memory_peak_bytes"] == pytest.approx(5e9)
    # counter from the sample before the window (4): +0 +0 +1 +0, reset to 1 (+1), +1 +0 +0 +1 +0 = 4
    assert row["preemptions"] == pytest.approx(4.0)
    assert row["worker_cpu_max"] == pytest.approx(0.3)
    assert math.isnan(row["waiting_mean"])


def test_server_queue_from_per_request_server_timings() -> None:
    rows = [request(f"r{i}", "s", float(i), ttft=0.5, server_queue=0.1 * (i + 1)) for i in range(5)]
    result = analyze(run_of(rows, [plan_step("s", 0)]), SLO_BASIC)
    row = result.steps.iloc[0]
    assert row["server_queue_basis"] == "per-request"
    assert row["server_queue_p50_s"] == pytest.approx(0.3)
    split = result.split.set_index("component")
    # per-request means add up: wait 0 + queue 0.3 + prefill (0.5 - 0.3) + decode 0 ... = user E2E 0.5
    assert split.loc["server_queue", "mean_s"] == pytest.approx(0.3)
    assert split.loc["prefill_to_first_token", "mean_s"] == pytest.approx(0.2)
    parts = split.loc[["client_wait", "server_queue", "prefill_to_first_token", "decode"], "mean_s"].sum()
    assert parts == pytest.approx(split.loc["user_e2e", "mean_s"])
    assert split.loc["user_e2e", "share"] == pytest.approx(1.0)


def test_server_queue_mean_from_histogram_sum_and_count() -> None:
    t = np.array([-1.0, 5.0, 9.0])
    tel = pd.DataFrame({"t": np.concatenate([t, t]), "source": "server:a",
                        "metric": ["queue_time_seconds_sum"] * 3 + ["queue_time_seconds_count"] * 3,
                        "value": [1.0, 2.0, 4.0, 10.0, 15.0, 20.0], "step": "s", "labels": ""})
    tel = pd.concat([tel, pd.DataFrame({"t": [5.0], "source": "server:a", "metric": "queue_time_seconds_bucket",
                                        "value": [1.0], "step": "s", "labels": "le=+Inf"})])
    rows = [request(f"r{i}", "s", float(i)) for i in range(5)]
    row = analyze(run_of(rows, [plan_step("s", 0)], telemetry=tel), SLO_BASIC).steps.iloc[0]
    assert row["server_queue_basis"] == "histogram"
    assert row["server_queue_mean_s"] == pytest.approx(3.0 / 10.0)  # sum +3 over count +10


def test_server_queue_percentiles_from_the_vllm_histogram() -> None:
    # bucket deltas over the window: <=0.1: 2, <=0.5: 4, +Inf: 4 (Prometheus histogram_quantile):
    # p50 rank 2 -> end of the first bucket 0.1; p95 rank 3.8 -> 0.1 + 0.4 x (3.8 - 2) / 2 = 0.46
    t = [-1.0, -1.0, -1.0, 9.0, 9.0, 9.0]
    tel = pd.DataFrame({"t": t, "source": "server:a", "metric": "queue_time_seconds_bucket",
                        "value": [0.0, 0.0, 0.0, 2.0, 4.0, 4.0], "step": "s",
                        "labels": ["le=0.1", "le=0.5", "le=+Inf"] * 2})
    rows = [request(f"r{i}", "s", float(i)) for i in range(5)]
    row = analyze(run_of(rows, [plan_step("s", 0)], telemetry=tel), SLO_BASIC).steps.iloc[0]
    assert row["server_queue_basis"] == "histogram"
    assert row["server_queue_p50_s"] == pytest.approx(0.1)
    assert row["server_queue_p95_s"] == pytest.approx(0.46)


def test_gpu_memory_peak_sums_gpus_at_one_sample_time() -> None:
    tel = pd.DataFrame({"t": [1.0, 1.0, 2.0, 2.0], "source": ["gpu:0", "gpu:1", "gpu:0", "gpu:1"],
                        "metric": "gpu_memory_used_bytes", "value": [5e9, 3e9, 6e9, 1e9], "step": "s",
                        "labels": ""})
    rows = [request(f"r{i}", "s", float(i)) for i in range(5)]
    row = analyze(run_of(rows, [plan_step("s", 0)], telemetry=tel), SLO_BASIC).steps.iloc[0]
    assert row["gpu_memory_peak_bytes"] == pytest.approx(8e9)  # 5 + 3 at t=1 beats 6 + 1 at t=2


def test_event_gaps_in_float32_agree_with_float64() -> None:
    from analysis.requests import event_gaps

    rows = frame([request("a", "s", 1.7e9, ttft=0.1, e2e=0.5, out=10, events=5, counts=[2, 2, 2, 2, 2]),
                  request("b", "s", 1.7e9 + 1, ttft=0.1, e2e=0.9, out=3, events=3)])
    exact = event_gaps(rows["token_times"], rows["token_counts"])
    small = event_gaps(rows["token_times"], rows["token_counts"], float32_above=0)
    assert exact.chunk.dtype == np.float64 and small.chunk.dtype == np.float32
    for (a, b) in zip(exact.select(np.array([0, 1])), small.select(np.array([0, 1])), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    chunk, token = exact.select(np.array([1]))  # NaN marks each request's first event (no gap)
    np.testing.assert_allclose(chunk[~np.isnan(chunk)], [0.4, 0.4], atol=1e-6)
    assert np.isnan(token).all()  # request b carries no token counts


def test_a_coarse_histogram_p95_is_given_only_as_its_bucket() -> None:
    """All queue times in vLLM's first bucket (0, 0.3]: the interpolated p95 (0.285) says nothing the
    bucket does not, so summary.json and the worksheet give the range and no point (issue 13)."""
    from analysis_frames import plan_step, request, run_of

    from analysis import analyze

    tel = pd.DataFrame({"t": [-1.0] * 3 + [9.0] * 3, "source": "server:a", "metric": "queue_time_seconds_bucket",
                        "value": [0.0, 0.0, 0.0, 10.0, 10.0, 10.0], "step": "s",
                        "labels": ["le=0.3", "le=0.5", "le=+Inf"] * 2})
    sums = pd.DataFrame({"t": [-1.0, -1.0, 9.0, 9.0], "source": "server:a",
                         "metric": ["queue_time_seconds_sum", "queue_time_seconds_count"] * 2,
                         "value": [0.0, 0.0, 0.2, 10.0], "step": "s", "labels": ""})
    rows = [request(f"r{i}", "s", float(i)) for i in range(10)]
    result = analyze(run_of(rows, [plan_step("s", 0)], telemetry=pd.concat([tel, sums])),
                     SLO.model_validate({"min_samples": 5}))
    row = result.steps.iloc[0]
    assert row["server_queue_p95_range_s"] == [0.0, 0.3] and row["server_queue_mean_s"] == pytest.approx(0.02)
    step = result.summary["steps"][0]
    assert step["server_queue_p95_s"] is None and step["server_queue_p95_range_s"] == [0.0, 0.3]
    assert step["split"]["server_queue_mean_s"] == pytest.approx(0.02)
    assert step["split"]["basis"]["server_queue"] == "histogram"
    sheet = result.worksheet.iloc[0]
    assert pd.isna(sheet["observed.server_queue_p95_s"]) and sheet["observed.server_queue_p95_high_s"] == 0.3


def test_achieved_rate_and_goodput_count_only_sends_inside_the_window() -> None:
    """Issue 20: ten arrivals one a second in [0, 10); the generator fell behind and sent three of them
    only at 10.5 s, after the window ended (ok and fast once sent). Offered 1/s; achieved and goodput
    count the others: sent in the window, held at the client cap (dispatched on time), or due in the
    window's last moment and sent a few ms after its end (edge jitter, within `SEND_GRACE_S`)."""
    rows = [request(f"on{i}", "s", float(i)) for i in range(5)]
    rows += [request(f"late{i}", "s", 5.0 + i, wait=5.5 - i) for i in range(3)]  # sent at 10.5
    rows += [request("capped", "s", 8.0, wait=2.5, capped=True)]                  # held at the cap
    rows += [request("edge", "s", 9.99, wait=0.02)]                              # sent at 10.01
    row = _step_row(rows, start=0.0, length=10.0)
    assert row["offered_rate"] == pytest.approx(1.0)
    assert row["achieved_rate"] == pytest.approx(0.7)
    assert row["goodput"] == pytest.approx(0.7) and row["slo_attainment"] == pytest.approx(0.7)
    assert row["ok"] == 10  # the late ones are still ok requests with their own latencies


def test_good_output_tokens_never_exceed_output_tokens() -> None:
    # window [0, 10): ten good arrivals, each 20 tokens over 3 s: those sent from t=7 finish after the
    # window (counted by arrival they were good, by finish time they are not in output tokens/s)
    rows = [request(f"r{i}", "s", float(i), ttft=0.2, e2e=3.0, out=20) for i in range(10)]
    slo = SLO.model_validate({"ttft_p95": "1s", "e2e_p95": "5s", "min_samples": 1})
    row = _step_row(rows, slo)
    assert row["output_tokens_per_s"] == pytest.approx(7 * 20 / 10)  # r0..r6 end before 10 s
    assert row["good_output_tokens_per_s"] == pytest.approx(7 * 20 / 10)  # the same requests, all good
    assert row["good_output_tokens_per_s"] <= row["output_tokens_per_s"]


def test_a_closed_loop_levels_last_batch_ending_at_its_windows_end_counts() -> None:
    """A closed-loop level's window ends as its last request does (drained): in virtual time a batch of
    equal requests ends at exactly that instant, and each of them finished in the window. An open-loop
    step's window is planned, and a request ending at its end belongs to the next one."""
    rows = [request(f"a{i}", "s", 0.0, ttft=0.1, e2e=5.0, out=5) for i in range(4)]
    rows += [request(f"b{i}", "s", 5.0, ttft=0.1, e2e=5.0, out=5) for i in range(4)]  # they end at 10.0
    closed = _step_row(rows, start=0.0, length=10.0, phase="probe", rate=None, concurrency=4)
    assert closed["completion_throughput"] == pytest.approx(8 / 10.0)
    opened = _step_row(rows, start=0.0, length=10.0)
    assert opened["completion_throughput"] == pytest.approx(4 / 10.0)
