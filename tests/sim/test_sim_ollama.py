"""Ollama flavour: NDJSON with nanosecond durations, cold load and keep-alive, the load-queue 503,
/api/ps, /api/tags, /api/show, /api/version and the OpenAI-compatible endpoints."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sim_client import FAST, content_of, ndjson, post, sse

from llmload.tokens import count_tokens

BUSY = "server busy, please try again.  maximum pending requests exceeded"


@pytest.fixture
def ollama(sim_factory):
    return sim_factory(flavor="ollama", config={**FAST, "load_time_s": 0.3, "keep_alive_s": 0.6})


def test_cold_load_ndjson_durations_and_keep_alive(ollama):
    assert requests.get(ollama.url + "/api/ps", timeout=5).json() == {"models": []}
    body = {"model": "sim-model", "prompt": "What is 40+2?", "options": {"num_predict": 5}}
    resp, lines = ndjson(ollama.url + "/api/generate", body, headers={"X-Request-Id": "g1"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-ndjson"
    *pieces, final = lines
    assert len(pieces) == 5 and all(p["done"] is False and "created_at" in p for p in pieces)
    assert pieces[0]["response"] == "42" and count_tokens("".join(p["response"] for p in pieces)) == 5
    assert final["done"] is True and final["done_reason"] == "length" and final["eval_count"] == 5
    assert final["prompt_eval_count"] == 6
    for key in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(final[key], int), key
    assert final["load_duration"] >= 0.25e9
    assert final["total_duration"] >= final["load_duration"] + final["prompt_eval_duration"] + final["eval_duration"]
    ps = requests.get(ollama.url + "/api/ps", timeout=5).json()["models"][0]
    assert {"size_vram", "context_length", "expires_at", "name"} <= set(ps) and ps["context_length"] == 4096
    _, lines = ndjson(ollama.url + "/api/chat", {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                                                   "options": {"num_predict": 2}})
    assert lines[-1]["load_duration"] == 0 and lines[0]["message"]["role"] == "assistant"
    assert lines[-1]["message"]["content"] == "" and lines[-1]["eval_count"] == 2
    time.sleep(0.9)  # keep_alive_s: 0.6 -> unloaded
    assert requests.get(ollama.url + "/api/ps", timeout=5).json() == {"models": []}
    rows = ollama.ground_truth_rows()
    assert rows[0]["request_id"] == "g1" and rows[0]["load_s"] >= 0.25 and rows[0]["outcome"] == "ok"
    assert len(rows[0]["token_times"]) == 5


def test_non_stream_and_openai_compat(ollama):
    full = post(ollama.url + "/api/generate", {"model": "sim-model", "prompt": "hi", "stream": False,
                                               "options": {"num_predict": 3}}).json()
    assert full["done"] is True and count_tokens(full["response"]) == 3 and isinstance(full["context"], list)
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True}}
    _, events = sse(ollama.url + "/v1/chat/completions", body)
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 3
    assert events[0]["choices"][0]["delta"]["role"] == "assistant" and count_tokens(content_of(events)) == 3
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    done = post(ollama.url + "/v1/completions", {"model": "sim-model", "prompt": "hi", "max_tokens": 2}).json()
    assert done["usage"]["completion_tokens"] == 2


def test_info_endpoints(ollama):
    assert requests.get(ollama.url + "/api/version", timeout=5).json()["version"]
    tags = requests.get(ollama.url + "/api/tags", timeout=5).json()["models"][0]
    assert tags["name"] == "sim-model" and tags["details"]["family"]
    show = post(ollama.url + "/api/show", {"model": "sim-model"}).json()
    assert "num_ctx" in show["parameters"] and show["details"]["quantization_level"]
    assert requests.get(ollama.url + "/", timeout=5).text == "Ollama is running"
    assert requests.get(ollama.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "sim-model"
    assert requests.get(ollama.url + "/nope", timeout=5).status_code == 404


def test_max_queue_rejects_only_requests_waiting_for_a_load(sim_factory):
    sim = sim_factory(flavor="ollama", config={**FAST, "load_time_s": 0.8, "max_queue": 2, "num_parallel": 1})
    body = {"model": "sim-model", "prompt": "hi", "stream": False, "options": {"num_predict": 2}}
    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda _: post(sim.url + "/api/generate", body), range(5)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 200, 503, 503, 503]
    assert next(a for a in answers if a.status_code == 503).json() == {"error": BUSY}
    # once loaded, requests beyond the slots wait without limit: no 503
    body["options"]["num_predict"] = 20
    with ThreadPoolExecutor(5) as pool:
        assert {a.status_code for a in pool.map(lambda _: post(sim.url + "/api/generate", body), range(5))} \
            == {200}
