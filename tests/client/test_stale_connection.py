"""A server that announces keep-alive but closes after each answer (llama-server 0.3.36 does): the
kept-alive connection is dead when the next request takes it. That request never reached the server,
so the client sends it again on a new connection instead of recording a false `disconnect`."""

from __future__ import annotations

import gevent
import gevent.server
from client_helpers import fixed_requests, send_batch, sim_target

from llmload.client import Transport

STREAM = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
          b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
          b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
          b"data: [DONE]\n\n")


def _closing_server(served: list[int]) -> gevent.server.StreamServer:
    def handle(sock, _addr) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += sock.recv(65536)
        served.append(1)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(STREAM), STREAM))
        gevent.sleep(0.05)  # the next request arrives on this connection, then the server hangs up
        sock.close()  # keep-alive announced, connection closed anyway

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def test_dead_kept_alive_connection_is_not_a_disconnect() -> None:
    served: list[int] = []
    server = _closing_server(served)
    try:
        target = sim_target(f"http://127.0.0.1:{server.server_port}", "openai-chat", "vllm")
        transport = Transport.from_target(target, concurrency=1)
        records = send_batch(target, fixed_requests(), 6, transport=transport)
        transport.close()
    finally:
        server.stop()
    assert [r.outcome for r in records] == ["ok"] * 6, [r.error for r in records]
    assert len(served) == 6  # each request reached the server exactly once
    assert sum(r.retries for r in records) >= 1  # the record says which ones were sent again
    assert all(r.first_token_at >= r.sent_at for r in records)
