"""The idle timeout (`target.idle_timeout`): the longest silence between stream events, as one timer per
request (`llmload.client.transport.IdleTimer`), restarted at each line and gone once the request ends."""

from __future__ import annotations

import json

import gevent
from client_helpers import fixed_requests, serve, sim_target

from llmload.client import RequestMix, Transport, send
from llmload.clock import now
from llmload.records import Record

WORDS = ["one", " two", " three", " four", " five", " six"]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode()


def _send(server, idle_timeout: float, after_s: float = 0.0) -> Record:
    """One request from a greenlet that stays alive `after_s` past the request (a leaked timer would
    throw into it then)."""
    target = sim_target(f"http://127.0.0.1:{server.server_port}", "openai-chat", None, idle_timeout=idle_timeout)
    transport = Transport.from_target(target, concurrency=1)
    record = Record(request_id="r-0", step="s0", worker="w0", scheduled_at=now())

    def one() -> None:
        send(transport, RequestMix(fixed_requests(10, 6), target).build("r-0", 0, seed=7), record)
        gevent.sleep(after_s)

    try:
        gevent.spawn(one).get(timeout=10)  # re-raises whatever reached the greenlet
    finally:
        transport.close()
    return record


def test_events_closer_than_the_idle_timeout_keep_a_long_stream_alive() -> None:
    events = [chunk({"content": w}) for w in WORDS] + [chunk({}, "stop"), b"data: [DONE]"]
    server = serve(events, clean_end=True, delay_s=0.12)  # ~1 s in all, events 0.12 s apart
    try:
        rec = _send(server, idle_timeout=0.4, after_s=0.6)  # the greenlet outlives the timeout: no throw
    finally:
        server.stop()
    assert rec.outcome == "ok", rec.error
    assert len(rec.token_times) == len(WORDS) and rec.closed_at - rec.sent_at > 0.4 * 2


def test_silence_between_events_is_an_idle_timeout_with_the_times_seen() -> None:
    events = [chunk({"content": w}) for w in WORDS[:2]]
    server = serve(events, clean_end=True, delay_s=0.8)  # 0.8 s of silence after each event
    try:
        rec = _send(server, idle_timeout=0.3)
        ended = now()
    finally:
        server.stop()
    assert rec.outcome == "timeout" and rec.error.startswith("idle timeout"), rec.error
    assert len(rec.token_times) == 1 and 0.25 < ended - rec.token_times[0] < 0.75  # the timer, not the server


def test_a_fired_timer_throws_once_and_a_touch_restarts_it() -> None:
    """Fired, the timer stops: a greenlet that caught its TimeoutError and went on without `close()` is not
    thrown at again every `seconds` (it was: a test that failed mid-read left one behind, and its worker's next
    ten tests failed with `TimeoutError: timed out`). A `touch()` after the throw arms it again."""
    from llmload.client.transport import IdleTimer

    def caught(wait_s: float) -> int:
        throws, until = 0, now() + wait_s
        while now() < until:
            try:
                gevent.sleep(until - now())
            except TimeoutError:
                throws += 1
        return throws

    def body() -> tuple[int, int]:
        idle = IdleTimer(0.05)
        idle.touch()
        first = caught(0.4)  # 8 periods: one throw
        idle.touch()
        second = caught(0.3)
        idle.close()
        return first, second

    assert gevent.spawn(body).get(timeout=10) == (1, 1)
