"""Stream rules that the sim does not exercise, against a small real server written here: no usage
(estimated counts), CRLF framing, a stream without `[DONE]`, and a body cut before its final event."""

from __future__ import annotations

import json

import pytest
from client_helpers import fixed_requests, send_batch, serve, sim_target

from llmload.tokens import count_tokens

WORDS = ["Hello", " wide", " world", "!"]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode()


@pytest.mark.parametrize(("tail", "clean_end", "outcome"), [
    ([chunk({}, "stop"), b"data: [DONE]"], True, "ok"),
    ([chunk({}, "stop")], True, "ok"),          # no [DONE], but finished and the body ended cleanly
    ([], True, "disconnect"),                   # body ended without any final event
    ([chunk({}, "stop")], False, "disconnect"),  # connection dropped before the body's end
])
def test_stream_endings_and_estimated_counts(tail: list[bytes], clean_end: bool, outcome: str) -> None:
    events = [b": keep-alive", chunk({"role": "assistant", "content": None})] + [chunk({"content": w}) for w in WORDS]
    server = serve(events + tail, clean_end=clean_end)
    try:
        target = sim_target(f"http://127.0.0.1:{server.server_port}", "openai-chat", None)
        (rec,) = send_batch(target, fixed_requests(10, 4), 1)
    finally:
        server.stop()
    assert rec.outcome == outcome, rec.error
    assert len(rec.token_times) == len(WORDS) and rec.first_token_at == rec.token_times[0]
    assert rec.tokens_estimated and rec.input_tokens == 10  # no usage: planned input, counted output
    assert rec.output_tokens == count_tokens("".join(WORDS)) == 4


@pytest.mark.slow
def test_requests_spread_over_instances(sim_factory) -> None:
    from llmload.config import Target

    a, b = (sim_factory(flavor="vllm", config={"load_time_s": 0.0}) for _ in range(2))
    target = Target(urls=[a.url, b.url], api="openai-completions", model="sim-model", server="vllm")
    records = send_batch(target, fixed_requests(8, 2), 6)
    assert all(r.outcome == "ok" for r in records)
    assert [r.instance for r in records] == [a.url, b.url] * 3
    assert {row["request_id"] for row in a.ground_truth_rows()} == {r.request_id for r in records[::2]}
    busy = send_batch(target.model_copy(update={"routing": "least_outstanding"}), fixed_requests(8, 6), 4,
                      concurrency=4)
    assert sorted(r.instance for r in busy) == sorted([a.url, b.url] * 2)
