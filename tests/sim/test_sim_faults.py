"""Each injected fault, seen the way a client sees it, and the ground-truth log that records it."""

from __future__ import annotations

import json
import time

import pytest
import requests
import sseclient
from sim_client import FAST, ndjson, post

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "stream": True}


def stream_raw(url: str, body: dict) -> tuple[int, list[str], str | None]:
    """Status, SSE data fields, and the error the stream ended with (None if it ended cleanly)."""
    resp = requests.post(url, json=body, stream=True, timeout=15)
    data, error = [], None
    try:
        for event in sseclient.SSEClient(resp.raw).events():
            data.append(event.data)
    except Exception as exc:  # the connection was cut: the client sees a broken body
        error = type(exc).__name__
    return resp.status_code, data, error


@pytest.mark.parametrize(("fault", "status", "outcome"), [("http_429", 429, "rejected"),
                                                          ("http_503", 503, "rejected"),
                                                          ("http_500", 500, "http_error")])
def test_http_error_faults(sim_factory, fault, status, outcome):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {fault: 1.0}})
    resp = post(sim.url + "/v1/chat/completions", CHAT, headers={"X-Request-Id": "e1"})
    assert resp.status_code == status and resp.json()["error"]["code"] == status
    row = sim.ground_truth_rows()[0]
    assert row["request_id"] == "e1" and row["outcome"] == outcome and row["http_status"] == status


@pytest.mark.slow
def test_oom_in_stream_and_as_500(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"oom": 1.0}})
    status, data, _ = stream_raw(sim.url + "/v1/chat/completions", CHAT)
    assert status == 200 and "CUDA out of memory" in json.loads(data[0])["error"]["message"]
    assert data[-1] == "[DONE]"
    resp = post(sim.url + "/v1/chat/completions", {**CHAT, "stream": False})
    assert resp.status_code == 500 and "CUDA out of memory" in resp.json()["error"]["message"]
    assert [r["outcome"] for r in sim.ground_truth_rows()] == ["oom", "oom"]
    ollama = sim_factory(flavor="ollama", config={**FAST, "faults": {"oom": 1.0}})
    resp, lines = ndjson(ollama.url + "/api/generate", {"model": "sim-model", "prompt": "hi"})
    assert resp.status_code == 200 and "CUDA out of memory" in lines[-1]["error"]


def test_disconnect_mid_stream(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"disconnect": 1.0}})
    status, data, error = stream_raw(sim.url + "/v1/chat/completions", CHAT)
    assert status == 200 and error is not None and "[DONE]" not in data
    row = sim.ground_truth_rows()[0]
    assert row["outcome"] == "disconnect" and 1 <= row["output_tokens"] < 12
    assert len(row["token_times"]) == row["output_tokens"]


def test_malformed_chunk(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"malformed": 1.0}})
    status, data, error = stream_raw(sim.url + "/v1/chat/completions", CHAT)
    broken = []
    for item in data:
        try:
            json.loads(item) if item != "[DONE]" else None
        except ValueError:
            broken.append(item)
    assert status == 200 and error is None and len(broken) == 1 and data[-1] == "[DONE]"
    assert sim.ground_truth_rows()[0]["outcome"] == "malformed"


def test_stall_pauses_the_stream(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"stall": 1.0, "stall_s": "400ms"}})
    t0 = time.monotonic()
    status, data, error = stream_raw(sim.url + "/v1/chat/completions", CHAT)
    assert status == 200 and error is None and data[-1] == "[DONE]" and time.monotonic() - t0 > 0.4
    row = sim.ground_truth_rows()[0]
    gaps = [b - a for a, b in zip(row["token_times"][:-1], row["token_times"][1:], strict=True)]
    assert row["outcome"] == "stall" and row["output_tokens"] == 12 and max(gaps) >= 0.38


def test_slow_headers(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"slow_headers_s": 0.3}})
    t0 = time.monotonic()
    resp = post(sim.url + "/v1/chat/completions", CHAT, stream=True)
    assert time.monotonic() - t0 >= 0.28 and resp.status_code == 200
    resp.close()


def test_client_gone_frees_the_engine(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "step_base_s": 0.02})
    resp = post(sim.url + "/v1/chat/completions", {**CHAT, "max_tokens": 200}, stream=True,
                headers={"X-Request-Id": "gone"})
    next(resp.iter_lines())
    resp.close()
    deadline = time.monotonic() + 5
    while not sim.ground_truth_rows():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    row = sim.ground_truth_rows()[0]
    assert row["request_id"] == "gone" and row["outcome"] == "client_gone" and row["output_tokens"] < 200


def test_exit_after(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"exit_after_s": 0.5}})
    assert sim.proc.wait(timeout=10) == 1


def test_ground_truth_has_one_complete_row_per_request(sim_factory):
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"http_429": 0.3, "disconnect": 0.3}}, seed=11)
    ids = [f"r{i}" for i in range(12)]
    for rid in ids:
        try:
            resp = post(sim.url + "/v1/chat/completions", {**CHAT, "max_tokens": 4}, headers={"X-Request-Id": rid},
                        stream=True)
            for _ in resp.iter_lines():
                pass
        except requests.RequestException:
            pass  # a disconnect fault
    deadline = time.monotonic() + 5
    while len(sim.ground_truth_rows()) < len(ids):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rows = sim.ground_truth_rows()
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    assert {r["outcome"] for r in rows} <= {"ok", "rejected", "disconnect"} and len({r["outcome"] for r in rows}) >= 2
    for r in rows:
        assert r["finished_at"] >= r["received_at"] and r["flavor"] == "vllm"
        assert len(r["token_times"]) == r["output_tokens"]
        if r["outcome"] == "rejected":
            assert r["admitted_at"] is None and r["queue_s"] is None and r["http_status"] == 429


def test_faults_apply_to_non_streaming_requests(sim_factory):
    body = {**CHAT, "stream": False}
    cut = sim_factory(flavor="vllm", config={**FAST, "faults": {"disconnect": 1.0}})
    with pytest.raises(requests.ConnectionError):
        post(cut.url + "/v1/chat/completions", body)
    broken = sim_factory(flavor="llamacpp", config={**FAST, "faults": {"malformed": 1.0}})
    resp = post(broken.url + "/v1/chat/completions", body)
    assert resp.status_code == 200
    with pytest.raises(ValueError):
        resp.json()
    assert cut.ground_truth_rows()[0]["outcome"] == "disconnect"
    assert broken.ground_truth_rows()[0]["outcome"] == "malformed"


def test_fault_window_applies_between_its_times(sim_factory):
    from llmload.sim.settings import Faults

    faults = Faults.model_validate({"windows": [{"fault": "http_503", "start_s": "1s", "end_s": "2s"}]})
    assert faults.at(0.5).http_503 == 0 and faults.at(1.5).http_503 == 1 and faults.at(2.0).http_503 == 0
    sim = sim_factory(flavor="vllm", config={**FAST, "faults": {"windows": [
        {"fault": "http_429", "start_s": 0, "end_s": "60s"}]}})
    assert post(sim.url + "/v1/chat/completions", CHAT).status_code == 429
