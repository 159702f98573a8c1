"""A lean HTTP/1.1 server on asyncio protocols: keep-alive, Content-Length bodies, chunked streaming.

Why not aiohttp: the sim must not distort timing, so every stream event is one `transport.write` (body
bytes wrapped in one chunk frame), sockets get `TCP_NODELAY`, and the engine loop can write to many
streams in a tight loop without a task switch per token. Requests on one connection are served in order;
a peer that closes mid-response is seen at once (`Connection.closed`).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast
from urllib.parse import urlsplit

__all__ = ["Connection", "Request", "start_http_server"]

_MAX_HEAD = 64 * 1024


@dataclass(slots=True)
class Request:
    """One parsed request. Header names are lower-case."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        """The body as JSON (ValueError if it is not)."""
        return json.loads(self.body or b"null")


Handler = Callable[[Request, "Connection"], Awaitable[None]]


class Connection(asyncio.Protocol):
    """One client connection: parses requests, runs the handler for each in turn, writes responses."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._buffer = bytearray()
        self._queue: asyncio.Queue[Request | None] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.on_close: list[Callable[[], None]] = []
        self._keep_alive = True
        self._continued = False
        self._head_only = False

    # ------------------------------------------------------------ protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's connection is one
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    self.abort()
                return
            head = bytes(self._buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                self.abort()
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if len(self._buffer) < end + 4 + length:
                if headers.get("expect", "").lower() == "100-continue" and not self._continued:
                    self._continued = True  # curl waits a second for this before a large body
                    self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            self._continued = False
            body = bytes(self._buffer[end + 4:end + 4 + length])
            del self._buffer[:end + 4 + length]
            parts = urlsplit(target)
            self._queue.put_nowait(Request(method.upper(), parts.path, parts.query, headers, body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._queue.put_nowait(None)
        for callback in self.on_close:
            callback()
        self.on_close.clear()

    async def _serve(self) -> None:
        while True:
            request = await self._queue.get()
            if request is None or self.closed:
                return
            self._keep_alive = request.headers.get("connection", "").lower() != "close"
            self._head_only = request.method == "HEAD"
            try:
                await self._handler(request, self)
            except Exception as exc:  # a bug must not kill the server: answer 500 and log it
                import traceback

                traceback.print_exc()
                if not self.closed:
                    self.send(500, {"error": f"internal sim error: {exc}"})
            if not self._keep_alive:
                self.close()
                return

    # ------------------------------------------------------------ responses
    def _head(self, status: int, content_type: str, extra: dict[str, str] | None, length: int | None) -> bytes:
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Status"
        lines = [f"HTTP/1.1 {status} {reason}", f"content-type: {content_type}"]
        lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
        for name, value in (extra or {}).items():
            lines.append(f"{name}: {value}")
        if not self._keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _write(self, data: bytes) -> None:
        """One transport write (a request is read, so answered, only once the connection is made)."""
        if self.transport is not None:
            self.transport.write(data)

    def send(self, status: int, body: object, *, content_type: str = "application/json",
             headers: dict[str, str] | None = None) -> None:
        """A whole response: `body` is bytes, str, or JSON-able."""
        if self.closed:
            return
        if isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body, separators=(",", ":")).encode()
        head = self._head(status, content_type, headers, len(data))
        self._write(head if self._head_only else head + data)

    def start_stream(self, status: int, content_type: str, headers: dict[str, str] | None = None) -> None:
        """Headers of a chunked response."""
        if not self.closed:
            self._write(self._head(status, content_type, headers, None))

    def write_event(self, data: bytes) -> None:
        """One stream event as one chunk, in one transport write."""
        if not self.closed:
            self._write(b"%x\r\n%b\r\n" % (len(data), data))

    @staticmethod
    def frame(data: bytes) -> bytes:
        """An event framed as one chunk, ready for `write_framed` (frame early, write late)."""
        return b"%x\r\n%b\r\n" % (len(data), data)

    def write_framed(self, chunk: bytes) -> None:
        if not self.closed:
            self._write(chunk)

    def end_stream(self) -> None:
        if not self.closed:
            self._write(b"0\r\n\r\n")

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (no FIN handshake niceties): a mid-stream disconnect."""
        if self.transport is not None and not self.closed:
            self.transport.abort()


async def start_http_server(handler: Handler, host: str, port: int, *, reuse_port: bool = False) -> asyncio.Server:
    """Listen on host:port (0 = a free port) and serve `handler`; `reuse_port` shares the port with other
    processes that set it too (SO_REUSEPORT: the kernel spreads new connections over them)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Connection(handler), host, port, reuse_address=True,
                                    reuse_port=reuse_port or None, backlog=4096)
