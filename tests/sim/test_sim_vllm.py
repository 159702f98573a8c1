"""vLLM flavour: OpenAI streams read with sseclient-py, /metrics with prometheus_client's parser,
queueing, KV exhaustion and preemption in /metrics, the admission 503, determinism, ground truth."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sim_client import FAST, content_of, metrics, post, sse
from support import start_sim, stop_process

from llmload.sim.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from llmload.tokens import count_tokens

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "What is 2+2? Answer with a number."}]}
GT_KEYS = {"request_id", "received_at", "admitted_at", "first_token_at", "token_times", "finished_at",
           "input_tokens", "output_tokens", "preemptions", "outcome", "queue_s", "flavor"}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """One FAST vLLM sim for this module's tests that read only their own requests (one's ground-truth row by
    its request id, the counters' rise over one's own request): a sim costs ~0.3 s of CPU to start."""
    sim = start_sim(tmp_path_factory.mktemp("vllm-sim"), flavor="vllm", config=FAST)
    yield sim
    stop_process(sim.proc)


def test_chat_stream_with_usage_and_request_id(vllm):
    body = {**CHAT, "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}}
    resp, events = sse(vllm.url + "/v1/chat/completions", body, headers={"X-Request-Id": "req-1"})
    assert resp.headers["x-request-id"] == "req-1"
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    first, *chunks, usage, _ = events
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(chunks) == 6 and all(set(c["choices"][0]["delta"]) == {"content"} for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["length"]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 15, "completion_tokens": 6,
                                                          "total_tokens": 21}
    text = content_of(events)
    assert count_tokens(text) == 6 and text.startswith("4")
    row = next(r for r in vllm.ground_truth_rows() if r["request_id"] == "req-1")
    assert set(row) >= GT_KEYS and row["outcome"] == "ok" and row["flavor"] == "vllm"
    assert row["output_tokens"] == 6 and len(row["token_times"]) == 6 and row["input_tokens"] == 15
    assert row["received_at"] <= row["admitted_at"] <= row["first_token_at"] <= row["finished_at"]
    assert row["token_times"] == sorted(row["token_times"]) and row["first_token_at"] == row["token_times"][0]
    assert row["queue_s"] == pytest.approx(row["admitted_at"] - row["received_at"])
    assert abs(row["received_at"] - time.time()) < 30  # the client's wall base


def test_no_usage_chunk_unless_asked_and_continuous_usage(vllm):
    _, events = sse(vllm.url + "/v1/chat/completions", {**CHAT, "max_tokens": 3, "stream": True})
    assert all(e == "[DONE]" or e["choices"] for e in events)
    body = {**CHAT, "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    _, events = sse(vllm.url + "/v1/chat/completions", body)
    counts = [e["usage"]["completion_tokens"] for e in events[1:-2]]
    assert counts == [1, 2, 3] and all("usage" in e for e in events[:-1])


def test_completions_stream_and_non_stream(vllm):
    body = {"model": "sim-model", "prompt": "Once upon a time", "max_tokens": 4}
    _, events = sse(vllm.url + "/v1/completions", {**body, "stream": True})
    assert [e["object"] for e in events[:-1]] == ["text_completion"] * 4
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert count_tokens(content_of(events)) == 4
    full = post(vllm.url + "/v1/completions", body).json()
    assert full["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
    assert count_tokens(full["choices"][0]["text"]) == 4
    chat = post(vllm.url + "/v1/chat/completions", {**CHAT, "max_tokens": 2}).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"].startswith("4")


def test_info_endpoints_and_tokenize(vllm):
    assert requests.get(vllm.url + "/health", timeout=5).status_code == 200
    assert requests.get(vllm.url + "/version", timeout=5).json()["version"]
    models = requests.get(vllm.url + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "sim-model" and models["data"][0]["max_model_len"] == 8192
    tok = post(vllm.url + "/tokenize", {"model": "sim-model", "prompt": "What is 2+2?"}).json()
    assert tok["count"] == 6 == len(tok["tokens"]) and tok["max_model_len"] == 8192
    too_long = post(vllm.url + "/v1/completions", {"model": "sim-model", "prompt": "a " * 9000, "max_tokens": 1})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == 400
    assert requests.get(vllm.url + "/nope", timeout=5).json() == {"detail": "Not Found"}
    assert requests.get(vllm.url + "/v1/completions", timeout=5).status_code == 405
    bad = requests.post(vllm.url + "/v1/completions", data=b"{nope", timeout=5)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequestError"


def test_metrics_names_and_buckets(vllm):
    before = metrics(vllm.url)  # the module's sim: other tests' requests are counted too
    post(vllm.url + "/v1/completions", {"model": "sim-model", "prompt": "hi", "max_tokens": 3})
    text = requests.get(vllm.url + "/metrics", timeout=5).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
                 "vllm:cache_config_info", "vllm:admission_rejections", "vllm:request_queue_time_seconds",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds"):
        assert name in families, name
    labels = families["vllm:num_requests_running"].samples[0].labels
    assert labels == {"model_name": "sim-model", "engine": "0"}

    def bounds(name):
        return [float(s.labels["le"]) for s in families[name].samples if s.name.endswith("_bucket")][:-1]

    assert bounds("vllm:time_to_first_token_seconds") == list(TTFT_BUCKETS)
    assert bounds("vllm:inter_token_latency_seconds") == list(ITL_BUCKETS)
    assert bounds("vllm:request_queue_time_seconds") == list(REQUEST_LATENCY_BUCKETS)
    assert bounds("vllm:e2e_request_latency_seconds") == list(REQUEST_LATENCY_BUCKETS)
    m = metrics(vllm.url)
    rise = {name: m[name] - before[name] for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total",
                                                      "vllm:inter_token_latency_seconds_count")}
    assert rise == {"vllm:generation_tokens_total": 3, "vllm:prompt_tokens_total": 1,
                    "vllm:inter_token_latency_seconds_count": 0}  # non-streaming: one write, no token gaps
    assert "_created" not in text


@pytest.mark.slow
def test_queueing_kv_exhaustion_and_preemption_show_in_metrics(sim_factory):
    cfg = {**FAST, "step_base_s": 0.01, "max_num_seqs": 3, "num_blocks": 12, "block_size": 8}
    sim = sim_factory(flavor="vllm", config=cfg)
    seen = {"waiting": 0.0, "running": 0.0, "kv": 0.0}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            m = metrics(sim.url)
            seen["waiting"] = max(seen["waiting"], m["vllm:num_requests_waiting"])
            seen["running"] = max(seen["running"], m["vllm:num_requests_running"])
            seen["kv"] = max(seen["kv"], m["vllm:kv_cache_usage_perc"])
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    body = {"model": "sim-model", "prompt": "x " * 20, "max_tokens": 30, "ignore_eos": True}
    with ThreadPoolExecutor(6) as pool:
        # distinct prompts: identical ones would share their prefix blocks (prefix caching), not fill the KV
        results = list(pool.map(lambda i: post(sim.url + "/v1/completions",
                                               {**body, "prompt": f"p{i} " + "x " * 19}).json(), range(6)))
    stop.set()
    poller.join()
    assert all(r["usage"]["completion_tokens"] == 30 for r in results)
    m = metrics(sim.url)
    assert seen["waiting"] >= 1 and seen["running"] <= 3 and seen["kv"] > 0.9
    assert m["vllm:num_preemptions_total"] >= 1
    assert m["vllm:prompt_tokens_total"] == 6 * 20  # once per request, recomputation not counted again
    assert m["vllm:generation_tokens_total"] == 6 * 30
    assert m["vllm:request_queue_time_seconds_count"] == 6 and m["vllm:request_queue_time_seconds_sum"] > 0
    assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    rows = sim.ground_truth_rows()
    assert sum(r["preemptions"] for r in rows) == m["vllm:num_preemptions_total"]
    assert max(r["queue_s"] for r in rows) > 0.05


def test_admission_limit_gives_503_and_counts_it(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "max_num_seqs": 1, "max_num_queued_reqs": 2})
    body = {"model": "sim-model", "prompt": "hi", "max_tokens": 40}
    with ThreadPoolExecutor(5) as pool:
        statuses = sorted(pool.map(lambda _: post(sim.url + "/v1/completions", body), range(5)),
                          key=lambda r: r.status_code)
    codes = [r.status_code for r in statuses]
    assert codes.count(200) >= 2 and codes.count(503) >= 1 and set(codes) <= {200, 503}
    err = statuses[-1].json()["error"]
    assert err["code"] == 503 and "max_num_queued_reqs=2" in err["message"]
    assert metrics(sim.url)["vllm:admission_rejections_total"] == codes.count(503)
    rows = sim.ground_truth_rows()
    assert len(rows) == 5 and sorted(r["outcome"] for r in rows).count("rejected") == codes.count(503)


@pytest.mark.slow
def test_same_seed_same_lengths(sim_factory):
    cfg = {**FAST, "eos_probability": 0.15}

    def lengths(seed):
        sim = sim_factory(flavor="vllm", config=cfg, seed=seed)
        out = []
        for _ in range(8):
            r = post(sim.url + "/v1/completions", {"model": "sim-model", "prompt": "hi", "max_tokens": 30}).json()
            out.append((r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]))
        return out

    first = lengths(3)
    assert first == lengths(3)
    assert first != lengths(4)
    assert any(reason == "stop" for _, reason in first)


@pytest.mark.slow
def test_admission_never_precedes_arrival_under_load(sim_factory):
    """Requests arriving while the engine runs late on its own schedule (short steps, 200 streams at
    100 req/s: on the old code about a quarter were admitted before they arrived) are admitted at or
    after they were received: `queue_s >= 0` in the ground truth, and so in the queue-time histogram,
    whose `_sum` equals the logged queue times' sum."""
    sim = sim_factory(flavor="vllm", config={"step_base_s": 0.002, "decode_cost_s": 0.0001,
                                             "prefill_cost_s": 0.00001})
    body = {"model": "sim-model", "prompt": "hello " * 30, "max_tokens": 12, "ignore_eos": True, "stream": True}
    start = time.monotonic()

    def one(i: int) -> int:
        time.sleep(max(0.0, start + i / 100 - time.monotonic()))
        resp = post(sim.url + "/v1/completions", body, stream=True, timeout=30)
        for _ in resp.iter_lines():
            pass
        return resp.status_code

    with ThreadPoolExecutor(64) as pool:
        codes = list(pool.map(one, range(200)))
    assert codes == [200] * 200
    rows = sim.ground_truth_rows()
    assert len(rows) == 200
    queue = [r["queue_s"] for r in rows]
    assert min(queue) >= 0, sorted(queue)[:5]
    assert all(r["admitted_at"] >= r["received_at"] for r in rows)
    m = metrics(sim.url)
    assert m["vllm:request_queue_time_seconds_count"] == 200
    assert m["vllm:request_queue_time_seconds_sum"] == pytest.approx(sum(queue), abs=1e-6)
