"""A conversation trace (`format: conversation`) replayed against the vLLM sim: each session is one
arrival, its later turns follow in order, each after the previous answer, with the whole conversation
(so the prefix cache finds the previous turn's prompt) and the trace's sizes."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from support import REPO, base_config, write_config
from test_sim_prefix_cache import FAST, metrics

from llmload.cli import main

_spec = importlib.util.spec_from_file_location("make_conversation", REPO / "examples/traces/make_conversation.py")
make_conversation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_conversation)


@pytest.mark.slow
def test_a_conversation_trace_replays_its_sessions_in_turn_order(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm", config={**FAST, "step_base_s": "10ms"})
    rows = make_conversation.conversation_rows(sessions=6, rate=3.0)
    trace = make_conversation.write_trace(tmp_path / "conv.jsonl", rows)
    config = base_config(sim.url, {"trace": {"file": str(trace), "drain_timeout": "20s"}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "1s"})
    run_dir = tmp_path / "run"
    main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir), "--no-report"])
    records = pd.read_parquet(run_dir / "records.parquet")
    truth = {r["request_id"]: r for r in sim.ground_truth_rows()}
    recorded = pd.DataFrame(rows)
    assert len(records) == len(recorded) and records["session_id"].nunique() == 6
    sizes = recorded.groupby("session_id")["turn_idx"].count().sort_values().tolist()
    assert sorted(records.groupby("session_id")["turn"].count().tolist()) == sizes
    for _, turns in records.groupby("session_id"):
        turns = turns.sort_values("turn")
        assert (turns["outcome"] == "ok").all()
        assert (turns["planned_output_tokens"] == 12).all()
        first = truth[turns["request_id"].iloc[0]]
        assert abs(first["input_tokens"] - 120) <= 1  # the trace's first prompt (template included)
        gt = [truth[rid] for rid in turns["request_id"]]
        for prev, row in zip(gt[:-1], gt[1:], strict=True):
            assert row["received_at"] >= prev["finished_at"]  # after the previous answer
            assert row["input_tokens"] > prev["input_tokens"] + prev["output_tokens"]  # the conversation grew
            assert abs(row["cached_tokens"] - prev["input_tokens"] // 16 * 16) <= 16
    assert metrics(sim.url)["vllm:prefix_cache_hits_total"] > 0
