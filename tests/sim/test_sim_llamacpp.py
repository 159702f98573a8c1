"""llama.cpp flavour: /health 503 while loading, slots and deferred requests, the per-slot context
400, `timings`, /completion, /slots, /props, /tokenize and the `llamacpp:` metrics."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sim_client import FAST, content_of, metrics, post, sse
from support import REPO, stop_process

from llmload.telemetry.sources import slot_context_usage
from llmload.tokens import count_tokens

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


@pytest.fixture
def llama(sim_factory):
    return sim_factory(flavor="llamacpp", config={**FAST, "num_parallel": 2, "ctx_size": 128})


def test_port_zero_banner_and_health_503_while_loading(tmp_path):
    cfg = tmp_path / "sim.yaml"
    cfg.write_text("load_time_s: 1.5\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "sim", "--flavor", "llamacpp", "--port", "0",
                             "--config", str(cfg)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("llmload sim (llamacpp) listening on http://127.0.0.1:")
        assert line.endswith(" (loopback only)")
        url = line.split(" ")[5]
        early = requests.get(url + "/health", timeout=5)
        assert early.status_code == 503 and early.json() == LOADING
        deadline = time.monotonic() + 10
        while requests.get(url + "/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert requests.get(url + "/health", timeout=5).json() == {"status": "ok"}
    finally:
        stop_process(proc)
    assert proc.returncode == 0


def test_chat_stream_finish_chunk_with_timings(llama):
    body = {"messages": [{"role": "user", "content": "What is 1+1?"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}
    _, events = sse(llama.url + "/v1/chat/completions", body)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    finish, usage, done = events[-3:]
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "length"
    assert "timings" not in finish  # with include_usage the real server puts them on the usage chunk
    t = usage["timings"]
    assert t["prompt_n"] == 10 and t["predicted_n"] == 4 and t["prompt_ms"] > 0 and t["predicted_ms"] > 0
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4 and done == "[DONE]"
    assert content_of(events).startswith("2") and count_tokens(content_of(events)) == 4
    _, plain = sse(llama.url + "/v1/chat/completions", {**body, "stream_options": {}})
    assert plain[-2]["choices"][0]["finish_reason"] == "length" and plain[-2]["timings"]["predicted_n"] == 4


def test_native_completion_and_info(llama):
    _, events = sse(llama.url + "/completion", {"prompt": "Hello world", "n_predict": 3, "stream": True})
    assert [e["stop"] for e in events] == [False, False, False, True] and "[DONE]" not in events
    assert events[-1]["timings"]["predicted_n"] == 3 and events[-1]["stop_type"] == "limit"
    full = post(llama.url + "/completion", {"prompt": "Hello world", "n_predict": 3}).json()
    assert full["stop"] is True and count_tokens(full["content"]) == 3 and full["tokens_evaluated"] == 2
    assert post(llama.url + "/tokenize", {"content": "Hello world!"}).json()["tokens"].__len__() == 3
    assert requests.get(llama.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "sim-model"
    done = post(llama.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2}).json()
    assert done["usage"]["completion_tokens"] == 2 and done["object"] == "text_completion"
    props = requests.get(llama.url + "/props", timeout=5).json()
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 64
    bad = requests.post(llama.url + "/completion", data=b"{nope", timeout=5)
    assert bad.status_code == 500


def test_prompt_over_the_slot_context_is_a_400(llama):
    resp = post(llama.url + "/v1/completions", {"prompt": "word " * 70, "max_tokens": 2})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 64 and err["n_prompt_tokens"] == 70
    assert llama.ground_truth_rows()[-1]["outcome"] == "http_error"


def test_requests_beyond_slots_are_deferred(llama):
    seen = {"deferred": 0.0, "processing": 0.0, "busy_slots": 0, "held": set(), "kv_usage": 0.0}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            m = metrics(llama.url)
            seen["deferred"] = max(seen["deferred"], m["llamacpp:requests_deferred"])
            seen["processing"] = max(seen["processing"], m["llamacpp:requests_processing"])
            slots = requests.get(llama.url + "/slots", timeout=5).json()
            seen["busy_slots"] = max(seen["busy_slots"], sum(s["is_processing"] for s in slots))
            # a busy slot's token cache: the prompt plus what it decoded so far (server_slot::to_json)
            seen["held"] |= {(s["n_prompt_tokens"], s["next_token"][0]["n_decoded"]) for s in slots if s["is_processing"]}
            seen["kv_usage"] = max(seen["kv_usage"], slot_context_usage(slots) or 0.0)
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    # long enough answers (60 of the slot's 64 tokens) that the three beyond the two slots wait a while:
    # the poller sees the deferral on a loaded machine too
    body = {"prompt": "hi", "n_predict": 60}
    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda _: post(llama.url + "/completion", body), range(5)))
    stop.set()
    poller.join()
    assert {r.status_code for r in results} == {200}
    assert seen["deferred"] >= 1 and seen["processing"] == 2 and seen["busy_slots"] == 2
    prompt = {held - decoded for held, decoded in seen["held"]}
    assert prompt == {1} and max(d for _, d in seen["held"]) > 1, seen["held"]  # "hi" is one token
    assert 0 < seen["kv_usage"] <= 2 * 61 / 128  # two busy slots of 64 context, at most 1 + 60 tokens each
    m = metrics(llama.url)
    assert m["llamacpp:tokens_predicted_total"] == 300 and m["llamacpp:prompt_tokens_total"] == 5
    assert m["llamacpp:requests_deferred"] == 0 and m["llamacpp:n_decode_total"] > 0
