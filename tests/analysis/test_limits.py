"""The limit of a step (analysis/limits.py) on hand-built rows and telemetry: one case per kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.limits import (
    LIMIT_KINDS,
    OOM_ADVICE,
    classify_limit,
    limit_answer,
    limit_sentence,
    server_info,
    step_limits,
    window_figures,
)
from analysis.telemetry_stats import TelemetryIndex


def _row(**kw):
    row = {"label": "r4.00", "verdict": "fail", "failing": ["ttft_p95"], "offered_rate": 4.0,
           "window_start": 0.0, "window_end": 60.0, "running_mean": 2.0, "waiting_mean": 0.0,
           "kv_usage_peak": 0.1, "preemptions": 0.0, "client_wait_p95_s": 0.001, "tpot_p95_s": 0.03,
           "split": {"server_queue_mean_s": 0.1, "prefill_mean_s": 0.05,
                     "basis": {"server_queue": "histogram"}}}
    row.update(kw)
    return row


def _window(**kw):
    out = {"running_at_slots_share": 0.0, "running_peak": 2.0, "gpu_utilization_mean": float("nan"),
           "capped_share": 0.0, "received_rate": 4.0, "telemetry": {"running": True}}
    out.update(kw)
    return out


SERVER = {"flavor": "vllm", "slots": 6, "slots_source": "conditions.max_num_seqs",
          "client_max_concurrency": 64, "instances": 1, "max_num_batched_tokens": None}


def test_batch_slots_names_slots_queue_and_kv():
    row = _row(running_mean=5.9, waiting_mean=3.2, kv_usage_peak=0.14,
               split={"server_queue_mean_s": 0.9, "prefill_mean_s": 0.05, "basis": {}})
    limit = classify_limit(row, _window(running_at_slots_share=0.93), SERVER)
    assert limit["kind"] == "batch_slots"
    assert limit["evidence"]["slots"] == 6 and limit["evidence"]["waiting_mean"] == 3.2
    text = limit_sentence(limit)
    answer = limit_answer({**row, "offered_rate": 4.6, "limit": limit})
    assert answer.startswith("TTFT p95 broke first at about 4.6 req/s: all 6 batch slots busy")
    assert text.startswith("all 6 batch slots busy and requests waiting 900 ms on average in the server queue, "
                           "KV cache at 14%; the lever: raise max_num_seqs")


def test_kv_cache_by_preemptions_or_full_cache_with_waiting():
    assert classify_limit(_row(preemptions=12.0), _window(), SERVER)["kind"] == "kv_cache"
    full = _row(kv_usage_peak=0.99, waiting_mean=4.0)
    assert classify_limit(full, _window(running_at_slots_share=0.0), SERVER)["kind"] == "kv_cache"
    # a full cache that nobody waits for is no limit yet
    assert classify_limit(_row(kv_usage_peak=0.99), _window(), SERVER)["kind"] != "kv_cache"
    # llama.cpp's "KV usage" is its slots' context: never a kv_cache limit by itself
    llama = {**SERVER, "flavor": "llamacpp"}
    assert classify_limit(full, _window(), llama)["kind"] != "kv_cache"
    assert "12 requests preempted" in limit_sentence(classify_limit(_row(preemptions=12.0), _window(), SERVER))


def test_prefill_when_ttft_is_mostly_prefill_and_slots_free():
    row = _row(split={"server_queue_mean_s": 0.2, "prefill_mean_s": 1.4, "basis": {}}, input_tokens_mean=3000,
               waiting_mean=1.0)
    limit = classify_limit(row, _window(running_at_slots_share=0.0), SERVER)
    assert limit["kind"] == "prefill" and limit["evidence"]["prefill_share"] == pytest.approx(0.875)
    # the same split on a passing step is nothing: prefill always dominates an idle server's TTFT
    assert classify_limit({**row, "verdict": "pass", "failing": []}, _window(), SERVER)["kind"] == "none"


def test_decode_when_tpot_fails_first():
    row = _row(failing=["tpot_p95", "ttft_p95"], tpot_p95_s=0.09, running_mean=40.0)
    limit = classify_limit(row, _window(running_at_slots_share=0.9), SERVER,
                           baseline={"label": "r0.50", "tpot_p95_s": 0.03, "running_mean": 3.0})
    assert limit["kind"] == "decode" and limit["evidence"]["baseline_tpot_p95_s"] == 0.03
    assert "TPOT p95 90 ms against 30 ms at the lightest step" in limit_sentence(limit)


def test_decode_quotes_the_decode_target_that_failed():
    """A TPOT p99 or ITL p95 that failed is quoted as itself, never as the TPOT p95 beside it."""
    row = _row(failing=["tpot_p99"], tpot_p95_s=0.046, tpot_p99_s=0.064, running_mean=9.5)
    limit = classify_limit(row, _window(), SERVER,
                           baseline={"label": "r0.50", "tpot_p95_s": 0.03, "tpot_p99_s": 0.046})
    assert limit["kind"] == "decode" and limit["evidence"]["decode_key"] == "tpot_p99"
    assert limit_sentence(limit).startswith("TPOT p99 64 ms against 46 ms at the lightest step")
    itl = classify_limit(_row(failing=["itl_p95"], itl_p95_s=0.07), _window(), SERVER)
    assert limit_sentence(itl).startswith("ITL p95 70 ms")


def test_gpu_client_cap_generator_none_unknown():
    assert classify_limit(_row(), _window(gpu_utilization_mean=0.99), SERVER)["kind"] == "gpu"
    oom = classify_limit(_row(failing=["oom"], oom=3), _window(), SERVER)
    assert oom["kind"] == "gpu" and "3 requests failed out of GPU memory" in limit_sentence(oom)
    assert oom["advice"] == OOM_ADVICE and "busy" not in oom["advice"]  # out of memory, not a busy GPU
    capped = classify_limit(_row(client_wait_p95_s=12.6), _window(capped_share=0.91, received_rate=5.1), SERVER)
    assert capped["kind"] == "client_cap" and capped["evidence"]["received_rate"] == 5.1
    assert "91% of arrivals waited for one of the client's 64 connection slots" in limit_sentence(capped)
    kept = {"kind": "client_cap", "evidence": {"capped_share": 0.5}, "advice": "raise it"}
    held = classify_limit(_row(limit=kept), _window(), SERVER)  # the verdict's own: kept, server figures added
    assert held["kind"] == "client_cap" and held["advice"] == "raise it" and held["evidence"]["capped_share"] == 0.5
    assert held["evidence"]["waiting_mean"] == 0.0
    invalid = _row(verdict="invalid", invalid_reasons=[{"check": "send_lag"}])
    assert classify_limit(invalid, _window(), SERVER)["kind"] == "generator"
    assert classify_limit(_row(verdict="pass", failing=[]), _window(), SERVER)["kind"] == "none"
    bare = {"label": "r1", "verdict": "fail", "failing": ["ttft_p95"], "split": None}
    unknown = classify_limit(bare, {"telemetry": {}}, {"flavor": "generic", "slots": None})
    assert unknown["kind"] == "unknown"
    missing = " ".join(unknown["evidence"]["missing"])
    assert "running/waiting" in missing and "slot count" in missing and "KV" in missing
    assert all(k in LIMIT_KINDS for k in ("none", "unknown", "gpu"))


def test_ollama_queue_per_request_is_a_slot_wait():
    row = _row(running_mean=float("nan"), waiting_mean=float("nan"), kv_usage_peak=float("nan"),
               split={"server_queue_mean_s": 2.0, "prefill_mean_s": 0.1, "basis": {"server_queue": "per_request"}})
    ollama = {**SERVER, "flavor": "ollama", "slots": 1, "slots_source": "conditions.ollama_num_parallel"}
    assert classify_limit(row, {"telemetry": {}}, ollama)["kind"] == "batch_slots"


def _telemetry(t, running, waiting, source="server:x"):
    rows = [(ti, source, "running", r) for ti, r in zip(t, running, strict=True)]
    rows += [(ti, source, "waiting", w) for ti, w in zip(t, waiting, strict=True)]
    return pd.DataFrame(rows, columns=["t", "source", "metric", "value"])


def test_window_figures_read_the_slot_share_and_the_client_cap():
    t = np.arange(0.0, 60.0, 1.0)
    tel = TelemetryIndex(_telemetry(t, np.where(t < 15, 3.0, 6.0), np.zeros_like(t)))
    req = pd.DataFrame({"in_window": [True] * 4 + [False], "capped": [True, False, True, True, True],
                        "sent_at": [1.0, 2.0, 3.0, 70.0, 80.0]})
    fig = window_figures({"window_start": 0.0, "window_end": 60.0}, tel, 6, req)
    assert fig["running_at_slots_share"] == pytest.approx(45 / 60)
    assert fig["running_peak"] == 6.0 and fig["capped_share"] == pytest.approx(0.75)
    assert fig["received_rate"] == pytest.approx(3 / 60)


def test_server_info_slots_from_conditions_or_slots_endpoint():
    assert server_info({"max_num_seqs": 6, "server": "vllm"})["slots"] == 6
    assert server_info({"ollama_num_parallel": 2})["slots_source"] == "conditions.ollama_num_parallel"
    tel = TelemetryIndex(pd.DataFrame({"t": [1.0], "source": ["slots:x"], "metric": ["slots_total"],
                                       "value": [4.0]}))
    assert server_info({"server": "llamacpp"}, tel)["slots"] == 4


def test_step_limits_per_row_and_none_for_unrun():
    t = np.arange(0.0, 60.0, 1.0)
    tel = TelemetryIndex(_telemetry(t, np.full_like(t, 6.0), np.full_like(t, 5.0)))
    steps = pd.DataFrame([_row(label="a", running_mean=6.0, waiting_mean=5.0),
                          {**_row(label="b"), "verdict": "not_run", "status": "not_run"}])
    req = pd.DataFrame({"step": ["a"], "in_window": [True], "capped": [False], "sent_at": [1.0]})
    limits = step_limits(steps, req, tel, {"max_num_seqs": 6, "server": "vllm"})
    assert limits[0]["kind"] == "batch_slots" and limits[1] is None


def test_step_limits_without_an_offered_rate_column_take_the_first_judged_step_as_baseline():
    """A step table without `offered_rate` (this raised AttributeError on a NaN scalar before)."""
    t = np.arange(0.0, 60.0, 1.0)
    tel = TelemetryIndex(_telemetry(t, np.full_like(t, 6.0), np.full_like(t, 5.0)))
    rows = [{k: v for k, v in _row(label=label, running_mean=6.0, waiting_mean=5.0).items() if k != "offered_rate"}
            for label in ("a", "b")]
    req = pd.DataFrame({"step": ["a"], "in_window": [True], "capped": [False], "sent_at": [1.0]})
    limits = step_limits(pd.DataFrame(rows), req, tel, {"max_num_seqs": 6, "server": "vllm"})
    assert [limit["kind"] for limit in limits] == ["batch_slots", "batch_slots"]


def test_answer_names_the_target_its_sentence_quotes():
    """A step that failed the reject ratio first and TPOT too, judged a decode limit: the answer names both,
    never a TPOT figure under the reject ratio's name alone."""
    limit = {"kind": "decode", "advice": "lower max_num_seqs",
             "evidence": {"tpot_p95_s": 0.091, "baseline_tpot_p95_s": 0.046, "decode_key": "tpot_p95",
                          "decode_value_s": 0.091, "baseline_decode_value_s": 0.046}}
    row = {"failing": ["reject_ratio", "e2e_p95", "tpot_p95"], "offered_rate": 3.05, "limit": limit}
    assert limit_answer(row).startswith("Reject ratio and TPOT p95 broke first at about 3.05 req/s: TPOT p95 91 ms")
    assert limit_answer({**row, "failing": ["tpot_p95", "ttft_p95"]}).startswith("TPOT p95 broke first at")
