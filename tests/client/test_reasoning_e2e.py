"""Reasoning end to end against every sim flavour with its own reasoning field: the client's TTFA and
its reasoning / answer token counts agree with the sim's ground-truth log."""

from __future__ import annotations

import pytest
from client_helpers import fixed_requests, send_batch, sim_target

CASES = [("vllm", "openai-chat"), ("sglang", "openai-chat"), ("llamacpp", "openai-chat"),
         ("ollama", "openai-chat"), ("ollama", "ollama-chat"), ("ollama", "ollama-generate")]


@pytest.mark.slow
@pytest.mark.parametrize(("flavor", "api"), CASES)
def test_ttfa_and_reasoning_counts_match_ground_truth(sim_factory, flavor: str, api: str) -> None:
    sim = sim_factory(flavor=flavor, config={"load_time_s": "0.1s",
                                             "reasoning_tokens": {"dist": "uniform", "min": 2, "max": 9}})
    requests = fixed_requests(20, 12, ignore_eos=True, reasoning_effort="high")
    records = send_batch(sim_target(sim.url, api, flavor), requests, 4, prefix=f"{flavor}-{api}")
    truth = {row["request_id"]: row for row in sim.ground_truth_rows()}
    for rec in records:
        row = truth[rec.request_id]
        assert rec.outcome == "ok", rec.error
        n = row["reasoning_tokens"]
        assert 2 <= n <= 9 and row["output_tokens"] == 12
        assert rec.reasoning_tokens == n
        assert rec.output_tokens - rec.reasoning_tokens == 12 - n  # the answer's tokens
        # TTFA: the event after the reasoning ones, seen after the sim wrote it (and its reasoning)
        assert rec.first_answer_at == rec.token_times[n]
        # (equal when one read brought the reasoning and the answer's first token: a busy machine's client)
        assert rec.first_token_at == rec.token_times[0] <= rec.first_answer_at
        assert row["first_answer_at"] == row["token_times"][n]
        assert -0.5 < rec.first_answer_at - row["first_answer_at"] < 2.0  # the sim stamps after its write
        assert rec.first_answer_at - rec.first_token_at >= row["first_answer_at"] - row["first_token_at"] - 0.5


@pytest.mark.slow
def test_without_reasoning_ttfa_is_ttft(sim_factory) -> None:
    sim = sim_factory(flavor="vllm", config={"load_time_s": "0.1s"})
    (rec,) = send_batch(sim_target(sim.url, "openai-chat", "vllm"), fixed_requests(20, 6), 1)
    assert rec.outcome == "ok" and rec.reasoning_tokens == 0
    assert rec.first_answer_at == rec.first_token_at
