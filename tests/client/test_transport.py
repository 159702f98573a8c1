"""Routing, credentials, outcome rules, and the package's public surface."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

import llmload.client
import llmload.protocols
from llmload.client import Credentials, EndpointRouter, classify_error_text, classify_status
from llmload.client.outcomes import body_message, trim
from llmload.config import Target
from llmload.errors import ConfigError


def test_round_robin_and_random_are_spread_and_seeded() -> None:
    urls = ["http://a", "http://b", "http://c"]
    rr = EndpointRouter(urls, "round_robin")
    assert [rr.acquire() for _ in range(6)] == urls * 2
    picks = [EndpointRouter(urls, "random", seed=5).acquire() for _ in range(3)]
    assert len(set(picks)) == 1  # same seed, same first pick
    rnd = EndpointRouter(urls, "random", seed=1)
    assert set(Counter(rnd.acquire() for _ in range(300)).values()) != {300}


def test_least_outstanding_follows_releases() -> None:
    router = EndpointRouter(["http://a", "http://b"], "least_outstanding")
    assert [router.acquire() for _ in range(3)] == ["http://a", "http://b", "http://a"]
    router.release("http://a")
    router.release("http://a")
    assert router.acquire() == "http://a" and router.outstanding == {"http://a": 1, "http://b": 1}
    with pytest.raises(ValueError, match="unknown routing policy"):
        EndpointRouter(["http://a"], "fastest")


def test_credentials_from_env_file_and_redaction(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("K", "sk-abcdef123456")
    creds = Credentials.from_target(Target(url="http://x", api_key_env="K", headers={"X-Api-Token": "tok-987654321"}))
    assert creds.headers() == {"X-Api-Token": "tok-987654321", "Authorization": "Bearer sk-abcdef123456"}
    assert creds.redact("got sk-abcdef123456 and tok-987654321") == "got *** and ***"
    assert "sk-" not in repr(creds) and "sk-" not in str(creds)
    with pytest.raises(TypeError):
        pickle.dumps(creds)
    (tmp_path / "key").write_text("sk-file-key\n")
    assert Credentials.from_target(Target(url="http://x", api_key_file="key"), base_dir=tmp_path).headers() \
        == {"Authorization": "Bearer sk-file-key"}
    monkeypatch.delenv("K")
    with pytest.raises(ConfigError, match="target.api_key_env: environment variable K is not set"):
        Credentials.from_target(Target(url="http://x", api_key_env="K"))
    with pytest.raises(ConfigError, match="api_key_file"):
        Credentials.from_target(Target(url="http://x", api_key_file="missing"), base_dir=tmp_path)


@pytest.mark.parametrize(("status", "body", "outcome"), [
    (429, b'{"error": {"message": "slow down"}}', "rejected"),
    (503, b'{"object": "error", "message": "queue full", "code": 503}', "rejected"),
    (500, b'{"error": "server busy, please try again.  maximum pending requests exceeded"}', "rejected"),
    (500, b'{"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB"}}', "oom"),
    (503, b"torch.OutOfMemoryError: boom", "oom"),
    (400, b'{"error": {"code": 400, "type": "exceed_context_size_error", "message": "too long"}}', "http_error"),
    (404, b"<html>not found</html>", "http_error"),
])
def test_status_outcomes(status: int, body: bytes, outcome: str) -> None:
    assert classify_status(status, body_message(body)) == outcome


def test_in_stream_error_outcomes_and_trim() -> None:
    assert classify_error_text("CUDA error: out of memory") == "oom"
    assert classify_error_text("model runner has unexpectedly stopped") == "http_error"
    assert body_message(b'{"detail": "Not Found"}') == "Not Found"
    long = trim("x\n" * 400)
    assert len(long) == 300 and "\n" not in long


def test_public_surface_is_pinned() -> None:
    assert sorted(llmload.client.__all__) == sorted([
        "API_PATHS", "COLD_LOAD_S", "ConnectFailed", "Credentials", "DatasetEntry", "EndpointRouter",
        "LengthSampler", "PreparedRequest", "QualityResult", "RequestMix", "SendResult", "Transport",
        "build_body", "calibrate_tokens_per_word", "case_request", "check_answer", "classify_error_text",
        "classify_status", "is_oom", "load_dataset", "quality_failure", "run_quality_cases", "send"])
    assert sorted(llmload.protocols.__all__) == sorted([
        "MAX_LINE_BYTES", "MAX_TOKEN_COUNT", "NDJSONDecoder", "OllamaStreamParser", "OpenAIStreamParser", "SSEDecoder", "SSEEvent", "ServerTimings",
        "StreamChunk", "StreamDecoder", "error_message", "loads_json"])
    for module in (llmload.client, llmload.protocols):
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_pool_sockets_have_nodelay_timing_and_reuse() -> None:
    import socket

    import gevent.server

    from llmload.client import ConnectFailed, Transport
    from llmload.client.transport import SocketTiming

    server = gevent.server.StreamServer(("127.0.0.1", 0), lambda sock, addr: sock.recv(1))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        transport = Transport([url], concurrency=2)
        pool = transport.endpoint(url).pool
        first, second = SocketTiming(), SocketTiming()
        sock = pool.get_socket(first)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert first.stage == "ready" and first.ready_at is not None and not first.reused
        pool.return_socket(sock)
        assert pool.get_socket(second) is sock and second.reused and second.ready_at > first.ready_at
        assert not first.reused  # each request's timing is its own, not the greenlet's
        pool.release_socket(sock)
        assert transport.opened_connections(url) == 1 and transport.reused_connections(url) == 1
        transport.close()
    finally:
        server.stop()
    closed = Transport([url], connect_timeout_s=1.0)
    timing = SocketTiming()
    with pytest.raises(ConnectFailed, match="cannot connect to 127.0.0.1"):
        closed.endpoint(url).pool.get_socket(timing)
    assert timing.stage == "connect" and timing.ready_at is None


def test_pool_wait_is_seen_on_the_request_timing() -> None:
    import gevent
    import gevent.server

    from llmload.client import Transport
    from llmload.client.transport import SocketTiming

    server = gevent.server.StreamServer(("127.0.0.1", 0), lambda sock, addr: sock.recv(1))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        pool = Transport([url], concurrency=1).endpoint(url).pool
        held = pool.get_socket(SocketTiming())
        timing = SocketTiming()
        waiter = gevent.spawn(pool.get_socket, timing)
        gevent.sleep(0.05)
        assert timing.stage == "pool" and timing.pool_wait_s >= 0.04  # still waiting: so far
        pool.return_socket(held)
        assert waiter.get(timeout=2) is held
        assert timing.stage == "ready" and timing.reused and 0.04 <= timing.pool_wait_s < 1.0
        pool.close()
    finally:
        server.stop()


def test_geventhttpclient_contract() -> None:
    """The pieces of geventhttpclient the transport subclasses, and the version range pyproject pins:
    fails when an upgrade changes them (then re-read its connectionpool.py / response.py)."""
    import inspect
    import re
    from importlib.metadata import version
    from pathlib import Path

    from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
    from geventhttpclient.response import HTTPSocketPoolResponse

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    low, high = re.search(r'"geventhttpclient>=([\d.]+),<([\d.]+)"', pyproject).groups()
    installed = tuple(int(x) for x in version("geventhttpclient").split(".")[:2])
    assert tuple(int(x) for x in low.split(".")[:2]) <= installed < tuple(int(x) for x in high.split("."))
    for cls in (ConnectionPool, SSLConnectionPool):
        params = list(inspect.signature(cls.__init__).parameters)
        assert params[1:5] == ["connection_host", "connection_port", "request_host", "request_port"]
        # the SSL pool hands its other keywords to ConnectionPool's
        assert {"size", "connection_timeout", "network_timeout"} <= set(params) or "kw" in params
        for name, arity in (("get_socket", 1), ("return_socket", 2), ("release_socket", 2),
                            ("after_connect", 2), ("close", 1)):
            assert len(inspect.signature(getattr(cls, name)).parameters) == arity, name
    # after_connect is the hook for every new connection; get_socket makes one when none is idle
    assert "self.after_connect(sock)" in inspect.getsource(ConnectionPool._create_socket)
    assert "self._create_socket()" in inspect.getsource(ConnectionPool.get_socket)
    params = inspect.signature(HTTPSocketPoolResponse.__init__).parameters
    assert list(params)[1:3] == ["sock", "pool"]
    for name in ("readline", "read", "release", "status_code", "should_close", "feed"):
        assert hasattr(HTTPSocketPoolResponse, name), name
    # StreamResponse.read_some: the parser's body callback fills `_body_buffer` (which readline() and
    # read() drain too), and a completed message releases the connection from inside `feed`
    from geventhttpclient.response import HTTPResponse, HTTPSocketResponse
    assert "self._body_buffer += buf" in inspect.getsource(HTTPResponse._on_body)
    assert "self.release()" in inspect.getsource(HTTPSocketResponse._on_message_complete)
    assert "self.message_complete = False" in inspect.getsource(HTTPResponse.__init__)
    assert isinstance(HTTPResponse()._body_buffer, bytearray)
