"""HTTP transport for streaming requests under gevent, and routing over several endpoints.

Built on geventhttpclient's public pieces, the ones Locust's FastHttpUser builds on: a `ConnectionPool`
(`SSLConnectionPool` for https) subclass per base URL, sized to the concurrency so no request waits for
a connection inside the client, and `HTTPSocketPoolResponse` (its parser: status, headers, chunked
transfer-encoding, keep-alive). The body is read by `StreamResponse.read_some()`: whatever one socket
read brings, as soon as it arrives, which is what makes per-event timestamps true (`iter_content` /
`iter_lines` wait for the whole body; `readline()` would cost two calls and two copies per SSE event).
On a plain socket it waits for readability first and then reads once (a `recv` that would block, then
the wait, costs a failed syscall and an exception per event); that wait, a switch to the gevent hub,
happens before every read, also when bytes are already waiting (a TLS socket yields with
`gevent.sleep(0)`), so a server writing as fast as the socket takes cannot keep the loop from running
timers and signal handlers. Interim responses (`100 Continue`, `103 Early Hints`) before the final
response are skipped. The request head is written here
(`Endpoint.post`), so the moment between getting a connected socket and writing the bytes is ours to
stamp. The pool subclass uses only the pool's public methods and its documented `after_connect` hook;
`read_some` uses the response's `feed`, `message_complete` and the body buffer its parser callback
fills; `tests/client/test_transport.py` checks that contract against the installed geventhttpclient
(pinned in pyproject.toml).

Timeouts:
- `connect_timeout_s`: TCP connect;
- `idle_timeout_s`: the longest silence allowed between stream lines, and between writing the request
  and its headers, as one libev timer per request (`IdleTimer`, restarted by the core after each read
  that ends a line; a socket timeout would make a `gevent.Timeout` on every wait for bytes, 4-6 us per
  event) — a stalled stream ends as `timeout` (`TimeoutError`, which a socket's own timeout raises too);
- `total_timeout_s`: the whole request, enforced by the streaming core with `gevent.Timeout`.
Sockets get TCP_NODELAY. What happened while getting the socket travels with the request in a
`SocketTiming` (the caller's, filled as it goes, so a failure half way still says where it got to; the
response carries it as `resp.timing`): `ready_at` when a connected socket was handed over, right
before the request bytes are written (METRICS.md `sent_at`), `reused`, `pool_wait_s` and `stage`.
A connect failure (TLS handshake included) is raised as `ConnectFailed` so the core can tell it from a
read failure (`connect_error` vs `disconnect` / `timeout`). A request waiting for a free pooled
connection waits before its `sent_at`. A kept-alive socket that is readable while idle (the server
closed it) is dropped before anything is written, and a write that fails before its first byte went
out raises `NotSent`: the core may send such a request again; `SocketTiming.written` says how much of
a request was written.
"""

from __future__ import annotations

import errno
import random
import re
import select
import socket
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import gevent.lock
import gevent.socket
import gevent.ssl
from gevent import monkey
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse

from llmload.client.auth import Credentials
from llmload.clock import now
from llmload.config import Target

__all__ = ["ConnectFailed", "Endpoint", "EndpointRouter", "IdleTimer", "NotSent", "SocketTiming", "StreamResponse",
           "Transport"]

ROUTING_POLICIES = ("round_robin", "least_outstanding", "random")
#: bytes asked of the socket per read (geventhttpclient's default)
BLOCK_SIZE = 4096
_USER_AGENT = "llmload"
#: a header name (RFC 9110 token) and a value without control characters (no header injection)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")
_TLS_SOCKETS = (ssl.SSLSocket, gevent.ssl.SSLSocket)


class ConnectFailed(OSError):
    """The TCP connection to the target could not be made (refused, unreachable, connect timeout)."""


class NotSent(ConnectionError):
    """The request's connection failed before any byte of the request was written on it (a kept-alive
    connection the server had already closed): sending it again cannot make a duplicate."""


#: `select.poll`, unpatched (gevent's patching removes it): a zero-timeout look at an idle pooled socket
_poll = monkey.get_original("select", "poll")


#: how long after a kept-alive connection was handed back a request on it first waits for the server's
#: close: a server that ends the connection after a response (llama-server does after a stream while
#: announcing keep-alive) sends its FIN right behind the last byte, so it is at most this far behind
#: even across a network; without the wait a request sent at once races it (seen: 1 in 4 lost)
CLOSE_GRACE_S = 0.002


def _closed_by_peer(sock: socket.socket, wait_s: float = 0.0) -> bool:
    """An idle kept-alive socket that is readable was closed by the server (or holds bytes nobody asked
    for): it cannot carry a request (urllib3's `is_connection_dropped` rule). `wait_s`: wait that long
    (cooperatively) for it to become readable."""
    poller = _poll()
    poller.register(sock.fileno(), select.POLLIN)
    if poller.poll(0):
        return True
    if wait_s <= 0:
        return False
    try:
        gevent.socket.wait_read(sock.fileno(), timeout=wait_s)
    except (TimeoutError, OSError):
        return False
    return True


class SocketTiming:
    """What getting a connection took, for one request (one per attempt: `reset()` between).

    `stage`: "pool" (waiting for a free connection of our own pool: it is exhausted), "connect"
    (connecting), "ready" (handed out), None (not asked yet). `ready_at`: when the connected socket was
    handed out, the moment just before the request bytes are written (METRICS.md `sent_at`: a new
    connection's connect time is not in it). `reused`: the socket was a kept-alive one. `pool_wait_s`:
    time spent waiting for a free connection of our own pool, the generator's time, never the server's.
    `status`: the response's status code once its headers were read whole, also when the body's framing
    broke in the same read (the response object is then never handed out).
    """

    __slots__ = ("stage", "ready_at", "reused", "pool_since", "_pool_wait_s", "written", "status")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.stage: str | None = None
        self.ready_at: float | None = None
        self.reused = False
        self.pool_since = 0.0
        self._pool_wait_s = 0.0
        #: bytes of the request written on the socket so far
        self.written = 0
        self.status: int | None = None

    @property
    def pool_wait_s(self) -> float:
        """Time waited for a free pooled connection (still waiting: so far)."""
        return now() - self.pool_since if self.stage == "pool" else self._pool_wait_s


class IdleTimer:
    """One request's idle timeout: a libev timer that throws `TimeoutError` into the greenlet that
    made it unless `touch()`ed within `seconds` (made and touched by that greenlet; `close()` at the end).
    It throws once: firing stops it (a greenlet that went on without `close()` is not thrown at again
    every `seconds`; a later `touch()` restarts it)."""

    __slots__ = ("seconds", "_timer", "_throw", "_fire_cb", "_exc")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timer = gevent.get_hub().loop.timer(seconds, seconds)
        self._throw = gevent.getcurrent().throw
        self._fire_cb = self._fire
        self._exc = TimeoutError("timed out")

    def _fire(self) -> None:
        self._timer.stop()
        self._throw(self._exc)

    def touch(self) -> None:
        """(Re)start: the next `seconds` may pass in silence."""
        self._timer.again(self._fire_cb)

    def close(self) -> None:
        self._timer.stop()
        self._timer.close()


if TYPE_CHECKING:  # the mixin's methods call the pool's own (it is only ever mixed into one)
    _PoolBase = ConnectionPool
else:
    _PoolBase = object


class _Timed(_PoolBase):
    """Mixin over geventhttpclient's pool: `get_socket(timing)` notes the stages in `timing`, new
    sockets get TCP_NODELAY (`after_connect`, the pool's documented hook), and a connect failure is
    raised as `ConnectFailed`. Our own gate (a semaphore of the pool's size, held from `get_socket` to
    `return_socket` / `release_socket`) makes the wait for a free connection visible; the pool's own
    semaphore then never waits."""

    def __init__(self, host: str, port: int, **kw: Any) -> None:
        super().__init__(host, port, host, port, **kw)
        self.where = f"{host}:{port}"
        self._gate = gevent.lock.Semaphore(self.size)
        self._new: set[socket.socket] = set()
        #: when each kept-alive socket was handed back (`close_grace_left`)
        self._returned_at: dict[socket.socket, float] = {}
        #: connections opened, and connections handed back for reuse (counters, for checks)
        self.opened = 0
        self.returned = 0

    def after_connect(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._new.add(sock)
        self.opened += 1

    def get_socket(self, timing: SocketTiming | None = None) -> socket.socket:
        if timing is None:
            timing = SocketTiming()
        gate = self._gate
        if gate.locked():
            timing.stage, timing.pool_since = "pool", now()
            gate.acquire()
            timing._pool_wait_s = now() - timing.pool_since
        else:
            gate.acquire()
        timing.stage = "connect"
        try:
            sock = super().get_socket()
        except OSError as exc:
            gate.release()
            raise ConnectFailed(f"cannot connect to {self.where}: {exc.strerror or exc}") from exc
        except BaseException:
            gate.release()
            raise
        timing.ready_at = now()
        timing.stage = "ready"
        if sock in self._new:
            self._new.discard(sock)
        else:
            timing.reused = True
        return sock

    def return_socket(self, sock: socket.socket) -> None:
        try:
            super().return_socket(sock)
            self.returned += 1
            self._returned_at[sock] = now()
        finally:
            self._gate.release()

    def close_grace_left(self, sock: socket.socket) -> float:
        """How much of `CLOSE_GRACE_S` since `sock` was handed back is left (0 for an older one)."""
        returned = self._returned_at.pop(sock, None)
        return 0.0 if returned is None else max(0.0, CLOSE_GRACE_S - (now() - returned))

    def release_socket(self, sock: socket.socket) -> None:
        try:
            super().release_socket(sock)
        finally:
            self._gate.release()


class _Pool(_Timed, ConnectionPool):
    """Plain TCP pool."""


class _TLSPool(_Timed, SSLConnectionPool):
    """TLS pool (the handshake is part of connecting)."""


class StreamResponse(HTTPSocketPoolResponse):
    """geventhttpclient's pooled response (headers read on construction) with the request's
    `SocketTiming` on it, and `read_some()`: the body as it arrives, a read at a time."""

    def __init__(self, sock: socket.socket, pool: ConnectionPool, timing: SocketTiming) -> None:
        self.timing = timing
        self._stream_sock: socket.socket | None = sock
        # a plain socket waits for readability before each read (one recv per arrival, not a recv that
        # would block first); a TLS socket may hold decrypted bytes its descriptor does not show
        hub = gevent.get_hub()
        self._readable = None if isinstance(sock, _TLS_SOCKETS) else hub.loop.io(sock.fileno(), 1)
        self._wait = hub.wait
        try:
            super().__init__(sock, pool, block_size=BLOCK_SIZE, method="POST")
        except HTTPParseError:  # the body broke in the read that ended the headers: say they were read
            if self.headers_complete and self.get_code() >= 200:
                timing.status = self.get_code()
            raise
        timing.status = self.get_code()

    def _on_message_complete(self) -> None:
        """An interim response (`100 Continue`, `103 Early Hints`) is a whole bodyless message before
        the final one on the same connection: the parser goes on to the next, and the connection is not
        released (geventhttpclient's `_on_message_complete` would hand it back to the pool)."""
        if self.get_code() < 200:
            self.message_complete = True
            return
        super()._on_message_complete()

    def read_some(self) -> bytes:
        """The body bytes that have arrived: those already parsed, else one socket read's worth (several
        stream events when the server's writes were coalesced), b"" at the end of the body. The bytes
        go through geventhttpclient's parser (`feed`, chunked transfer-encoding included) into its body
        buffer, which `readline()` and `read()` share; an error releases the connection, as theirs do."""
        buf = self._body_buffer
        while not buf:
            if self.message_complete:
                return b""
            sock = self._stream_sock
            if sock is None:
                raise HTTPConnectionClosed("connection closed.")
            try:
                # every read goes through the hub, even when bytes are waiting, so a server that writes
                # faster than we read cannot starve timers (the request's timeouts) and signal handlers
                if self._readable is not None:
                    self._wait(self._readable)
                else:
                    gevent.sleep(0)
                data = sock.recv(BLOCK_SIZE)
                self.feed(data)
                if not data and not self.message_complete:
                    raise HTTPConnectionClosed("connection closed.")
            except BaseException:
                self.release()
                raise
        data = bytes(buf)
        del buf[:]
        return data

    def release(self) -> None:
        self._stream_sock = None
        readable, self._readable = self._readable, None
        if readable is not None:
            readable.close()
        super().release()


class Endpoint:
    """One base URL: its pool and how a POST goes out on it."""

    def __init__(self, base_url: str, *, concurrency: int, connect_timeout_s: float) -> None:
        parts = urlsplit(base_url)
        secure = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        pool_class = _TLSPool if secure else _Pool
        # no socket timeout once connected: the idle timeout is the request's `IdleTimer`
        self.pool = pool_class(host, port, size=concurrency, connection_timeout=connect_timeout_s,
                               network_timeout=None)
        self.prefix = parts.path.rstrip("/")
        name = f"[{host}]" if ":" in host else host
        self._host = name if port == (443 if secure else 80) else f"{name}:{port}"

    def head(self, path: str, headers: dict[str, str], length: int) -> bytes:
        """The request line and headers of a POST of `length` body bytes (latin-1, like HTTP/1.1)."""
        if not path.startswith("/") or path.startswith("//") or not _VALUE.fullmatch(path) or " " in path:
            raise ValueError(f"invalid request path {path!r}")
        lines = [f"POST {path} HTTP/1.1", f"Host: {self._host}", f"User-Agent: {_USER_AGENT}"]
        for name, value in headers.items():
            if not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
                raise ValueError(f"invalid header {name!r}")
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {length}\r\n\r\n")
        return "\r\n".join(lines).encode("latin-1")

    def post(self, path: str, body: bytes, headers: dict[str, str], timing: SocketTiming,
             idle: IdleTimer) -> StreamResponse:
        """POST and return the response once its headers are in; `timing` is filled as it goes, `idle`
        starts once the socket is connected (the connect has its own timeout)."""
        data = self.head(path, headers, len(body)) + body
        pool = self.pool
        sock = pool.get_socket(timing)
        if timing.reused:
            grace = pool.close_grace_left(sock)
            if _closed_by_peer(sock, grace):
                pool.release_socket(sock)
                raise NotSent("the kept-alive connection was closed by the server before the request was written")
            if grace:
                timing.ready_at = now()  # just before the bytes go out (METRICS.md `sent_at`), after the wait
        idle.touch()
        try:
            sent = timing.written = sock.send(data)
            if sent < len(data):
                sock.sendall(memoryview(data)[sent:])
            timing.written = len(data)
        except OSError as exc:
            if not timing.written and exc.errno in (errno.ECONNRESET, errno.EPIPE):
                pool.release_socket(sock)
                raise NotSent(f"the connection was closed before the request was written: {exc}") from exc
            if exc.errno in (errno.ECONNRESET, errno.EPIPE):
                # the server may have answered (401 on a large body, say) before closing: read that
                # answer; the response releases the socket itself either way
                try:
                    return StreamResponse(sock, pool, timing)
                except (OSError, HTTPParseError):
                    raise exc from None
            pool.release_socket(sock)
            raise
        except BaseException:
            pool.release_socket(sock)
            raise
        return StreamResponse(sock, pool, timing)


@dataclass
class EndpointRouter:
    """Chooses the base URL for each request: round_robin, least_outstanding (fewest in flight, ties
    in list order) or random (seeded). `acquire()` before sending, `release(url)` when done."""

    endpoints: list[str]
    policy: str = "round_robin"
    seed: int = 0
    outstanding: dict[str, int] = field(init=False)
    _next: int = field(init=False, default=0)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("EndpointRouter needs at least one endpoint")
        if self.policy not in ROUTING_POLICIES:
            raise ValueError(f"unknown routing policy {self.policy!r}; expected one of {ROUTING_POLICIES}")
        self.outstanding = dict.fromkeys(self.endpoints, 0)
        self._rng = random.Random(self.seed)

    def acquire(self) -> str:
        if len(self.endpoints) == 1:
            url = self.endpoints[0]
        elif self.policy == "round_robin":
            url = self.endpoints[self._next % len(self.endpoints)]
            self._next += 1
        elif self.policy == "least_outstanding":
            url = min(self.endpoints, key=self.outstanding.__getitem__)
        else:
            url = self._rng.choice(self.endpoints)
        self.outstanding[url] += 1
        return url

    def release(self, url: str) -> None:
        self.outstanding[url] -= 1


class Transport:
    """Connection pools per base URL, the router, the timeouts and the credentials of one target."""

    def __init__(self, endpoints: list[str], *, concurrency: int = 64, connect_timeout_s: float = 10.0,
                 idle_timeout_s: float = 30.0, total_timeout_s: float = 120.0, routing: str = "round_robin",
                 seed: int = 0, credentials: Credentials | None = None) -> None:
        self.endpoints = [u.rstrip("/") for u in endpoints]
        self.concurrency = max(1, int(concurrency))
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s
        self.router = EndpointRouter(self.endpoints, routing, seed)
        self.credentials = credentials or Credentials()
        self._endpoints: dict[str, Endpoint] = {}

    @classmethod
    def from_target(cls, target: Target, *, concurrency: int = 64, seed: int = 0,
                    base_dir: str = ".") -> Transport:
        """A transport for `target` (urls, routing, timeouts, key and headers)."""
        return cls(target.endpoints, concurrency=concurrency, connect_timeout_s=target.connect_timeout,
                   idle_timeout_s=target.idle_timeout, total_timeout_s=target.timeout,
                   routing=target.routing, seed=seed,
                   credentials=Credentials.from_target(target, base_dir=base_dir))

    def endpoint(self, base_url: str) -> Endpoint:
        """The pooled endpoint for one base URL (made on first use)."""
        endpoint = self._endpoints.get(base_url)
        if endpoint is None:
            endpoint = self._endpoints[base_url] = Endpoint(
                base_url, concurrency=self.concurrency, connect_timeout_s=self.connect_timeout_s)
        return endpoint

    def post(self, base_url: str, path: str, body: bytes, headers: dict[str, str], timing: SocketTiming,
             idle: IdleTimer) -> StreamResponse:
        """POST `path` (the base URL's path prefix is prepended) on the pool of `base_url`."""
        endpoint = self.endpoint(base_url)
        return endpoint.post(endpoint.prefix + path, body, headers, timing, idle)

    def reused_connections(self, base_url: str) -> int:
        """Connections of `base_url` handed back to its pool for reuse so far (0 if none made)."""
        endpoint = self._endpoints.get(base_url)
        return endpoint.pool.returned if endpoint is not None else 0

    def opened_connections(self, base_url: str) -> int:
        """Connections opened to `base_url` so far."""
        endpoint = self._endpoints.get(base_url)
        return endpoint.pool.opened if endpoint is not None else 0

    def prefix(self, base_url: str) -> str:
        """The path prefix of a base URL (`http://h/proxy` -> `/proxy`), prepended to API paths."""
        return urlsplit(base_url).path.rstrip("/")

    def close(self) -> None:
        for endpoint in self._endpoints.values():
            endpoint.pool.close()
        self._endpoints.clear()

    def __repr__(self) -> str:
        return (f"Transport({self.endpoints}, concurrency={self.concurrency}, "
                f"routing={self.router.policy!r}, credentials={self.credentials!r})")
