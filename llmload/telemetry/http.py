"""Small blocking HTTP GETs for telemetry and probes (stdlib `urllib`, a total deadline, a size cap).

Plain urllib works both in a normal process and on a Locust master patched by gevent (its sockets are
then cooperative). urllib's `timeout` bounds each socket operation, so a server that drips one byte
every half second would hold a scrape for ever: here `timeout_s` is the whole exchange's deadline
(`open_url`: every read and write of the connection waits at most until it; past it, `TimeoutError`),
and an answer longer than `MAX_BODY_BYTES` is an error, not a truncated page. Every failure becomes a `TelemetryError` whose message names the URL and the reason;
`HttpStatusError` keeps the status so callers can tell "not available here" (404/501) from a failure.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import HTTPHandler, HTTPSHandler, Request

from llmload.client.auth import open_url as _open_keeping_credentials_home
from llmload.errors import TelemetryError

__all__ = ["MAX_BODY_BYTES", "HttpStatusError", "fetch_bytes", "fetch_json", "fetch_text", "open_url", "public_url",
           "read_capped"]

#: the most we read from one telemetry or probe answer (a vLLM /metrics page is ~100 kB); a longer
#: answer is an error
MAX_BODY_BYTES = 16 * 1024 * 1024


class _DeadlineSocket:
    """A connected socket whose every read and write waits at most until `deadline` (monotonic seconds):
    the socket's timeout is set to the time left before each operation. http.client reads through
    `makefile`, which this reproduces (with the socket's reference counting: urllib closes the
    connection's socket while the response still reads from it)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline
        self._io_refs, self._closed = 0, False

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return self._sock.recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._arm()
        return self._sock.recv(bufsize, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return self._sock.send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        self._sock.sendall(data, flags)

    def makefile(self, mode: str = "r", buffering: int | None = None, **_kw: Any) -> Any:
        # SocketIO calls only recv_into / send / close, which this wrapper has: it is no socket.socket
        raw = socket.SocketIO(self, "rwb" if "w" in mode else "rb")  # type: ignore[arg-type]
        self._io_refs += 1
        return raw if buffering == 0 else io.BufferedReader(raw, io.DEFAULT_BUFFER_SIZE)

    def _decref_socketios(self) -> None:
        self._io_refs -= 1
        if self._closed and self._io_refs <= 0:
            self._sock.close()

    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self._sock.close()

    def __getattr__(self, name: str) -> Any:  # fileno, setsockopt, shutdown, settimeout ...
        return getattr(self._sock, name)


def _deadline_handlers(deadline: float) -> list:
    """urllib handlers whose connections keep to `deadline`."""

    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            # the connection reads and writes through this socket-like wrapper (no socket.socket subclass)
            self.sock = _DeadlineSocket(self.sock, deadline)  # type: ignore[assignment]

    class Secure(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()  # TCP and TLS, each operation within the timeout
            self.sock = _DeadlineSocket(self.sock, deadline)  # type: ignore[assignment]  # as Plain's

    class PlainHandler(HTTPHandler):
        def http_open(self, req: Request) -> Any:
            return self.do_open(Plain, req)

    class SecureHandler(HTTPSHandler):
        def https_open(self, req: Request) -> Any:
            return self.do_open(Secure, req)  # the default TLS context, as HTTPSHandler() has

    return [PlainHandler(), SecureHandler()]


def open_url(request: Request | str, *, timeout_s: float) -> Any:
    """`urlopen(request)` where `timeout_s` is the deadline of the whole exchange (connect, headers and
    every body read), not of each socket operation: past it, `TimeoutError` (or `URLError` wrapping
    it, as urllib raises while opening). Credentials never follow a redirect to another origin
    (`llmload.client.auth.open_url`)."""
    deadline = time.monotonic() + timeout_s
    return _open_keeping_credentials_home(request, timeout_s=timeout_s, handlers=_deadline_handlers(deadline))


def read_capped(resp: Any, url: str, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The whole body of `resp`, at most `max_bytes` (TelemetryError beyond: no truncated page)."""
    data = resp.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TelemetryError(f"{url}: answer longer than {max_bytes} bytes", url=url)
    return data


class HttpStatusError(TelemetryError):
    """The server answered with a non-2xx status."""

    def __init__(self, message: str, *, url: str, status: int) -> None:
        super().__init__(message, url=url, status=status)
        self.url, self.status = url, status


def fetch_bytes(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None,
                body: Any = None) -> bytes:
    """GET `url` (POST a JSON `body` when given) and return the body; TelemetryError on any failure."""
    data = None if body is None else json.dumps(body).encode()
    url, headers = _split_credentials(url, dict(headers or {}))
    request = Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with open_url(request, timeout_s=timeout_s) as resp:  # credentials never follow a redirect away
            return read_capped(resp, url)
    except HTTPError as exc:
        exc.close()
        raise HttpStatusError(f"{url}: HTTP {exc.code}", url=url, status=exc.code) from None
    except TimeoutError:
        raise TelemetryError(f"{url}: timed out after {timeout_s:g}s", url=url) from None
    except URLError as exc:
        reason = exc.reason
        text = "timed out" if isinstance(reason, TimeoutError) else str(reason)
        raise TelemetryError(f"{url}: {text}", url=url) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # reset, bad status line, invalid URL
        raise TelemetryError(f"{url}: {type(exc).__name__}: {exc}", url=url) from None


def public_url(url: str) -> str:
    """The URL without `user:password@`, for names that get written (sources, messages)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _split_credentials(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """`http://user:pw@host/x` -> `http://host/x` plus Basic auth (urllib refuses credentials in URLs)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, headers
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    if not any(k.lower() == "authorization" for k in headers):
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    return urlunsplit(parts._replace(netloc=netloc)), headers


def fetch_text(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None) -> str:
    """GET and decode as UTF-8 (bad bytes replaced: exposition text is ASCII in practice)."""
    return fetch_bytes(url, timeout_s=timeout_s, headers=headers).decode("utf-8", errors="replace")


def fetch_json(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None,
               body: Any = None) -> Any:
    """GET (or POST `body`) and parse JSON; TelemetryError when the answer is not JSON."""
    raw = fetch_bytes(url, timeout_s=timeout_s, headers=headers, body=body)
    try:
        return json.loads(raw)
    except ValueError:
        raise TelemetryError(f"{url}: answer is not JSON", url=url) from None
