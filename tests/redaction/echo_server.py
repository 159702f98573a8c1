"""A misbehaving OpenAI-compatible server for secret tests: it echoes the Authorization header it gets
(whole, and the bare key after `Bearer `) in its model list, in `/metrics` labels, in a response header,
in its version, and in every streamed answer's model name and finish reason.

`EchoServer()` binds a free 127.0.0.1 port in a thread of the test process; `close()` stops it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["EchoServer"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        auth = self.headers.get("Authorization", "")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo-Authorization", auth)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        auth = self.headers.get("Authorization", "")
        bare = auth.partition(" ")[2]
        if self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": bare, "object": "model", "owned_by": auth},
                                               {"id": auth, "object": "model"}, {"id": "my-model"}]}
            self._send(200, json.dumps(body).encode(), "application/json")
        elif self.path == "/metrics":
            text = (f'# TYPE vllm:num_requests_running gauge\n'
                    f'vllm:num_requests_running{{model_name="{auth}"}} 0\n'
                    f'# TYPE vllm:num_requests_waiting gauge\n'
                    f'vllm:num_requests_waiting{{model_name="{auth}"}} 0\n'
                    f'# TYPE vllm:kv_cache_usage_perc gauge\n'
                    f'vllm:kv_cache_usage_perc{{model_name="{bare}",engine="{auth}"}} 0.1\n')
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        elif self.path in ("/health", "/version"):
            self._send(200, json.dumps({"version": auth}).encode(), "application/json")
        else:
            self._send(404, json.dumps({"error": f"not found; you sent {auth}"}).encode(), "application/json")

    def do_POST(self) -> None:  # noqa: N802
        auth = self.headers.get("Authorization", "")
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            self._send(404, json.dumps({"error": f"no {self.path} for {auth}"}).encode(), "application/json")
            return
        bare = auth.partition(" ")[2]
        chunks = []
        for i, word in enumerate(["one", " two", " three", f" {bare}"]):
            chunks.append({"id": "x", "object": "chat.completion.chunk", "model": auth,
                           "choices": [{"index": 0, "delta": {"content": word},
                                        "finish_reason": bare if i == 3 else None}]})
        chunks.append({"id": "x", "object": "chat.completion.chunk", "model": auth, "choices": [],
                       "usage": {"prompt_tokens": 16, "completion_tokens": 4, "total_tokens": 20}})
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(200, body.encode(), "text/event-stream")


class EchoServer:
    """The echoing server on a free loopback port, served from a daemon thread."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
