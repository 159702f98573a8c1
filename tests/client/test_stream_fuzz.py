"""Fuzz: generated malformed streams, in both framings (SSE and NDJSON) and split at random byte
positions, go through the whole client path (a real server, the real `send`). Whatever the bytes, no
record is `ok` without at least one output event, and no tokens are counted without output (issue 19)."""

from __future__ import annotations

import json

import pytest
from client_helpers import fixed_requests, send_batch, serve, sim_target

from llmload.client import Transport

_OPENAI_PIECES = [
    b"[DONE]", b"{}", b"[]", b"null", b'"text"', b"{not json", b"\xff\xfe",
    json.dumps({"id": "x", "object": "chat.completion.chunk"}).encode(),
    json.dumps({"choices": []}).encode(),
    json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}).encode(),
    json.dumps({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}).encode(),
    json.dumps({"choices": [{"index": 0, "delta": {"content": None}, "finish_reason": "length"}]}).encode(),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 50}}).encode(),
    json.dumps({"choices": [{"index": 0, "text": ""}], "timings": {"predicted_n": 9, "prompt_n": 3}}).encode(),
    json.dumps({"error": {"message": "boom"}}).encode(),
    json.dumps({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}).encode(),
    json.dumps({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}).encode(),
    '{"choices":[{"index":0,"delta":{"content":"é"}}]}'.encode(),
]
_SSE_LINES = [b": ping", b"event: other", b"<html><body>", b"retry: 10", b"id: 1", b"", b"data:", b"error: {}"]
_OLLAMA_PIECES = [
    b'{"done":true}', b'{"done":true,"eval_count":50,"prompt_eval_count":5}', b"{}", b"[1]", b"\xff\xfe",
    b'{"message":{"role":"assistant","content":""},"done":false}',
    b'{"message":{"role":"assistant","content":""},"done":true,"eval_count":50,"total_duration":10}',
    b'{"response":"","done":true,"done_reason":"stop","eval_count":3}', b'{"error":"boom"}', b"{broken",
    b'{"message":{"role":"assistant","content":"Hi"},"done":false}', b'{"response":"Hi","done":false}',
    b'{"message":{"role":"assistant","thinking":"hm"},"done":false}',
]

def _streams():
    """A framing (ollama-chat: NDJSON, openai-chat: SSE), its body split at up to 6 random byte positions, and
    whether the server ends the body cleanly (False: it drops the connection)."""
    from hypothesis import strategies as st

    sse_event = st.one_of(
        st.sampled_from(_OPENAI_PIECES).map(lambda p: b"data: " + p + b"\n\n"),
        st.sampled_from(_SSE_LINES).map(lambda line: line + b"\n"),
        st.binary(max_size=12),
    )
    ndjson_line = st.one_of(st.sampled_from(_OLLAMA_PIECES).map(lambda p: p + b"\n"), st.binary(max_size=12))

    @st.composite
    def split(draw, body: bytes) -> list[bytes]:
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
        edges = [0, *cuts, len(body)]
        return [body[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]

    @st.composite
    def stream(draw) -> tuple[str, list[bytes], bool]:
        ndjson = draw(st.booleans())
        body = b"".join(draw(st.lists(ndjson_line if ndjson else sse_event, max_size=8)))
        return ("ollama-chat" if ndjson else "openai-chat"), draw(split(body)), draw(st.booleans())

    return stream()


@pytest.fixture(scope="module")
def servers():
    """One server per body ending (clean end, dropped connection); the test sets `events` per example."""
    made = {end: serve([], clean_end=end, sep=b"", delay_s=0.0) for end in (True, False)}
    yield made
    for server in made.values():
        server.stop()


@pytest.mark.hypothesis  # imported here, not when the module is collected: tests/conftest.py
def test_no_record_is_ok_or_counts_tokens_without_output(servers) -> None:
    from hypothesis import given, settings

    @settings(max_examples=150, deadline=None)
    @given(stream=_streams())
    def check(stream) -> None:
        _one_stream(servers, stream)

    check()


def _one_stream(servers, stream) -> None:
    api, pieces, clean_end = stream
    server = servers[clean_end]
    server.events = pieces
    target = sim_target(f"http://127.0.0.1:{server.server_port}", api, None, timeout="5s", idle_timeout="2s")
    transport = Transport.from_target(target)
    try:
        (rec,) = send_batch(target, fixed_requests(10, 4), 1, transport=transport)
    finally:
        transport.close()
    assert rec.http_status == 200
    if rec.outcome == "ok":
        assert rec.token_times and rec.first_token_at == rec.token_times[0], rec
    if not rec.token_times:
        assert rec.first_token_at is None and rec.last_token_at is None
        assert not rec.output_tokens, (rec.outcome, rec.output_tokens, rec.error)
