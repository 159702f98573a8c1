"""A 200 answer that said nothing is never `ok`, and no tokens are counted without output (issue 19,
items 1 to 3): each stream below comes from a small real server, through the whole client path."""

from __future__ import annotations

import json

import pytest
from client_helpers import fixed_requests, send_batch, serve, sim_target

from llmload.records import Record


def _data(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode()


_ROLE = _data({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
_STOP = _data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
_USAGE_50 = _data({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60}})

OPENAI_EMPTY = {
    "done_alone": [b"data: [DONE]"],
    "no_choices": [_data({"id": "x", "object": "chat.completion.chunk"}), b"data: [DONE]"],
    "empty_choices": [_data({"choices": []}), b"data: [DONE]"],
    "role_and_stop_only": [_ROLE, _STOP, b"data: [DONE]"],
    "stop_without_done": [_ROLE, _STOP],
    "html_page": [b"<!DOCTYPE html>\n<html><body>\n<p>maintenance</p>\ndata: [DONE]\n</body></html>"],
    "usage_claims_50": [_data({"choices": []}), _USAGE_50, b"data: [DONE]"],
}


def _send(events: list[bytes], api: str = "openai-chat", **serve_kw) -> Record:
    server = serve(events, clean_end=True, **serve_kw)
    try:
        target = sim_target(f"http://127.0.0.1:{server.server_port}", api, None)
        (rec,) = send_batch(target, fixed_requests(10, 4), 1)
    finally:
        server.stop()
    return rec


def _assert_no_output_failure(rec: Record) -> None:
    assert rec.http_status == 200
    assert rec.outcome == "http_error", (rec.outcome, rec.error)
    assert "no output" in rec.error
    assert rec.first_token_at is None and rec.token_times == [] and rec.output_tokens == 0


@pytest.mark.parametrize("name", sorted(OPENAI_EMPTY))
def test_an_openai_stream_without_output_is_not_ok(name: str) -> None:
    rec = _send(OPENAI_EMPTY[name])
    _assert_no_output_failure(rec)
    if name == "usage_claims_50":  # the server's count is named in the error, never counted
        assert "50 output tokens" in rec.error and rec.input_tokens == 10


@pytest.mark.parametrize("final", [
    {"model": "m", "done": True},
    {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
     "prompt_eval_count": 10, "eval_count": 50, "total_duration": 1000},
])
def test_an_ollama_stream_without_output_is_not_ok(final: dict) -> None:
    rec = _send([json.dumps(final).encode()], api="ollama-chat", sep=b"\n", content_type=b"application/x-ndjson")
    _assert_no_output_failure(rec)


def test_invalid_utf8_is_malformed_in_both_framings() -> None:
    bad = b'{"choices":[{"index":0,"delta":{"content":"\xff\xfe\xfd\xfc"},"finish_reason":null}]}'
    openai = _send([b"data: " + bad, _STOP, b"data: [DONE]"])
    bad_ollama = b'{"model":"m","message":{"role":"assistant","content":"\xff\xfe\xfd\xfc"},"done":false}'
    ollama = _send([bad_ollama, b'{"model":"m","done":true,"eval_count":1}'], api="ollama-chat", sep=b"\n",
                   content_type=b"application/x-ndjson")
    for rec in (openai, ollama):
        assert rec.outcome == "malformed", (rec.outcome, rec.error)
        assert "malformed stream" in rec.error
        assert rec.token_times == [] and rec.output_tokens == 0


def test_a_stream_with_output_stays_ok() -> None:
    """The rule does not touch a real answer (role chunk, one token, a usage chunk, [DONE])."""
    usage = _data({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
    rec = _send([_ROLE, _data({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}),
                 _STOP, usage, b"data: [DONE]"])
    assert rec.outcome == "ok" and len(rec.token_times) == 1 and rec.output_tokens == 1
    assert not rec.tokens_estimated
