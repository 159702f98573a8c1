"""The key stays with the target (issue 33 items 13 and 17), proved by what a second server received.

- 13: a 302 from the target's `/v1/models` (pre-flight) or `/metrics` (telemetry) to another origin
  (127.0.0.2, a second loopback server) is followed without `Authorization` or any secret header;
  a redirect inside the target's origin keeps them.
- 17: a target URL with `user:password@` works in the pre-flight as in telemetry and the load (Basic
  auth, the URL without them), and a failing pre-flight never echoes them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmload.config import parse_config

KEY = "sk-probe-secret-0123456789"


class LoggingServer(ThreadingHTTPServer):
    """Answers every GET: a redirect where `redirects` says (path -> URL), else 200 JSON (a POST: 404);
    logs each request's path and headers."""

    daemon_threads = True

    def __init__(self, host: str) -> None:
        self.log: list[tuple[str, dict[str, str]]] = []
        self.redirects: dict[str, str] = {}
        super().__init__((host, 0), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: LoggingServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.log.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        target = self.server.redirects.get(self.path)
        if target:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"data": [{"id": "m"}]}' if self.path.startswith("/v1/models") else b"vllm:num_requests_running 1\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (a run's requests: logged, then refused)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.log.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(host: str) -> Iterator[LoggingServer]:
    server = LoggingServer(host)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def two_origins() -> Iterator[tuple[LoggingServer, LoggingServer]]:
    try:
        with serving("127.0.0.1") as home, serving("127.0.0.2") as away:
            yield home, away
    except OSError as exc:  # pragma: no cover (a machine without the whole 127/8 on loopback)
        pytest.skip(f"cannot listen on 127.0.0.2: {exc}")


def config_for(url: str, **target: object):
    return parse_config({"target": {"url": url, "model": "m", **target},
                         "shape": {"ladder": {"steps": [{"rate": 1, "duration": 1}]}}})


def secret_headers(log: list[tuple[str, dict[str, str]]]) -> list[str]:
    return [name for _, headers in log for name in headers if name in ("authorization", "x-api-key")]


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_a_redirect_to_another_origin_gets_no_credentials(two_origins, monkeypatch, path):
    from llmload.runtime.master.preflight import check_reachable
    from llmload.telemetry.credentials import request_headers
    from llmload.telemetry.http import fetch_text

    home, away = two_origins
    home.redirects[path] = away.url + path
    monkeypatch.setenv("LLMLOAD_PROBE_KEY", KEY)
    config = config_for(home.url, api_key_env="LLMLOAD_PROBE_KEY", headers={"X-Api-Key": "header-secret-42"})
    if path == "/v1/models":
        check_reachable(config, timeout_s=5)
    else:
        fetch_text(home.url + path, timeout_s=5, headers=request_headers(config))
    assert home.log[0][1]["authorization"] == f"Bearer {KEY}"  # the target itself got the key
    assert [p for p, _ in away.log] == [path]  # the redirect was followed ...
    assert secret_headers(away.log) == []  # ... without the key or the secret header


def test_a_redirect_inside_the_origin_keeps_the_credentials(two_origins, monkeypatch):
    from llmload.telemetry.credentials import request_headers
    from llmload.telemetry.http import fetch_text

    home, _ = two_origins
    home.redirects["/metrics"] = home.url + "/metrics/"
    monkeypatch.setenv("LLMLOAD_PROBE_KEY", KEY)
    fetch_text(home.url + "/metrics", timeout_s=5, headers=request_headers(config_for(
        home.url, api_key_env="LLMLOAD_PROBE_KEY")))
    assert [(p, h.get("authorization")) for p, h in home.log] == [("/metrics", f"Bearer {KEY}"),
                                                                  ("/metrics/", f"Bearer {KEY}")]


def test_user_and_password_in_the_target_url(two_origins):
    from llmload.client.auth import Credentials
    from llmload.runtime.master.preflight import PreflightFailed, check_reachable

    home, _ = two_origins
    url = home.url.replace("http://", "http://admin:hunter2-pw@")
    found = check_reachable(config_for(url), timeout_s=5)
    assert found == {home.url: {"status": 200, "models": ["m"], "ignores_model": False}}
    basic = "Basic YWRtaW46aHVudGVyMi1wdw=="  # admin:hunter2-pw
    assert home.log[0][1]["authorization"] == basic
    assert Credentials.from_target(config_for(url).target).headers()["Authorization"] == basic  # the load's
    with pytest.raises(PreflightFailed) as info:
        check_reachable(config_for("http://admin:hunter2-pw@127.0.0.1:9"), timeout_s=5)
    assert "admin" not in str(info.value) and "hunter2" not in str(info.value)
