"""Limits from the server's gauges alone (analysis/limit_evidence.py, analysis/limits.py): the slot count
from the running plateau and a KV cache full by its head-of-line request, on hand-built telemetry frames
shaped like the two sim runs of issue 43 (no `conditions` written)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.limit_evidence import (
    head_of_line_blocks,
    infer_slots,
    kv_head_of_line,
    server_samples,
)
from analysis.limits import INFERRED_SLOTS, classify_limit, limit_sentence, step_limits
from analysis.telemetry_stats import TelemetryIndex

SOURCE = "server:http://127.0.0.1:8000"
#: what the probe fills in from vLLM's /metrics `vllm:cache_config_info`, the user wrote nothing
PROBED = {"server": "vllm", "kv_num_gpu_blocks": 64, "kv_block_size": 16}


def _telemetry(t, running, waiting, kv_usage):
    rows = []
    for metric, values in (("running", running), ("waiting", waiting), ("kv_usage", kv_usage)):
        rows += [(ti, SOURCE, metric, float(v)) for ti, v in zip(t, values, strict=True)]
    return pd.DataFrame(rows, columns=["t", "source", "metric", "value"])


def _light_then_heavy(heavy_running, heavy_waiting, heavy_kv, light_kv=0.1):
    """Two steps of 20 s sampled every 0.25 s: light (0-1 running, nothing waiting), then heavy."""
    t = np.arange(0.0, 40.0, 0.25)
    light = t < 20
    running = np.where(light, (t * 4 % 2 < 1).astype(float), heavy_running(t))
    waiting = np.where(light, 0.0, heavy_waiting(t))
    kv = np.where(light, light_kv, heavy_kv(t))
    return TelemetryIndex(_telemetry(t, running, waiting, kv))


def _steps():
    base = {"failing": [], "verdict": "pass", "running_mean": 0.5, "waiting_mean": 0.0, "kv_usage_peak": 0.1,
            "preemptions": 0.0, "client_wait_p95_s": 0.001, "offered_rate": 1.0,
            "split": {"server_queue_mean_s": 0.001, "prefill_mean_s": 0.03, "basis": {}}}
    return pd.DataFrame([{**base, "label": "r1.00", "window_start": 0.0, "window_end": 20.0},
                         {**base, "label": "r6.00", "window_start": 20.0, "window_end": 40.0, "verdict": "fail",
                          "failing": ["ttft_p95"], "offered_rate": 6.0, "running_mean": 2.0, "waiting_mean": 22.0,
                          "kv_usage_peak": 0.94,
                          "split": {"server_queue_mean_s": 3.6, "prefill_mean_s": 0.11, "basis": {}}}])


def _requests(prompt_tokens):
    return pd.DataFrame({"step": ["r1.00"] * 4 + ["r6.00"] * 8, "in_window": [True] * 12,
                         "capped": [False] * 12, "sent_at": np.linspace(1, 39, 12),
                         "input_tokens": [float(prompt_tokens)] * 12})


def test_slot_bound_server_without_conditions_is_batch_slots_inferred():
    """max_num_seqs 2, nothing written: running flat at 2 with 68 waiting and the KV cache almost empty."""
    tel = _light_then_heavy(lambda t: np.full_like(t, 2.0), lambda t: np.full_like(t, 68.0),
                            lambda t: np.full_like(t, 0.003), light_kv=0.001)
    steps = _steps()
    steps.loc[1, ["waiting_mean", "kv_usage_peak"]] = [68.0, 0.003]
    limits = step_limits(steps, _requests(16), tel, {**PROBED, "kv_num_gpu_blocks": 4096})
    high = limits[1]
    assert high["kind"] == "batch_slots", high
    assert high["evidence"]["slots"] == 2 and high["evidence"]["slots_source"] == INFERRED_SLOTS
    assert high["evidence"]["running_at_slots_share"] == 1.0
    text = limit_sentence(high)
    assert text.startswith("all 2 batch slots busy (2 is the running plateau while requests waited, inferred")
    assert "KV cache at 0.3%" in text and "record what is missing" not in text


def _kv_bound():
    """16 slots, 64 blocks of 16 tokens, 448-token prompts (28 blocks): two requests run and hold 94% of
    the cache, 22 wait; once in a while one finishes and frees its blocks for a sample."""
    return _light_then_heavy(lambda t: np.full_like(t, 2.0), lambda t: np.full_like(t, 22.0),
                             lambda t: np.where(t * 4 % 5 < 1, 0.45, 0.94))


def test_kv_bound_server_without_conditions_is_kv_cache_by_head_of_line():
    limits = step_limits(_steps(), _requests(448), _kv_bound(), PROBED)
    high = limits[1]
    assert high["kind"] == "kv_cache", high
    ev = high["evidence"]
    assert ev["kv_decided_by"] == "head_of_line" and ev["kv_head_blocks"] == 28
    assert ev["kv_free_blocks_min"] == 3 and ev["kv_blocked_share"] == pytest.approx(0.8)
    # the plateau at 2 was the KV cache's doing, not two slots: no slot count is inferred from it
    assert ev["slots"] is None
    assert limit_sentence(high).startswith("KV cache full: the next waiting request needed 28 blocks for a "
                                           "448-token prompt and fewer were free (as few as 3 of 64) in 80%")
    # written conditions only sharpen it: the 16 slots are named, the limit stays the KV cache
    sharp = step_limits(_steps(), _requests(448), _kv_bound(), {**PROBED, "max_num_seqs": 16})[1]
    assert sharp["kind"] == "kv_cache" and sharp["evidence"]["slots"] == 16


def test_a_cache_at_94_percent_that_holds_the_next_request_is_not_full():
    """Short prompts (1 block) fit the 3 free blocks: the cache is not what held them."""
    limits = step_limits(_steps(), _requests(12), _kv_bound(), PROBED)
    assert limits[1]["kind"] != "kv_cache" and limits[1]["evidence"]["kv_blocked_share"] == 0.0


def test_no_gpu_utilisation_asked_for_when_conditions_say_no_gpu():
    bare = {"label": "r1", "verdict": "fail", "failing": ["ttft_p95"], "split": None}
    server = {"flavor": "vllm", "slots": None}
    missing = classify_limit(bare, {"telemetry": {}}, server)["evidence"]["missing"]
    assert any("GPU utilisation" in m for m in missing)
    no_gpu = classify_limit(bare, {"telemetry": {}, "gpu_utilization_mean": 0.99}, {**server, "gpus": 0.0})
    assert no_gpu["kind"] == "unknown" and not any("GPU" in m for m in no_gpu["evidence"]["missing"])


def test_head_of_line_blocks_rounds_up_and_caps_at_the_token_budget():
    assert head_of_line_blocks(448, 16) == 28 and head_of_line_blocks(449, 16) == 29
    assert head_of_line_blocks(3000, 16, max_num_batched_tokens=512) == 32
    assert head_of_line_blocks(float("nan"), 16) is None and head_of_line_blocks(100, float("nan")) is None


def test_server_samples_align_one_scrape_and_kv_head_of_line_reads_them():
    frame = _telemetry([1.0, 2.0, 3.0], [2, 2, 1], [0, 5, 5], [0.5, 0.95, 0.2])
    samples = server_samples(TelemetryIndex(frame))
    assert list(samples["running"]) == [2, 2, 1] and list(samples["kv_usage"]) == [0.5, 0.95, 0.2]
    out = kv_head_of_line(samples, num_blocks=100, block_size=16, prompt_tokens=160)
    # waiting at t=2 (5 free < 10 needed) and t=3 (80 free): blocked in one of two
    assert out["kv_blocked_share"] == 0.5 and out["kv_head_blocks"] == 10 and out["kv_free_blocks_min"] == 5
    unknown = kv_head_of_line(samples, num_blocks=None, block_size=16, prompt_tokens=160)
    assert np.isnan(unknown["kv_blocked_share"])
    # a server that gives one of the two gauges still has its scrapes; one that gives neither has none
    waiting_only = server_samples(TelemetryIndex(frame[frame["metric"] != "running"]))
    assert list(waiting_only["waiting"]) == [0, 5, 5] and waiting_only["running"].isna().all()
    assert server_samples(TelemetryIndex(frame[frame["metric"] == "kv_usage"])).empty


def test_infer_slots_needs_a_plateau_with_requests_waiting():
    flat = server_samples(TelemetryIndex(_telemetry(np.arange(8.0), [4] * 8, [3] * 8, [0.1] * 8)))
    assert infer_slots(flat) == (4, 1.0)
    # running wandering under its peak while requests wait: no plateau to read
    wander = server_samples(TelemetryIndex(_telemetry(np.arange(8.0), [1, 2, 3, 4, 1, 2, 3, 2], [3] * 8,
                                                      [0.1] * 8)))
    assert infer_slots(wander)[0] is None
    # nothing ever waited: the peak is only the load, not the slot count
    idle = server_samples(TelemetryIndex(_telemetry(np.arange(8.0), [4] * 8, [0] * 8, [0.1] * 8)))
    assert infer_slots(idle)[0] is None
