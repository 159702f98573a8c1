"""Telemetry test helpers: a loopback HTTP server with canned answers that a test can change mid-run,
and a minimal Config builder."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llmload.config import Config, parse_config


class CannedServer:
    """`routes[path] = (status, body, delay_s)`; `requests` counts hits per path; `stop()` closes it."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes | str, float]] = {}
        self.requests: dict[str, int] = {}
        self.headers_seen: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                path = self.path.split("?")[0]
                server.requests[path] = server.requests.get(path, 0) + 1
                server.headers_seen.append(dict(self.headers))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body, delay = server.routes.get(path, (404, b"not found", 0.0))
                if delay:
                    time.sleep(delay)
                data = body.encode() if isinstance(body, str) else body
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def config_for(url: str | list[str], **sections) -> Config:
    """A minimal valid Config pointing at `url` (sections override, e.g. telemetry={...})."""
    target = {"urls": url} if isinstance(url, list) else {"url": url}
    data = {"target": {**target, **sections.pop("target", {})},
            "shape": {"ladder": {"steps": [{"rate": 1, "duration": "10s"}]}}}
    data.update(sections)
    return parse_config(data)


def send_burst(url: str, n: int, *, path: str = "/v1/completions", body: dict | None = None,
               timeout_s: float = 20.0) -> list[int]:
    """Send `n` requests at once from `n` threads (non-streaming) and return their HTTP statuses."""
    import json
    from urllib.error import HTTPError
    from urllib.request import Request, urlopen

    payload = json.dumps(body or {"model": "sim-model", "prompt": "hello there", "max_tokens": 16,
                                  "ignore_eos": True, "stream": False}).encode()
    statuses: list[int] = [0] * n

    def one(i: int) -> None:
        request = Request(url + path, data=payload, headers={"Content-Type": "application/json",
                                                              "X-Request-Id": f"burst-{i}"})
        try:
            with urlopen(request, timeout=timeout_s) as resp:
                resp.read()
                statuses[i] = resp.status
        except HTTPError as exc:
            statuses[i] = exc.code
            exc.close()
        except OSError:
            statuses[i] = -1

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return statuses
