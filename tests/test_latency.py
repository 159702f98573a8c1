"""One definition of a record's TTFT, TPOT, ITL and E2E (`llmload.latency`), used by the analysis,
the live table and the Locust events alike (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.requests import derive_requests, event_gaps
from llmload.config import SLO
from llmload.latency import itl_gaps, latencies
from llmload.runtime.master.live_table import quick_stats

RECORDS = [
    {"request_id": "a", "step": "s", "outcome": "ok", "capped": False, "scheduled_at": 0.0, "sent_at": 0.5, "first_token_at": 0.75,
     "last_token_at": 1.75, "output_tokens": 5, "token_times": [0.75, 1.0, 1.25, 1.75]},
    {"request_id": "b", "step": "s", "outcome": "ok", "capped": False, "scheduled_at": 1.0, "sent_at": 1.0, "first_token_at": 1.5,
     "last_token_at": 1.5, "output_tokens": 1, "token_times": [1.5]},
    {"request_id": "c", "step": "s", "outcome": "timeout", "capped": False, "scheduled_at": 2.0, "sent_at": 2.0,
     "first_token_at": None, "last_token_at": None, "output_tokens": 0, "token_times": []},
]


def test_scalars_and_arrays_agree() -> None:
    assert latencies(0.5, 0.75, 1.75, 5) == (0.25, 0.25, 1.25)
    assert latencies(1.0, 1.5, 1.5, 1) == (0.5, None, 0.5)       # 1 token: no TPOT, never 0
    assert latencies(2.0, None, None, 0) == (None, None, None)
    arr = latencies(np.array([0.5, 1.0, 2.0]), np.array([0.75, 1.5, np.nan]), np.array([1.75, 1.5, np.nan]),
                    np.array([5, 1, 0]))
    assert arr.ttft[0] == 0.25 and arr.tpot[0] == 0.25 and math.isnan(arr.tpot[1]) and math.isnan(arr.e2e[2])
    assert list(itl_gaps([0.75, 1.0, 1.25, 1.75])) == [0.25, 0.25, 0.5] and itl_gaps([1.5]).size == 0


def test_analysis_live_table_and_itl_use_the_same_numbers() -> None:
    frame = pd.DataFrame(RECORDS)
    req = derive_requests(frame, {"s": (0.0, 10.0)}, SLO.model_validate({"min_samples": 1}))
    one = [latencies(r["sent_at"], r["first_token_at"], r["last_token_at"], r["output_tokens"]) for r in RECORDS]
    for col, field in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e")):
        expected = [np.nan if getattr(x, field) is None else getattr(x, field) for x in one]
        np.testing.assert_array_equal(req[col].to_numpy(dtype=float), np.array(expected, dtype=float))
    live = quick_stats(RECORDS)
    assert live["ttft_p95_s"] == pytest.approx(np.percentile([0.25, 0.5], 95))
    assert live["tpot_p95_s"] == 0.25 and live["ok"] == 2
    gaps = event_gaps(frame["token_times"])
    chunk, _ = gaps.select(np.array([0]))
    np.testing.assert_array_equal(chunk[~np.isnan(chunk)], itl_gaps(RECORDS[0]["token_times"]))
    # a request ends when it closed, else at its last token, its first, its send (the timeout: sent at 2.0)
    closed = frame.assign(closed_at=[2.0, None, None], last_token_at=[1.75, None, None])
    ends = derive_requests(closed, {"s": (0.0, 10.0)}, SLO.model_validate({"min_samples": 1}))["end_at"]
    assert ends.tolist() == [2.0, 1.5, 2.0]


def test_the_scalar_path_is_the_array_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain numbers take a path without numpy (the per-request Locust event): every result, None
    included, is the array path's, bit for bit."""
    rng = np.random.default_rng(7)
    cases = [(0.5, 0.75, 1.75, 5), (1.0, 1.5, 1.5, 1), (2.0, None, None, 0), (None, 1.0, 2.0, 3), (1, 2, 4, 3),
             (0.0, float("nan"), 1.0, 2), (1.0, 2.0, float("inf"), 4), (1.0, 1.2, None, 7), (1.0, 1.2, 1.9, None)]
    for _ in range(500):
        sent = float(rng.uniform(1.7e9, 1.8e9))
        first = sent + float(rng.exponential(0.2))
        cases.append((sent, first, first + float(rng.exponential(2.0)), int(rng.integers(0, 300))))
    for sent, first, last, n in cases:
        fast = latencies(sent, first, last, n)
        slow = latencies(*(np.float64(np.nan if v is None else v) for v in (sent, first, last, n)))
        assert fast == slow, (sent, first, last, n)
        assert all(v is None or type(v) is float for v in fast)
    import llmload.latency as module

    monkeypatch.setattr(module, "np", None)  # plain numbers never reach numpy (40 us a call)
    assert latencies(0.5, 0.75, 1.75, 5) == (0.25, 0.25, 1.25)
