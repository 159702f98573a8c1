"""Hostile servers against the real client (issue 33, items 1, 3, 6, 9, 10, 11): each request ends in
one classified outcome, and the hostile server's log of what it received is the ground truth."""

from __future__ import annotations

import json
from collections import Counter

import gevent
import pytest
from client_helpers import fixed_requests, send_batch, sim_target
from hostile.hostile_server import WRONG_SHAPES, hostile_server, normal

from llmload.client import Transport
from llmload.client.transport import IdleTimer, SocketTiming
from llmload.protocols import MAX_LINE_BYTES


def _target(url: str, api: str = "openai-chat", **kw):
    return sim_target(url, api, None, **{"timeout": 30.0, "idle_timeout": 10.0, **kw})


def test_an_endless_line_is_malformed_and_bounded() -> None:
    """Item 1: a `data: xxxx...` line that never ends is cut at MAX_LINE_BYTES: `malformed`, long before
    the idle timeout (10 s) or the total timeout (30 s) could end it."""
    with hostile_server("endless_line", every=2) as server:
        records = send_batch(_target(server.url), fixed_requests(), 4)
    assert [r.outcome for r in records] == ["ok", "malformed", "ok", "malformed"], [r.error for r in records]
    bad = records[1]
    assert f"longer than {MAX_LINE_BYTES} bytes" in bad.error
    assert bad.closed_at - bad.sent_at < 10.0  # ended by the cap, not by a timeout
    assert len(server.requests(method="POST")) == 4


def test_every_read_yields_to_the_hub_while_bytes_keep_coming() -> None:
    """Item 1: reading a stream that is always readable still lets other greenlets (timers, signal
    handlers) run: a switch to the hub on every read, also when bytes were already waiting (the server
    is in this process, so the socket is not always full: what is checked is each read, not the total)."""
    ticks = 0

    def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            gevent.sleep(0)

    with hostile_server("endless_line") as server:
        transport = Transport([server.url], concurrency=1)
        idle = IdleTimer(10.0)
        other = resp = None
        try:  # closed whatever happens: a timer or a ticker left behind breaks the worker's later tests
            body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
            resp = transport.post(server.url, "/v1/chat/completions", body, {"Content-Type": "application/json"},
                                  SocketTiming(), idle)
            gevent.sleep(0.2)  # let the server fill the socket buffers: every read below finds bytes waiting
            other = gevent.spawn(ticker)
            gevent.sleep(0)
            resp.read_some()  # what came with the headers (no socket read)
            without_a_switch = 0
            for _ in range(200):
                before = ticks
                idle.touch()  # as the client does on each line: 200 reads on a loaded machine may take 10 s
                assert resp.read_some()
                without_a_switch += ticks == before
        finally:
            if other is not None:
                other.kill()
            idle.close()
            if resp is not None:
                resp.release()
            transport.close()
    assert without_a_switch == 0


def test_interim_responses_are_skipped() -> None:
    """Item 10: `100 Continue` and `103 Early Hints` before a valid 200 stream: measured normally."""
    with hostile_server("interim", tokens=5) as server:
        records = send_batch(_target(server.url), fixed_requests(), 3)
    assert [r.outcome for r in records] == ["ok"] * 3, [r.error for r in records]
    assert all(r.http_status == 200 and len(r.token_times) == 5 and r.output_tokens == 5 for r in records)
    assert len(server.requests(method="POST")) == 3


def test_a_request_read_then_dropped_is_sent_once() -> None:
    """Item 9: a server that reads a request and closes the connection gets each request id exactly once;
    the dropped requests are `disconnect` with no retry, on a kept-alive connection too."""
    with hostile_server("read_then_drop", every=2) as server:
        records = send_batch(_target(server.url), fixed_requests(), 8)
    ids = Counter(r.request_id for r in server.requests(method="POST"))
    assert set(ids.values()) == {1} and len(ids) == 8, ids
    outcomes = Counter(r.outcome for r in records)
    assert outcomes == {"ok": 4, "disconnect": 4}, [(r.outcome, r.error) for r in records]
    assert all(r.retries == 0 for r in records)


def _shape_server(shapes: list, *, ndjson: bool = False):
    """Each POST gets one token chunk, then the next wrong shape (by request order), then [DONE]."""
    def mode(handler, request) -> None:
        if request.method != "POST":
            normal(handler, request)
            return
        shape = shapes[(handler.count("shape") - 1) % len(shapes)]
        if ndjson:
            handler.stream_head(content_type="application/x-ndjson")
            handler.chunk(b'{"message": {"role": "assistant", "content": "Hi"}, "done": false}\n')
            handler.chunk(json.dumps(shape).encode() + b"\n")
            handler.chunk(b'{"done": true, "eval_count": 2, "prompt_eval_count": 3}\n')
            handler.end()
            return
        handler.stream_head()
        handler.sse({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
        handler.sse(shape)
        handler.done()
    return hostile_server(mode)


def test_wrong_shape_chunks_are_malformed_never_client_error() -> None:
    """Item 11: `choices: ["x"]`, `delta: "str"`, string counts ... are the server's malformed output."""
    with _shape_server(WRONG_SHAPES) as server:
        records = send_batch(_target(server.url), fixed_requests(), len(WRONG_SHAPES))
    got = {json.dumps(shape): (r.outcome, r.error) for shape, r in zip(WRONG_SHAPES, records, strict=True)}
    assert {k: v for k, v in got.items() if v[0] != "malformed"} == {}
    ollama_shapes = [{"message": "str", "done": False}, {"message": {"content": 7}}, {"response": ["a"]},
                     {"done": True, "eval_count": "3"}, {"done": True, "eval_count": -5}, [1], "x"]
    with _shape_server(ollama_shapes, ndjson=True) as server:
        records = send_batch(_target(server.url, "ollama-chat"), fixed_requests(), len(ollama_shapes))
    assert [r.outcome for r in records] == ["malformed"] * len(ollama_shapes), [r.error for r in records]


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": "12", "completion_tokens": "8"},
    {"prompt_tokens": 2**70, "completion_tokens": 8},
    {"prompt_tokens": 12, "completion_tokens": -5},
    {"prompt_tokens": 12, "completion_tokens": 8.5},
])
def test_wrong_typed_usage_is_malformed_and_the_records_merge(usage, tmp_path) -> None:
    """Item 3: a wrong-typed or impossible count is `malformed` at the parser; the record is writable."""
    from llmload.records import RecordWriter, merge_records

    with hostile_server("bad_usage", usage=usage, finish_reason="stop") as server:
        (rec,) = send_batch(_target(server.url), fixed_requests(), 1)
    assert rec.outcome == "malformed" and "token count" in rec.error, rec.error
    with RecordWriter(tmp_path / "r.jsonl") as writer:
        writer.write(rec)
    assert merge_records([tmp_path / "r.jsonl"], tmp_path / "r.parquet")["outcome"].tolist() == ["malformed"]


def test_a_finish_reason_that_is_not_text_is_malformed() -> None:
    with hostile_server("bad_usage", usage=True, finish_reason=7) as server:
        (rec,) = send_batch(_target(server.url), fixed_requests(), 1)
    assert rec.outcome == "malformed" and "finish_reason" in rec.error


@pytest.mark.parametrize(("claimed", "mismatch"), [(1, True), (10**6, True), (0, True), (16, False), (40, False)])
def test_usage_that_disagrees_with_the_events_is_flagged(claimed, mismatch) -> None:
    """Item 6: 16 output events with `completion_tokens: 1` (or 10**6): the events seen are timed, the
    server's count is kept apart and the record says so."""
    with hostile_server("lying_usage", events=16, delay_s=0.0, completion_tokens=claimed) as server:
        (rec,) = send_batch(_target(server.url), fixed_requests(), 1)
    assert rec.outcome == "ok" and len(rec.token_times) == 16
    assert rec.usage_mismatch is mismatch
    if mismatch:
        assert rec.output_tokens == 16 and rec.reported_output_tokens == claimed and rec.tokens_estimated
    else:
        assert rec.output_tokens == claimed and rec.reported_output_tokens is None


def test_an_absurd_prompt_count_is_replaced_by_the_planned_one() -> None:
    with hostile_server("lying_usage", events=4, delay_s=0.0, completion_tokens=4, prompt_tokens=10**9) as server:
        (rec,) = send_batch(_target(server.url), fixed_requests(24, 8), 1)
    assert rec.outcome == "ok" and rec.usage_mismatch and rec.tokens_estimated
    assert rec.input_tokens == rec.planned_input_tokens == 24 and rec.output_tokens == 4


def test_a_lying_count_cannot_hide_a_slow_tpot() -> None:
    """Item 6, the issue's case: 16 events 50 ms apart claiming one token: TPOT is timed on the events
    (about 50 ms), not on the claim (which made it unmeasured), nor on 10**6 (which made it ~1 us)."""
    from llmload.latency import latencies

    for claimed in (1, 10**6):
        with hostile_server("lying_usage", events=16, delay_s=0.05, completion_tokens=claimed) as server:
            (rec,) = send_batch(_target(server.url), fixed_requests(), 1)
        tpot = latencies(rec.sent_at, rec.first_token_at, rec.last_token_at, rec.output_tokens).tpot
        assert tpot >= 0.04, (claimed, tpot)  # the server slept 50 ms between events
