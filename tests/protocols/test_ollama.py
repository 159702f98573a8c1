"""Ollama NDJSON interpretation: content, thinking, the final object's durations and counts, errors."""

from __future__ import annotations

import json

import pytest

from llmload.apis import get_api
from llmload.protocols import OllamaStreamParser

FINAL = {"model": "m", "created_at": "2025-01-01T00:00:00Z", "message": {"role": "assistant", "content": ""},
         "done_reason": "stop", "done": True, "total_duration": 2_500_000_000,
         "load_duration": 1_000_000_000, "prompt_eval_count": 26, "prompt_eval_duration": 300_000_000,
         "eval_count": 12, "eval_duration": 900_000_000}


def test_chat_content_and_thinking() -> None:
    p = OllamaStreamParser()
    c = p.parse(json.dumps({"model": "m", "message": {"role": "assistant", "content": "Hi"}, "done": False}))
    assert c.output and c.text == "Hi" and not c.final
    t = p.parse(json.dumps({"message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": False}))
    assert t.output and t.reasoning == "hmm" and t.text == ""
    empty = p.parse(json.dumps({"message": {"role": "assistant", "content": ""}, "done": False}))
    assert not empty.output


def test_generate_response_field() -> None:
    c = OllamaStreamParser().parse(b'{"model":"m","response":" ok","done":false}')
    assert c.output and c.text == " ok"


def test_final_object_durations_and_counts() -> None:
    c = OllamaStreamParser().parse(json.dumps(FINAL))
    assert c.final and not c.output and c.finish_reason == "stop"
    assert (c.input_tokens, c.output_tokens) == (26, 12)
    assert c.timings.load_s == pytest.approx(1.0)
    assert c.timings.prompt_s == pytest.approx(0.3)
    assert c.timings.decode_s == pytest.approx(0.9)
    assert c.timings.total_s == pytest.approx(2.5)


def test_error_line_and_malformed() -> None:
    p = OllamaStreamParser()
    assert p.parse(b'{"error":"model runner has unexpectedly stopped"}').error \
        == "model runner has unexpectedly stopped"
    assert p.parse(b'{"response": "x"').error.startswith("malformed")


def test_stream_decoder_ndjson_split_everywhere() -> None:
    body = (json.dumps({"message": {"role": "assistant", "content": "\u00e9t\u00e9"}, "done": False}) + "\n"
            + json.dumps(FINAL) + "\n").encode()
    for i in range(len(body) + 1):
        dec = get_api("ollama-chat").decoder()
        chunks = dec.feed(body[:i]) + dec.feed(body[i:]) + dec.flush()
        assert [c.text for c in chunks] == ["\u00e9t\u00e9", ""] and chunks[-1].final


def test_final_object_with_omitted_zero_fields() -> None:
    c = OllamaStreamParser().parse(json.dumps({"model": "m", "response": "", "done": True, "done_reason": "stop",
                                               "total_duration": 5_000_000, "eval_duration": 4_000_000,
                                               "eval_count": 3}))
    assert c.timings.load_s == 0.0 and c.timings.prompt_s == 0.0 and c.timings.total_s == pytest.approx(0.005)
    assert c.input_tokens is None and c.output_tokens == 3
