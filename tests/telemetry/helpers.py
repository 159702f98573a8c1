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
