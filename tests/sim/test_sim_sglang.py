"""SGLang flavour: `/generate` as SGLang's http_server.py writes it (the whole answer so far in each
event, counts in `meta_info`, `[DONE]`), its errors, `/v1/models`, `/tokenize`, and the OpenAI routes."""

from __future__ import annotations

import pytest
import requests
from sim_client import FAST, content_of, post, sse

from llmload.tokens import count_tokens


@pytest.fixture
def sglang(sim_factory):
    return sim_factory(flavor="sglang", config={**FAST, "max_model_len": 256})


def test_generate_stream_is_cumulative_with_meta_info(sglang):
    body = {"text": "one two three", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}, "stream": True}
    resp, events = sse(sglang.url + "/generate", body)
    assert resp.headers["content-type"].startswith("text/event-stream") and events[-1] == "[DONE]"
    objs = events[:-1]
    assert len(objs) == 5
    texts = [o["text"] for o in objs]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:], strict=False))
    assert count_tokens(texts[-1]) == 5
    metas = [o["meta_info"] for o in objs]
    assert [m["completion_tokens"] for m in metas] == [1, 2, 3, 4, 5]
    assert {m["prompt_tokens"] for m in metas} == {3} and {m["cached_tokens"] for m in metas} == {0}
    assert [m["finish_reason"] for m in metas[:-1]] == [None] * 4
    assert metas[-1]["finish_reason"] == {"type": "length", "length": 5} and metas[-1]["e2e_latency"] > 0
    assert [len(o["output_ids"]) for o in objs] == [1, 2, 3, 4, 5]
    (row,) = sglang.ground_truth_rows()
    assert row["endpoint"] == "/generate" and row["output_tokens"] == 5 and len(row["token_times"]) == 5


def test_generate_without_stream_and_default_cap(sglang):
    out = post(sglang.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}).json()
    assert count_tokens(out["text"]) == 3 and out["meta_info"]["completion_tokens"] == 3
    assert out["meta_info"]["finish_reason"]["type"] in ("length", "stop")
    # no max_new_tokens: SGLang's SamplingParams default, 128 (with ignore_eos: exactly that many)
    full = post(sglang.url + "/generate", {"text": "hi", "sampling_params": {"ignore_eos": True}}).json()
    assert full["meta_info"]["completion_tokens"] == 128


def test_generate_answers_from_the_text_it_was_given(sglang):
    """The answer reads the request's `text` (a sum is answered first), as on the OpenAI routes: the
    body was once converted twice, and the second pass blanked the prompt."""
    out = post(sglang.url + "/generate", {"text": "What is 40+2?", "sampling_params": {"max_new_tokens": 4}}).json()
    assert out["text"].startswith("42")


def test_too_long_prompt_is_an_error_event_in_a_200_stream(sglang):
    text = "word " * 300
    msg = "The input (300 tokens) is longer than the model's context length (256 tokens)."
    resp, events = sse(sglang.url + "/generate", {"text": text, "sampling_params": {"max_new_tokens": 4},
                                                  "stream": True})
    assert resp.status_code == 200 and events == [{"error": {"message": msg}}, "[DONE]"]
    plain = post(sglang.url + "/generate", {"text": text, "sampling_params": {"max_new_tokens": 4}})
    assert plain.status_code == 400 and plain.json() == {"error": {"message": msg}}


def test_info_pages_and_openai_routes(sglang):
    models = requests.get(sglang.url + "/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["sim-model"] and models["data"][0]["owned_by"] == "sglang"
    assert requests.get(sglang.url + "/health", timeout=5).status_code == 200
    assert requests.get(sglang.url + "/get_model_info", timeout=5).json()["is_generation"] is True
    tok = post(sglang.url + "/tokenize", {"model": "sim-model", "prompt": "a b c"}).json()
    assert tok["count"] == 3 == len(tok["tokens"])
    missing = requests.get(sglang.url + "/nope", timeout=5)
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    _, events = sse(sglang.url + "/v1/chat/completions", {"model": "sim-model", "max_tokens": 3, "stream": True,
                                                          "messages": [{"role": "user", "content": "hi"}],
                                                          "stream_options": {"include_usage": True}})
    assert count_tokens(content_of(events)) == 3 and events[-2]["usage"]["completion_tokens"] == 3
    assert [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c["finish_reason"]] == ["length"]
