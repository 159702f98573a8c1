"""Every outcome of METRICS.md from real failures: the sim's fault injection, a closed port, timeouts,
a killed greenlet, and a server that echoes the API key back."""

from __future__ import annotations

from collections import Counter

import gevent
import gevent.server
import pytest
from client_helpers import fixed_requests, send_batch, sim_target
from support import free_port

from llmload.client import RequestMix, Transport, send
from llmload.clock import now
from llmload.records import Record

N = 3
#: fast engine steps (the default's 24 ms per step is a real server's pace): for tests whose outcome does
#: not depend on how long a stream takes
FAST = {"step_base_s": 0.002, "decode_cost_s": 0.0001, "prefill_cost_s": 0.00001, "load_time_s": 0.0}

FAULTS = [
    # (flavor, sim faults, client target options, expected outcome)
    ("vllm", {"http_429": 1.0}, {}, "rejected"),
    ("vllm", {"http_503": 1.0}, {}, "rejected"),
    ("llamacpp", {"http_500": 1.0}, {}, "http_error"),
    ("vllm", {"oom": 1.0}, {}, "oom"),
    ("ollama", {"oom": 1.0}, {}, "oom"),
    ("vllm", {"disconnect": 1.0}, {}, "disconnect"),
    ("ollama", {"disconnect": 1.0}, {}, "disconnect"),
    ("vllm", {"malformed": 1.0}, {}, "malformed"),
    ("ollama", {"malformed": 1.0}, {}, "malformed"),
    ("llamacpp", {"stall": 1.0, "stall_s": 1.5}, {"idle_timeout": 0.4}, "timeout"),
    ("ollama", {"slow_headers_s": 1.0}, {"idle_timeout": 0.4}, "timeout"),
]
API = {"vllm": "openai-chat", "llamacpp": "openai-completions", "ollama": "ollama-chat"}


@pytest.mark.slow
@pytest.mark.parametrize(("flavor", "faults", "options", "expected"), FAULTS,
                         ids=[f"{fl}-{next(iter(f))}" for fl, f, _, _ in FAULTS])
def test_fault_lands_in_outcome(sim_factory, flavor: str, faults: dict, options: dict, expected: str) -> None:
    sim = sim_factory(flavor=flavor, config={**FAST, "faults": faults})
    records = send_batch(sim_target(sim.url, API[flavor], flavor, **options), fixed_requests(16, 12), N)
    assert Counter(r.outcome for r in records) == {expected: N}, [r.error for r in records]
    for rec in records:
        assert rec.error and len(rec.error) <= 300 and "\n" not in rec.error
        assert rec.sent_at is not None
        assert rec.closed_at is None or rec.closed_at >= rec.sent_at
    if expected == "oom":
        assert "out of memory" in records[0].error.lower()
    if expected == "disconnect":  # partial streams keep their times
        assert all(r.first_token_at is not None and r.token_times for r in records)


@pytest.mark.slow
def test_mixed_faults_give_right_counts(sim_factory) -> None:
    """Several faults at once: each request's fate comes from the sim's seeded draws; counts must match."""
    from llmload.sim.faults import draw_request
    from llmload.sim.settings import Faults

    faults = {"http_429": 0.15, "http_503": 0.1, "oom": 0.1, "disconnect": 0.15}
    sim = sim_factory(flavor="vllm", seed=3, config={**FAST, "faults": faults})
    n = 24
    records = send_batch(sim_target(sim.url, "openai-chat", "vllm"), fixed_requests(16, 4), n)
    expected = Counter()
    for i in range(n):  # requests were sent one at a time, so arrival index i is request i
        d = draw_request(3, i, Faults(**faults), max_tokens=4, eos_probability=0.0, ignore_eos=True)
        expected[{"http_429": "rejected", "http_503": "rejected", "oom": "oom", None: None}[d.error]
                 or ("disconnect" if d.disconnect_at is not None else "ok")] += 1
    assert Counter(r.outcome for r in records) == expected
    assert len({r.outcome for r in records}) >= 3


def test_connect_error_on_closed_port() -> None:
    target = sim_target(f"http://127.0.0.1:{free_port()}", "openai-chat", "vllm", connect_timeout=1.0)
    (rec,) = send_batch(target, fixed_requests(), 1)
    assert rec.outcome == "connect_error" and "cannot connect" in rec.error
    assert rec.first_token_at is None and rec.http_status is None


@pytest.mark.slow
def test_total_timeout_and_one_token_answers(sim_factory) -> None:
    sim = sim_factory(flavor="vllm", config={"load_time_s": 0.0})
    (slow,) = send_batch(sim_target(sim.url, "openai-chat", "vllm", timeout=0.3), fixed_requests(16, 100), 1)
    assert slow.outcome == "timeout" and "total timeout" in slow.error
    assert slow.token_times and slow.last_token_at - slow.sent_at < 0.35
    target = sim_target(sim.url, "openai-completions", "vllm")
    transport = Transport.from_target(target, concurrency=4)
    one = send_batch(target, fixed_requests(16, 1), 3, transport=transport)
    # each body is read to its end: one connection, handed back for reuse after each of the three
    assert transport.opened_connections(sim.url) == 1 and transport.reused_connections(sim.url) == 3
    transport.close()
    for rec in one:
        assert rec.outcome == "ok" and rec.output_tokens == 1 and len(rec.token_times) == 1
        assert rec.first_token_at == rec.last_token_at


@pytest.mark.slow
def test_killed_greenlet_records_cancelled_then_reraises(sim_factory) -> None:
    sim = sim_factory(flavor="ollama", config={"load_time_s": 0.0})
    target = sim_target(sim.url, "ollama-generate", "ollama")
    transport = Transport.from_target(target)
    prepared = RequestMix(fixed_requests(16, 200), target).build("c-0", 0)
    record = Record(request_id="c-0", step="s0", worker="w0", scheduled_at=now())
    greenlet = gevent.spawn(send, transport, prepared, record)
    gevent.sleep(0.3)
    greenlet.kill(block=True)
    assert isinstance(greenlet.value, gevent.GreenletExit)  # re-raised, so the kill completed normally
    assert record.outcome == "cancelled"
    assert record.token_times and record.first_token_at is not None
    assert record.last_token_at == record.token_times[-1]
    assert transport.router.outstanding[sim.url] == 0

    # an outer deadline (as a drain timeout around a user would be) also leaves a cancelled record
    record = Record(request_id="c-1", step="s0", worker="w0", scheduled_at=now())
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.3):
        send(transport, RequestMix(fixed_requests(16, 200), target).build("c-1", 1), record)
    assert record.outcome == "cancelled" and record.token_times and "outer timeout" in record.error
    transport.close()


@pytest.mark.slow
def test_ollama_cold_load_and_server_times(sim_factory) -> None:
    sim = sim_factory(flavor="ollama", config={"load_time_s": 0.8})
    cold, warm = send_batch(sim_target(sim.url, "ollama-chat", "ollama"), fixed_requests(16, 4), 2)
    assert cold.outcome == warm.outcome == "ok"
    assert cold.cold is True and cold.server_load_s >= 0.7
    assert warm.cold is False
    for rec in (cold, warm):
        assert rec.server_total_s >= rec.server_prompt_s + rec.server_decode_s
        assert rec.server_queue_s >= 0 and rec.input_tokens == 16 and rec.output_tokens == 4


def _echo_server(status: int):
    """A real HTTP server that answers every request with `status` and the request's headers in the
    body, as a careless proxy would."""
    def handle(sock, _addr):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        body = b'{"error": {"message": "rejected request: ' + data.split(b"\r\n\r\n")[0].replace(b"\r\n", b" | ") \
            + b'"}}'
        sock.sendall(b"HTTP/1.1 %d Unauthorized\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (status, len(body), body))
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def test_api_key_is_sent_but_never_recorded(monkeypatch, tmp_path) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("LLMLOAD_TEST_KEY", secret)
    server = _echo_server(401)
    try:
        target = sim_target(f"http://127.0.0.1:{server.server_port}", "openai-chat", "vllm",
                            api_key_env="LLMLOAD_TEST_KEY", headers={"X-Team": "capacity"})
        transport = Transport.from_target(target)
        (rec,) = send_batch(target, fixed_requests(), 1, transport=transport)
    finally:
        server.stop()
    assert rec.outcome == "http_error" and rec.http_status == 401
    assert "Bearer ***" in rec.error and "X-Team: capacity" in rec.error  # it was sent, then redacted
    for text in (rec.to_json(), repr(rec), repr(transport), str(transport.credentials)):
        assert secret not in text
