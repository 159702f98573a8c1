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
        "NDJSONDecoder", "OllamaStreamParser", "OpenAIStreamParser", "SSEDecoder", "SSEEvent", "ServerTimings",
        "StreamChunk", "StreamDecoder", "error_message", "loads_json"])
    for module in (llmload.client, llmload.protocols):
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_pool_sockets_have_nodelay_and_ready_time() -> None:
    import socket

    import gevent.server

    from llmload.client import ConnectFailed, Transport
    from llmload.client.transport import socket_ready_at

    server = gevent.server.StreamServer(("127.0.0.1", 0), lambda sock, addr: sock.recv(1))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        transport = Transport([url], concurrency=2)
        socket_ready_at(reset=True)
        pool = transport.client(url)._connection_pool
        sock = pool.get_socket()
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert socket_ready_at(reset=True) is not None
        assert socket_ready_at() is None
        pool.release_socket(sock)
        transport.close()
    finally:
        server.stop()
    closed = Transport([url], connect_timeout_s=1.0)
    with pytest.raises(ConnectFailed, match="cannot connect to 127.0.0.1"):
        closed.client(url)._connection_pool.get_socket()
