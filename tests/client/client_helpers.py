"""Shared helpers for the client tests: targets for a sim, sending a batch under gevent, and a small
real HTTP server that streams exactly the bytes a test gives it."""

from __future__ import annotations

import gevent.pool
import gevent.server

from llmload.client import RequestMix, Transport, send
from llmload.clock import now
from llmload.config import Requests, Target
from llmload.records import Record


def sim_target(url: str, api: str, server: str | None, **kw) -> Target:
    return Target(url=url, api=api, model="sim-model", server=server, **kw)


def fixed_requests(input_tokens: int = 24, output_tokens: int = 8, **kw) -> Requests:
    return Requests(input_tokens={"dist": "fixed", "value": input_tokens},
                    output_tokens={"dist": "fixed", "value": output_tokens}, **kw)


def send_batch(target: Target, requests: Requests, n: int, *, concurrency: int = 1, prefix: str = "r",
               transport: Transport | None = None) -> list[Record]:
    """Send `n` requests from the mix, at most `concurrency` at once; the records in request order."""
    tr = transport or Transport.from_target(target, concurrency=concurrency)
    mix = RequestMix(requests, target)
    records = [Record(request_id=f"{prefix}-{i}", step="s0", worker="w0", scheduled_at=now()) for i in range(n)]

    def one(i: int) -> None:
        send(tr, mix.build(records[i].request_id, i, seed=7), records[i])

    pool = gevent.pool.Pool(concurrency)
    try:
        for i in range(n):
            pool.spawn(one, i)
        pool.join(raise_error=True)
    finally:
        if transport is None:
            tr.close()
    return records


def serve(events: list[bytes], *, clean_end: bool, sep: bytes = b"\r\n\r\n",
          content_type: bytes = b"text/event-stream", delay_s: float = 0.01):
    """A chunked 200 server that writes `events` (each followed by `sep`, one HTTP chunk each) then ends
    the body or drops the connection. `events` may be replaced between requests (`server.events`)."""
    def handle(sock, _addr):
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += sock.recv(65536)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % content_type)
        for event in server.events:
            payload = event + sep
            if payload:  # an empty chunk would end the body
                sock.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
            gevent.sleep(delay_s)
        if clean_end:
            sock.sendall(b"0\r\n\r\n")
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.events = events
    server.start()
    return server
