"""Ollama's server queue from its durations (METRICS.md) and the cold-load flag."""

from __future__ import annotations

import pandas as pd
import pytest

from llmload.telemetry.ollama import derive_ollama_queue, ollama_timings


def test_timings_from_a_final_message() -> None:
    got = ollama_timings({"load_duration": 2_000_000_000, "prompt_eval_duration": 300_000_000,
                          "eval_duration": 1_200_000_000, "total_duration": 4_000_000_000, "done": True})
    assert got["server_queue_s"] == pytest.approx(0.5) and got["cold"] is True
    warm = ollama_timings({"load_duration": 5_000_000, "prompt_eval_duration": 1, "eval_duration": 1,
                           "total_duration": 10_000_002})
    assert warm["cold"] is False and warm["server_queue_s"] == pytest.approx(0.005)
    assert ollama_timings({"done": True}) == dict.fromkeys(
        ("server_load_s", "server_prompt_s", "server_decode_s", "server_total_s", "server_queue_s", "cold"))


def test_derive_fills_only_what_is_missing() -> None:
    records = pd.DataFrame({"server_load_s": [1.0, 0.01, None], "server_prompt_s": [0.2, 0.1, None],
                            "server_decode_s": [1.0, 1.0, None], "server_total_s": [3.0, 1.5, None],
                            "server_queue_s": [None, 9.0, None], "cold": [None, None, False]})
    out = derive_ollama_queue(records)
    assert out["server_queue_s"].tolist()[:2] == pytest.approx([0.8, 9.0]) and pd.isna(out["server_queue_s"][2])
    assert out["cold"].tolist() == [True, False, False]
    assert records["server_queue_s"].isna().sum() == 2  # input untouched
