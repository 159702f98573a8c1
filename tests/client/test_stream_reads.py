"""The stream is read a socket read at a time (`StreamResponse.read_some`): an event is stamped when the
bytes that complete it were read, so events that one read brought share its time, and an event split
over two writes is stamped at the second; the idle timeout restarts only when a line ends; a TLS
stream (whose decrypted bytes the descriptor may not show) is read to its end."""

from __future__ import annotations

import json
import shutil
import subprocess

import gevent
import gevent.server
import gevent.socket
import gevent.ssl
import pytest
from client_helpers import fixed_requests, send_batch, sim_target

from llmload.client.transport import SocketTiming, StreamResponse
from llmload.clock import now

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def event(text: str | None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode()


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def writing_server(writes: list[tuple[float, bytes]]):
    """Answers each request with `HEAD`, then each (pause, bytes) of `writes` as one HTTP chunk in one
    `sendall`, noting the time just before each write (`server.written`), then ends the body."""
    def handle(sock, _addr):
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        sock.sendall(HEAD)
        server.written = []
        for pause, payload in writes:
            gevent.sleep(pause)
            server.written.append(now())
            sock.sendall(http_chunk(payload))
        sock.sendall(b"0\r\n\r\n")
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def send_one(server, **target_kw):
    target = sim_target(f"http://127.0.0.1:{server.server_port}", "openai-chat", None, **target_kw)
    (rec,) = send_batch(target, fixed_requests(10, 4), 1)
    return rec


def test_events_of_one_read_share_its_time_and_a_split_event_is_stamped_at_its_end() -> None:
    server = writing_server([
        (0.0, event("a") + b"\n\n" + event(" b") + b"\n\n"),  # two events, one write: one read
        (0.05, event(" c") + b"\n"),  # the data line ...
        (0.1, b"\n"),  # ... and, 0.1 s later, the blank line that completes the event
        (0.05, event(None, "stop") + b"\n\ndata: [DONE]\n\n"),
    ])
    try:
        rec = send_one(server)
    finally:
        server.stop()
    assert rec.outcome == "ok", rec.error
    both, data_line, blank, final = server.written
    first, second, third = rec.token_times
    assert first == second == rec.first_token_at  # the read time of the bytes that brought both
    assert both <= first < data_line
    assert third >= blank  # not when its data line arrived, 0.1 s earlier
    assert rec.last_token_at == third and rec.closed_at >= final


def test_bytes_without_a_line_end_do_not_restart_the_idle_timeout() -> None:
    # a line trickled in 5 pieces 0.15 s apart: 0.6 s without a complete line, idle timeout 0.35 s
    line = event("slow") + b"\n\n"
    pieces = [line[i:i + len(line) // 5 + 1] for i in range(0, len(line), len(line) // 5 + 1)]
    server = writing_server([(0.0, event("a") + b"\n\n")] + [(0.15, p) for p in pieces])
    try:
        rec = send_one(server, idle_timeout=0.35)
    finally:
        server.stop()
    assert rec.outcome == "timeout" and rec.error.startswith("idle timeout"), rec.error
    assert len(rec.token_times) == 1


class _Pool:
    """What a pooled response needs of its pool when released."""

    def __init__(self) -> None:
        self.returned = self.released = 0

    def return_socket(self, sock) -> None:
        self.returned += 1

    def release_socket(self, sock) -> None:
        self.released += 1
        sock.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a test certificate")
def test_a_tls_stream_is_read_to_its_end(tmp_path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    big = b"data: " + b"x" * 20000 + b"\n\n"  # over one TLS record (16 KiB) and several reads of 4 KiB
    body = [big, b"data: 1\n\n" * 3, b"data: [DONE]\n\n"]

    def handle(sock, _addr):
        sock.recv(65536)
        sock.sendall(HEAD + http_chunk(body[0]) + http_chunk(body[1]))
        gevent.sleep(0.05)
        sock.sendall(http_chunk(body[2]) + b"0\r\n\r\n")
        gevent.sleep(0.5)
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle, keyfile=str(key), certfile=str(cert))
    server.start()
    try:
        context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, gevent.ssl.CERT_NONE
        sock = context.wrap_socket(gevent.socket.create_connection(("127.0.0.1", server.server_port)))
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        pool = _Pool()
        resp = StreamResponse(sock, pool, SocketTiming())
        reads = []
        with gevent.Timeout(5):
            while data := resp.read_some():
                reads.append(data)
        assert b"".join(reads) == b"".join(body) and len(reads) >= 2
        assert resp.message_complete and pool.returned == 1  # the body ended: back to the pool
        assert resp.read_some() == b""
    finally:
        server.stop()
