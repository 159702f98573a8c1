"""A hostile HTTP server for tests: one misbehaviour per mode, and a log of every request it received.

Usage (tests/ is on sys.path, so import it as `hostile.hostile_server`)::

    from hostile.hostile_server import hostile_server

    with hostile_server("endless_line", every=2) as server:
        ...  # point llmload at server.url
    posts = server.requests(method="POST")        # ground truth: what the server really received

or the `hostile` pytest fixture (a factory; every server it started is stopped at the end), made
available to a test folder by importing it in that folder's conftest.py::

    from hostile.hostile_server import hostile  # noqa: F401  (a fixture: importing it makes it available)

    def test_x(hostile):  # in a test module of that folder
        server = hostile("drip", interval_s=0.5)

API (stable; other test folders build on it):
- `hostile_server(mode, **options)`: a context manager that starts a server on 127.0.0.1 on a free port
  and yields a `HostileServer`; `start_server(mode, **options)` is the same without the `with`
  (call `.stop()`).
- `HostileServer.url` ("http://127.0.0.1:PORT", no trailing slash), `.port`, `.options`,
  `.log` (a list of `Received`, appended as each request's body has been read, before the mode answers),
  `.requests(method=None, path=None)` (the log, filtered), `.stop()` (idempotent: closes every connection,
  waits for the connection threads).
- `Received`: `method`, `path` (with its query), `headers` (a dict, lower-case names), `body` (bytes),
  `at` (time.time() when the body was read), `connection` (the connection's id, from 1), `index`
  (the request's position in the whole log, from 0), `json()` (the body decoded, or None),
  `request_id` (the `X-Request-Id` header, or None).
- `mode` is a name from `MODES` or any callable `mode(handler, request)` (a `Handler` and a `Received`),
  so a test file can define its own behaviour without editing this module. A mode answers one request;
  after it returns the connection is kept for the next request unless it called `handler.close()` or
  `handler.drop()`, or sent a response without a length (`handler.stream_head()` ... `handler.end()`
  ends a chunked body and keeps the connection).
- `Handler` (one per connection): `send(bytes)`, `head(status, headers, *, reason=None)` (a status line and
  headers), `respond(status, body, content_type=...)` (a whole response with Content-Length),
  `stream_head(content_type=...)` (a chunked 200), `chunk(bytes)`, `end()` (the last chunk),
  `sse(obj)` (one `data: <json>` event as a chunk; bytes are sent as they are), `done()` (`data: [DONE]`
  then `end()`), `drop()` (close the socket now, no answer), `close()` (close after this request),
  `sleep(s)`, `stopping` (True once the server is stopping: an endless mode must check it),
  `server`, `options` (the server's options), `count(key)` (a server-wide counter, +1 per call, from 1).
  A mode that falls back to the usual answer calls `normal(handler, request)`.

Modes (their options, with defaults):
- `normal`: an OpenAI chat/completions SSE stream (`tokens`=8 events, `delay_s`=0.0 between them,
  `usage`=True: a final usage chunk with prompt_tokens 12 and completion_tokens = tokens), and plain GET
  answers: /v1/models, /health, /metrics, /api/tags, /api/ps, /api/version, /version, /server_info;
  404 for anything else. An Ollama POST (/api/chat, /api/generate) gets an NDJSON stream.
- `endless_line`: every `every`-th POST (default 1: all) answers 200 SSE and then one `data: xxxx...`
  line with no newline, written as fast as the socket takes it, until the client closes or the server
  stops; the other requests get `normal`.
- `drip`: a GET (or any request whose path starts with one of `paths`, default every GET) gets its
  headers at once and then one byte every `interval_s` (0.5) of an endless body (`length`: the
  Content-Length announced, default 10**9; `chunked`=False); the others get `normal`.
- `bad_usage`: a normal stream whose final usage chunk is `usage` (default string counts) and whose
  last token chunk carries `finish_reason` (default 7).
- `interim`: each answer is preceded by the interim responses in `interim` (default [100, 103]), each
  followed by a pause of `gap_s` (0.05 s) so the client reads it apart.
- `read_then_drop`: every POST's request is read, then the connection is closed with no answer
  (`every`: only every N-th POST, default 1); GETs get `normal`.
- `wrong_shape`: a 200 SSE stream of `chunks` (default `WRONG_SHAPES`, JSON values each sent as one
  `data:` event) then [DONE]; `ndjson`=True sends them as NDJSON lines instead (Ollama).
- `lying_usage`: `events` (16) token chunks `delay_s` (0.3) apart, then a usage chunk claiming
  `completion_tokens` (1) and `prompt_tokens` (12).

The server runs in real OS threads with real sockets, even in a process gevent has monkey-patched, so
a client that never yields cannot starve it: what the server logs is what it received.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = ["MODES", "WRONG_SHAPES", "Handler", "HostileServer", "Received", "hostile", "hostile_server",
           "normal", "start_server"]


def _original(module: str, name: str) -> Any:
    """The unpatched `module.name` (gevent's monkey-patching replaced it, or not)."""
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a dependency
        import importlib
        return getattr(importlib.import_module(module), name)
    return monkey.get_original(module, name)


_socket_mod = __import__("socket")
_Socket = _original("socket", "socket")
_start_thread = _original("_thread", "start_new_thread")
_allocate_lock = _original("_thread", "allocate_lock")
_sleep = _original("time", "sleep")
_time = _original("time", "time")
_monotonic = _original("time", "monotonic")

Mode = Callable[["Handler", "Received"], None]


@dataclass
class Received:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    connection: int
    index: int = -1

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class _Closed(Exception):
    """The peer closed the connection, or the server is stopping."""


class Handler:
    """One connection: what a mode uses to answer (see the module docstring)."""

    def __init__(self, server: HostileServer, sock: Any, connection: int) -> None:
        self.server = server
        self.options = server.options
        self.sock = sock
        self.connection = connection
        self._keep = True
        self._buf = b""

    # ---- the server's side
    @property
    def stopping(self) -> bool:
        return self.server._stopping

    def count(self, key: str) -> int:
        return self.server._count(key)

    def sleep(self, seconds: float) -> None:
        end = _monotonic() + seconds
        while not self.stopping:
            left = end - _monotonic()
            if left <= 0:
                return
            _sleep(min(left, 0.05))
        raise _Closed

    # ---- writing
    def send(self, data: bytes) -> None:
        if self.stopping:
            raise _Closed
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise _Closed from exc

    def head(self, status: int, headers: dict[str, str] | None = None, *, reason: str | None = None) -> None:
        reason = reason if reason is not None else _REASONS.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def respond(self, status: int, body: bytes | str = b"", *, content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.head(status, {"Content-Type": content_type, "Content-Length": str(len(data)), **(headers or {})})
        self.send(data)

    def stream_head(self, *, content_type: str = "text/event-stream", status: int = 200) -> None:
        self.head(status, {"Content-Type": content_type, "Transfer-Encoding": "chunked",
                           "Cache-Control": "no-cache"})

    def chunk(self, data: bytes) -> None:
        if data:  # an empty chunk would end the body
            self.send(b"%x\r\n%s\r\n" % (len(data), data))

    def end(self) -> None:
        self.send(b"0\r\n\r\n")

    def sse(self, obj: Any) -> None:
        payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.chunk(b"data: " + payload + b"\n\n")

    def done(self) -> None:
        self.chunk(b"data: [DONE]\n\n")
        self.end()

    def close(self) -> None:
        """Close the connection once this request is answered."""
        self._keep = False

    def drop(self) -> None:
        """Close the connection now, answering nothing."""
        self._keep = False
        with suppress(OSError):
            self.sock.shutdown(_socket_mod.SHUT_RDWR)
        raise _Closed

    # ---- reading
    def _read_request(self) -> Received | None:
        while b"\r\n\r\n" not in self._buf:
            data = self._recv()
            if not data:
                return None
            self._buf += data
        head, _, rest = self._buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, *_ = lines[0].split(" ") + ["", ""]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, rest = self._read_chunked(rest)
        else:
            length = int(headers.get("content-length", "0") or 0)
            while len(rest) < length:
                data = self._recv()
                if not data:
                    return None
                rest += data
            body, rest = rest[:length], rest[length:]
        self._buf = rest
        if headers.get("connection", "").lower() == "close":
            self._keep = False
        return Received(method, path, headers, body, _time(), self.connection)

    def _read_chunked(self, rest: bytes) -> tuple[bytes, bytes]:
        body = b""
        while True:
            while b"\r\n" not in rest:
                rest += self._recv_or_close()
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                rest += self._recv_or_close()
            body, rest = body + rest[:size], rest[size + 2:]
            if size == 0:
                return body, rest

    def _recv(self) -> bytes:
        if self.stopping:
            return b""
        try:
            return self.sock.recv(65536)
        except OSError:
            return b""

    def _recv_or_close(self) -> bytes:
        data = self._recv()
        if not data:
            raise _Closed
        return data


_REASONS = {100: "Continue", 103: "Early Hints", 200: "OK", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class HostileServer:
    """A running hostile server (see the module docstring)."""

    def __init__(self, mode: str | Mode, options: dict[str, Any]) -> None:
        self.mode: Mode = MODES[mode] if isinstance(mode, str) else mode
        self.options = options
        self.log: list[Received] = []
        self._stopping = False
        self._lock = _allocate_lock()
        self._counters: dict[str, int] = {}
        self._conns: dict[int, Any] = {}
        self._ids = itertools.count(1)
        self._threads = 0
        self.errors: list[BaseException] = []
        self._listener = _Socket(_socket_mod.AF_INET, _socket_mod.SOCK_STREAM)
        self._listener.setsockopt(_socket_mod.SOL_SOCKET, _socket_mod.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._spawn(self._accept_loop)

    def requests(self, *, method: str | None = None, path: str | None = None) -> list[Received]:
        """The log, only `method` (e.g. "POST") and paths starting with `path` when given."""
        return [r for r in list(self.log)
                if (method is None or r.method == method) and (path is None or r.path.startswith(path))]

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        with self._lock:
            conns = list(self._conns.values())
        for sock in conns:
            with suppress(OSError):
                sock.shutdown(_socket_mod.SHUT_RDWR)
        deadline = _monotonic() + timeout_s
        while self._threads and _monotonic() < deadline:
            _sleep(0.01)
        with suppress(OSError):
            self._listener.close()

    def _count(self, key: str) -> int:
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + 1
            return self._counters[key]

    def _spawn(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            self._threads += 1

        def run() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - kept for the test to see
                self.errors.append(exc)
            finally:
                with self._lock:
                    self._threads -= 1
        _start_thread(run, ())

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                fd, _addr = self._listener._accept()  # not accept(): that makes a gevent socket once patched
            except TimeoutError:
                continue
            except OSError:
                return
            sock = _Socket(_socket_mod.AF_INET, _socket_mod.SOCK_STREAM, fileno=fd)
            sock.settimeout(None)  # blocking: `stop()` shuts the socket down, which wakes a blocked read or write
            conn = next(self._ids)
            with self._lock:
                self._conns[conn] = sock
            self._spawn(self._serve, sock, conn)

    def _serve(self, sock: Any, conn: int) -> None:
        handler = Handler(self, sock, conn)
        try:
            while handler._keep and not self._stopping:
                request = handler._read_request()
                if request is None:
                    break
                with self._lock:
                    request.index = len(self.log)
                    self.log.append(request)
                try:
                    self.mode(handler, request)
                except _Closed:
                    break
        finally:
            with self._lock:
                self._conns.pop(conn, None)
            with suppress(OSError):
                sock.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"HostileServer({self.url}, {len(self.log)} requests)"


def start_server(mode: str | Mode, **options: Any) -> HostileServer:
    """Start a hostile server (stop it with `.stop()`)."""
    return HostileServer(mode, options)


@contextmanager
def hostile_server(mode: str | Mode, **options: Any) -> Iterator[HostileServer]:
    """Start a hostile server for the `with` block; it is stopped at the end."""
    server = start_server(mode, **options)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    """A factory: `hostile(mode, **options)` starts a server; all are stopped at the end of the test."""
    started: list[HostileServer] = []

    def factory(mode: str | Mode, **options: Any) -> HostileServer:
        server = start_server(mode, **options)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


# ------------------------------------------------------------------ modes

def _model(request: Received) -> str:
    body = request.json()
    return body.get("model", "hostile-model") if isinstance(body, dict) else "hostile-model"


def _get_answer(handler: Handler, request: Received) -> None:
    path = request.path.split("?")[0].rstrip("/")
    if path == "/v1/models":
        handler.respond(200, json.dumps({"object": "list", "data": [  # and the model the tests' configs name
            {"id": "hostile-model", "object": "model", "owned_by": "hostile"}, {"id": "sim-model", "object": "model"}]}))
    elif path in ("/health", "/healthz", "/ping", ""):
        handler.respond(200, b"{}")
    elif path == "/metrics":
        handler.respond(200, b"# TYPE up gauge\nup 1\n", content_type="text/plain; version=0.0.4")
    elif path == "/api/tags":
        handler.respond(200, json.dumps({"models": [{"name": "hostile-model", "model": "hostile-model"},
                                                    {"name": "sim-model", "model": "sim-model"}]}))
    elif path == "/api/ps":
        handler.respond(200, json.dumps({"models": []}))
    elif path in ("/api/version", "/version"):
        handler.respond(200, json.dumps({"version": "0.0.0-hostile"}))
    elif path in ("/server_info", "/get_server_info", "/get_model_info"):
        handler.respond(200, json.dumps({"model_path": "hostile-model"}))
    else:
        handler.respond(404, json.dumps({"error": "not found"}))


def _token_chunk(request: Received, i: int, *, finish_reason: Any = None) -> dict[str, Any]:
    """One OpenAI streamed chunk: chat (`delta`) or completions (`text`)."""
    if request.path.rstrip("/").endswith("/chat/completions"):
        choice: dict[str, Any] = {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": finish_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": f" t{i}", "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": "cmpl-hostile", "object": obj, "created": 0, "model": _model(request), "choices": [choice]}


def _ollama(handler: Handler, request: Received, tokens: int, delay_s: float) -> None:
    chat = request.path.rstrip("/").endswith("/chat")
    handler.stream_head(content_type="application/x-ndjson")
    for i in range(tokens):
        piece = {"message": {"role": "assistant", "content": f" t{i}"}} if chat else {"response": f" t{i}"}
        handler.chunk(json.dumps({"model": _model(request), "done": False, **piece}).encode() + b"\n")
        if delay_s:
            handler.sleep(delay_s)
    last = {"model": _model(request), "done": True, "done_reason": "stop", "prompt_eval_count": 12,
            "eval_count": tokens}
    handler.chunk(json.dumps(last).encode() + b"\n")
    handler.end()


def normal(handler: Handler, request: Received, *, tokens: int | None = None, delay_s: float | None = None,
           usage: Any = True, finish_reason: Any = "stop") -> None:
    """The well-behaved answer (see `normal` in the module docstring); other modes fall back to it."""
    opts = handler.options
    tokens = opts.get("tokens", 8) if tokens is None else tokens
    delay_s = opts.get("delay_s", 0.0) if delay_s is None else delay_s
    if request.method != "POST":
        _get_answer(handler, request)
        return
    if request.path.startswith("/api/"):
        _ollama(handler, request, tokens, delay_s)
        return
    handler.stream_head()
    for i in range(tokens):
        handler.sse(_token_chunk(request, i, finish_reason=finish_reason if i == tokens - 1 else None))
        if delay_s:
            handler.sleep(delay_s)
    if usage is True:
        usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}
    if usage is not None and usage is not False:
        handler.sse({"id": "cmpl-hostile", "object": "chat.completion.chunk", "created": 0,
                     "model": _model(request), "choices": [], "usage": usage})
    handler.done()


def _normal_mode(handler: Handler, request: Received) -> None:
    normal(handler, request)


def _endless_line(handler: Handler, request: Received) -> None:
    every = handler.options.get("every", 1)
    if request.method != "POST" or handler.count("endless_line") % every:
        normal(handler, request)
        return
    handler.stream_head()
    block = b"x" * 65536
    handler.send(b"%x\r\ndata: " % (1 << 40))  # one huge chunk announced: the line never ends
    while True:
        handler.send(block)


def _drip(handler: Handler, request: Received) -> None:
    paths = handler.options.get("paths")
    hit = (request.method == "GET") if paths is None else any(request.path.startswith(p) for p in paths)
    if not hit:
        normal(handler, request)
        return
    interval_s = handler.options.get("interval_s", 0.5)
    if handler.options.get("chunked", False):
        handler.stream_head(content_type="application/json")
        while True:
            handler.chunk(b" ")
            handler.sleep(interval_s)
    handler.head(200, {"Content-Type": "application/json",
                       "Content-Length": str(handler.options.get("length", 10**9))})
    while True:
        handler.send(b" ")
        handler.sleep(interval_s)


def _bad_usage(handler: Handler, request: Received) -> None:
    usage = handler.options.get("usage", {"prompt_tokens": "12", "completion_tokens": "8", "total_tokens": "20"})
    normal(handler, request, usage=usage, finish_reason=handler.options.get("finish_reason", 7))


def _interim(handler: Handler, request: Received) -> None:
    for status in handler.options.get("interim", [100, 103]):
        headers = {"Link": "</style.css>; rel=preload; as=style"} if status == 103 else {}
        handler.head(status, headers)
        handler.sleep(handler.options.get("gap_s", 0.05))  # each in its own read, as a real server's would be
    normal(handler, request)


def _read_then_drop(handler: Handler, request: Received) -> None:
    every = handler.options.get("every", 1)
    if request.method != "POST" or handler.count("read_then_drop") % every:
        normal(handler, request)
        return
    handler.drop()


#: JSON values a streamed chunk should never be: each is the server's malformed output
WRONG_SHAPES: list[Any] = [
    {"choices": ["x"]},
    {"choices": [{"delta": "str"}]},
    {"choices": "x"},
    {"choices": [{"delta": {"content": 7}}]},
    {"choices": [{"text": ["a"]}]},
    {"choices": [], "usage": {"prompt_tokens": "12", "completion_tokens": "3"}},
    {"choices": [{"delta": {"content": "a"}}], "usage": "many"},
    [1, 2, 3],
    "just a string",
    7,
    None,
]


def _wrong_shape(handler: Handler, request: Received) -> None:
    chunks = handler.options.get("chunks", WRONG_SHAPES)
    if request.method != "POST":
        normal(handler, request)
        return
    if handler.options.get("ndjson", False):
        handler.stream_head(content_type="application/x-ndjson")
        for obj in chunks:
            handler.chunk((obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n")
        handler.end()
        return
    handler.stream_head()
    for obj in chunks:
        handler.sse(obj)
    handler.done()


def _lying_usage(handler: Handler, request: Received) -> None:
    opts = handler.options
    usage = {"prompt_tokens": opts.get("prompt_tokens", 12), "completion_tokens": opts.get("completion_tokens", 1)}
    normal(handler, request, tokens=opts.get("events", 16), delay_s=opts.get("delay_s", 0.3), usage=usage)


MODES: dict[str, Mode] = {
    "normal": _normal_mode,
    "endless_line": _endless_line,
    "drip": _drip,
    "bad_usage": _bad_usage,
    "interim": _interim,
    "read_then_drop": _read_then_drop,
    "wrong_shape": _wrong_shape,
    "lying_usage": _lying_usage,
}

