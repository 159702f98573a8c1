"""Multi-turn sessions end to end: `llmload run` with `requests.sessions` against the vLLM sim with prefix
caching. Each later turn carries the whole conversation, so the sim's prefix cache finds the previous
turn's prompt (its whole blocks) and its `/metrics` hit counter is the sum of what the ground truth says."""

from __future__ import annotations

import pandas as pd
import pytest
from support import base_config, write_config
from test_sim_prefix_cache import FAST, metrics

from llmload.cli import main


@pytest.mark.slow
def test_later_turns_hit_the_prefix_cache(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm", config={**FAST, "step_base_s": "10ms"})
    config = base_config(sim.url, {"ladder": {"arrival": "poisson", "warmup": "0s", "drain_timeout": "20s",
                                              "steps": [{"rate": 2, "duration": "3s"}]}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "1s"})
    config["requests"] = {"input_tokens": {"dist": "fixed", "value": 60},
                          "output_tokens": {"dist": "fixed", "value": 6}, "seed": 5,
                          "sessions": {"turns": {"dist": "fixed", "value": 3},
                                       "think_time": {"dist": "fixed", "value": "100ms"},
                                       "new_tokens_per_turn": {"dist": "uniform", "min": 10, "max": 30},
                                       "system_prompt_tokens": 40}}
    run_dir = tmp_path / "run"
    main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir)])  # 3 (invalid) when busy is fine
    records = pd.read_parquet(run_dir / "records.parquet")
    sessions = records[records["session_id"].notna()]
    assert len(sessions) >= 6 and set(sessions["turn"]) == {0, 1, 2}
    truth = {r["request_id"]: r for r in sim.ground_truth_rows()}
    for _, turns in sessions.groupby("session_id"):
        turns = turns.sort_values("turn")
        assert list(turns["turn"]) == list(range(len(turns)))
        rows = [truth[rid] for rid in turns["request_id"]]
        for prev, row, (_, rec) in zip(rows[:-1], rows[1:], list(turns.iterrows())[1:], strict=True):
            assert rec["outcome"] == "ok"
            # the whole previous conversation is a prefix of this one: its full blocks are found
            assert row["input_tokens"] > prev["input_tokens"] + 6
            assert abs(row["cached_tokens"] - prev["input_tokens"] // 16 * 16) <= 16
            assert row["cached_tokens"] >= 16 * 3 and row["received_at"] >= prev["finished_at"] + 0.09
    m = metrics(sim.url)
    assert m["vllm:prefix_cache_hits_total"] == sum(r["cached_tokens"] for r in truth.values())
    hits = m["vllm:prefix_cache_hits_total"] / m["vllm:prefix_cache_queries_total"]
    assert hits > 0.3  # most of a later turn's prompt is the conversation so far
    assert "Sessions: TTFT by turn" in (run_dir / "report.html").read_text(encoding="utf-8")
