"""The hostile server fixture itself: each mode misbehaves as documented, and the log is the truth."""

from __future__ import annotations

import json
import socket
import time
from urllib.request import Request, urlopen

from hostile.hostile_server import MODES, hostile_server

_CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


def _raw(url: str, data: bytes, *, read_s: float = 2.0, limit: int = 1 << 20) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_s) as sock:
        sock.sendall(data)
        got = b""
        deadline = time.monotonic() + read_s
        try:
            while len(got) < limit and time.monotonic() < deadline:
                part = sock.recv(65536)
                if not part:
                    break
                got += part
        except TimeoutError:
            pass
        return got


def _post(path: str = "/v1/chat/completions", rid: str = "r-1") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: {rid}\r\n"
            f"Content-Length: {len(_CHAT)}\r\nConnection: close\r\n\r\n").encode() + _CHAT


def test_normal_streams_and_logs_every_request() -> None:
    with hostile_server("normal", tokens=3) as server:
        with urlopen(server.url + "/v1/models", timeout=5) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "hostile-model"
        req = Request(server.url + "/v1/chat/completions", data=_CHAT, headers={"X-Request-Id": "abc"})
        with urlopen(req, timeout=5) as resp:
            body = resp.read()
    assert body.count(b"data: ") == 3 + 1 + 1  # tokens, usage, [DONE]
    assert b'"completion_tokens": 3' in body
    assert [(r.method, r.path) for r in server.log] == [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    post = server.requests(method="POST")[0]
    assert post.request_id == "abc" and post.json()["model"] == "m" and post.connection == 2


def test_every_mode_is_registered_and_a_callable_is_a_mode() -> None:
    assert {"normal", "endless_line", "drip", "bad_usage", "interim", "read_then_drop", "wrong_shape",
            "lying_usage"} <= set(MODES)

    def teapot(handler, request):
        handler.respond(418, b"no", content_type="text/plain")

    with hostile_server(teapot) as server:
        got = _raw(server.url, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 418 ")


def test_endless_line_never_ends_its_line(hostile) -> None:
    server = hostile("endless_line")
    got = _raw(server.url, _post(), read_s=0.5, limit=4 << 20)
    head, _, body = got.partition(b"\r\n\r\n")
    assert b" 200 " in head and len(body) > 100_000 and b"\n" not in body[20:]
    server.stop()  # stops even while a connection is being written to
    assert len(server.log) == 1


def test_drip_sends_a_byte_at_a_time(hostile) -> None:
    server = hostile("drip", interval_s=0.1)
    got = _raw(server.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", read_s=0.5)
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"Content-Length: 1000000000" in head and 1 <= len(body) <= 10


def test_interim_then_a_valid_stream(hostile) -> None:
    got = _raw(hostile("interim").url, _post())
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n")
    assert b"HTTP/1.1 200 OK" in got and b"data: [DONE]" in got


def test_read_then_drop_answers_nothing(hostile) -> None:
    server = hostile("read_then_drop")
    assert _raw(server.url, _post(rid="x1")) == b""
    assert [r.request_id for r in server.log] == ["x1"]


def test_bad_usage_wrong_shape_and_lying_usage(hostile) -> None:
    got = _raw(hostile("bad_usage", tokens=2).url, _post())
    assert b'"finish_reason": 7' in got and b'"completion_tokens": "8"' in got
    got = _raw(hostile("wrong_shape", chunks=[{"choices": ["x"]}]).url, _post())
    assert b'data: {"choices": ["x"]}' in got
    got = _raw(hostile("lying_usage", events=3, delay_s=0.0).url, _post())
    assert got.count(b'"delta"') == 3 and b'"completion_tokens": 1' in got


def test_it_serves_from_a_process_gevent_has_patched() -> None:
    """Real threads and real sockets: a greenlet hub is never shared across threads."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    code = ("from gevent import monkey; monkey.patch_all()\n"
            "from urllib.request import urlopen\n"
            "from hostile.hostile_server import hostile_server\n"
            "with hostile_server('normal') as s:\n"
            "    print(urlopen(s.url + '/health', timeout=5).status, len(s.log), len(s.errors))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["200", "1", "0"], out.stderr
