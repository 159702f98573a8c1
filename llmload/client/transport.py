"""HTTP transport for streaming requests under gevent, and routing over several endpoints.

geventhttpclient is the client Locust's FastHttpUser uses; its `readline()` returns as soon as one line
has arrived, which is what makes per-event timestamps true (its `iter_content`/`iter_lines` wait for
the whole body). One `HTTPClient` (one connection pool) per base URL, sized to the concurrency so no
request waits for a connection inside the client. Timeouts:
- `connect_timeout_s`: TCP connect;
- `idle_timeout_s`: the socket's network timeout, i.e. the longest silence allowed between bytes
  (waiting for the headers included) — a stalled stream ends as `timeout`;
- `total_timeout_s`: the whole request, enforced by the streaming core with `gevent.Timeout`.
Sockets get TCP_NODELAY; the moment a socket is handed out is kept per greenlet (`socket_ready_at`),
because `HTTPClient.request` connects and writes in one call. A connect failure (TLS handshake
included) is raised as `ConnectFailed` so the core can tell it from a read failure (`connect_error` vs
`disconnect` / `timeout`). A request waiting for a free pooled connection waits before its `sent_at`.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import gevent.local
from geventhttpclient import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool

from llmload.client.auth import Credentials
from llmload.clock import now
from llmload.config import Target

__all__ = ["ConnectFailed", "EndpointRouter", "Transport", "socket_pool_wait_s", "socket_ready_at", "socket_stage",
           "socket_was_reused"]

ROUTING_POLICIES = ("round_robin", "least_outstanding", "random")


class ConnectFailed(OSError):
    """The TCP connection to the target could not be made (refused, unreachable, connect timeout)."""


#: per greenlet: when the pool last handed this greenlet a connected socket (see `socket_ready_at`)
_ready = gevent.local.local()


def socket_was_reused() -> bool:
    """Whether the socket the current greenlet last got from a pool was a kept-alive one (not new)."""
    return not getattr(_ready, "new", True)


def socket_ready_at(reset: bool = False) -> float | None:
    """When the current greenlet last got a connected socket from a pool, i.e. the moment just before
    the request bytes are written (METRICS.md `sent_at`: a new connection's connect time is not in it).
    `reset=True` clears it (and `socket_stage`) before a request."""
    at = getattr(_ready, "at", None)
    if reset:
        _ready.at = None
        _ready.stage = None
        _ready.pool_wait_s = 0.0
    return at


def socket_pool_wait_s() -> float:
    """How long the current greenlet's last socket request waited for a free connection of our own pool
    (still waiting: so far). Time spent there is the generator's, never the server's."""
    if getattr(_ready, "stage", None) == "pool":
        return now() - getattr(_ready, "pool_since", now())
    return getattr(_ready, "pool_wait_s", 0.0)


def socket_stage() -> str | None:
    """Where the current greenlet's last socket request got to: "pool" (waiting for a free pooled
    connection: our own pool exhausted), "connect" (connecting), "ready" (handed out), None (not asked)."""
    return getattr(_ready, "stage", None)


def _instrument(pool: ConnectionPool) -> None:
    """Wrap one pool's socket hooks (plain or TLS alike): TCP_NODELAY on new connections, connect
    failures (refused, unreachable, timeout, TLS handshake) raised as `ConnectFailed`, and the time each
    socket is handed out kept for `socket_ready_at`. `get_socket` and `_create_socket` are the pool's
    only hooks between connecting and writing; instance attributes so TLS pools keep their own class."""
    get_socket, create_socket = pool.get_socket, pool._create_socket
    where = f"{pool._connection_host}:{pool._connection_port}"

    def create() -> socket.socket:
        if getattr(_ready, "stage", None) == "pool":
            _ready.pool_wait_s = now() - _ready.pool_since
        _ready.stage = "connect"
        try:
            sock = create_socket()
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {where}: {exc.strerror or exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _ready.new = True
        return sock

    def get() -> socket.socket:
        _ready.new = False
        _ready.stage, _ready.pool_since = "pool", now()
        sock = get_socket()
        _ready.at = now()
        if _ready.stage == "pool":  # a kept-alive socket: no connect in between
            _ready.pool_wait_s = _ready.at - _ready.pool_since
        _ready.stage = "ready"
        return sock

    pool._create_socket = create
    pool.get_socket = get


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
        self._clients: dict[str, HTTPClient] = {}

    @classmethod
    def from_target(cls, target: Target, *, concurrency: int = 64, seed: int = 0,
                    base_dir: str = ".") -> Transport:
        """A transport for `target` (urls, routing, timeouts, key and headers)."""
        return cls(target.endpoints, concurrency=concurrency, connect_timeout_s=target.connect_timeout,
                   idle_timeout_s=target.idle_timeout, total_timeout_s=target.timeout,
                   routing=target.routing, seed=seed,
                   credentials=Credentials.from_target(target, base_dir=base_dir))

    def client(self, base_url: str) -> HTTPClient:
        """The pooled client for one base URL (made on first use)."""
        client = self._clients.get(base_url)
        if client is None:
            parts = urlsplit(base_url)
            secure = parts.scheme == "https"
            client = HTTPClient(parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80),
                                ssl=secure, concurrency=self.concurrency,
                                connection_timeout=self.connect_timeout_s,
                                network_timeout=self.idle_timeout_s)
            _instrument(client._connection_pool)
            self._clients[base_url] = client
        return client

    def idle_connections(self, base_url: str) -> int:
        """Kept-alive connections waiting in the pool of `base_url` (reuse check; 0 if none made)."""
        client = self._clients.get(base_url)
        return client._connection_pool._socket_queue.qsize() if client is not None else 0

    def prefix(self, base_url: str) -> str:
        """The path prefix of a base URL (`http://h/proxy` -> `/proxy`), prepended to API paths."""
        return urlsplit(base_url).path.rstrip("/")

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __repr__(self) -> str:
        return (f"Transport({self.endpoints}, concurrency={self.concurrency}, "
                f"routing={self.router.policy!r}, credentials={self.credentials!r})")
