"""How a failure becomes an outcome (METRICS.md): status codes and error texts, one rule each.

- `rejected`: HTTP 429 or 503, or any text that is an engine's admission refusal (Ollama's
  `server busy ... maximum pending requests exceeded`, vLLM's queue-full message, "too many requests");
- `oom`: the error text says out of memory (`CUDA out of memory`, `OutOfMemoryError`, `OOM`), whether
  in a status body or inside the stream; this wins over `rejected` and `http_error`;
- `http_error`: any other 4xx/5xx, and an error object inside a 200 stream.

Exceptions (`classify_exception`, the one place every exception raised while sending becomes an outcome,
as httpx maps httpcore's): `connect_error` (the target refused, could not be resolved or reached, TLS
handshake failed), `timeout` (the idle network timeout, or the request's own total timeout on time),
`disconnect` (the connection broke or the server's bytes ended or broke the HTTP framing), `cancelled`
(somebody else's timeout or a kill: re-raised) and `client_error`: a failure of the load generator
itself, never the server's (a bug in our code, this machine out of sockets, ports or memory, our own
connection pool exhausted (it held the request for half its total timeout or more), our own total
timeout firing more than `LATE_TIMEOUT_S` late because the
generator's loop was blocked). `client_error` makes the step invalid and is left out of the server's
counts (METRICS.md).
Messages are trimmed to `MAX_ERROR_CHARS` so a record stays small.
"""

from __future__ import annotations

import errno
import math
import re
import ssl
from dataclasses import dataclass
from http.client import HTTPException

import gevent

from llmload.client.transport import ConnectFailed
from llmload.protocols import error_message, loads_json

__all__ = ["LATE_TIMEOUT_S", "MAX_ERROR_CHARS", "Failure", "SendContext", "body_message", "classify_error_text",
           "classify_exception", "classify_status", "is_oom", "trim"]

#: our total timeout firing this much after its time means the generator's loop was blocked
LATE_TIMEOUT_S = 1.0
#: errno values that say this machine (not the target) ran out of something
_LOCAL_EXHAUSTION = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL,
                     errno.EBADF}

MAX_ERROR_CHARS = 300

_OOM = re.compile(r"out of memory|OutOfMemory|\bOOM\b|cudaErrorMemoryAllocation|failed to allocate",
                  re.IGNORECASE)
_REFUSAL = re.compile(r"maximum pending requests exceeded|server busy|too many requests|queue is full|"
                      r"request queue (?:is )?full|max_num_queued|rate limit", re.IGNORECASE)


def is_oom(text: str) -> bool:
    """The text says the server ran out of (GPU) memory."""
    return bool(_OOM.search(text))


def trim(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """One line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def body_message(body: bytes) -> str:
    """The message of an error body: JSON `error.message` / `error` / `message` / `detail`, else text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = loads_json(text)
    except ValueError:
        return text
    if isinstance(obj, dict) and "error" in obj:
        return error_message(obj["error"])
    return error_message(obj)


def classify_status(status: int, message: str) -> str:
    """Outcome of a non-200 answer with this body message."""
    if is_oom(message):
        return "oom"
    if status in (429, 503) or _REFUSAL.search(message):
        return "rejected"
    return "http_error"


def classify_error_text(message: str) -> str:
    """Outcome of an error reported inside a 200 stream."""
    if is_oom(message):
        return "oom"
    if _REFUSAL.search(message):
        return "rejected"
    return "http_error"


@dataclass(frozen=True, slots=True)
class SendContext:
    """Where a request was when an exception came: what `classify_exception` needs to know."""

    #: a 200 status line was read (the stream had begun)
    answered: bool = False
    #: the response's headers were read whole (its status code), also when the body broke in the same read
    headers_status: int | None = None
    #: the transport's stage (`llmload.client.transport.SocketTiming.stage`): "pool" (waiting for a pooled
    #: connection), "connect", "ready" (a socket was handed out), or None
    stage: str | None = None
    #: how long the request waited for a free connection of our own pool (`SocketTiming.pool_wait_s`)
    pool_wait_s: float = 0.0
    #: the request's own total-timeout `gevent.Timeout` (any other one is somebody else's: cancelled)
    own_timer: object = None
    elapsed_s: float = 0.0
    total_timeout_s: float = math.inf
    idle_timeout_s: float = math.inf
    #: raised by llmload's own code outside the transport (building the request, bookkeeping)
    generator: bool = False


@dataclass(frozen=True, slots=True)
class Failure:
    """The outcome of an exception, its one-line message, and whether the caller must re-raise it."""

    outcome: str
    message: str
    reraise: bool = False


def _name(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _local_exhaustion(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in _LOCAL_EXHAUSTION:
            return True
        cause = cause.__cause__
    return False


def classify_exception(exc: BaseException, ctx: SendContext = SendContext()) -> Failure:  # noqa: B008
    """The outcome of any exception raised while sending one request (module docstring)."""
    where = ("mid-stream" if ctx.answered else f"after the response headers (HTTP {ctx.headers_status})"
             if ctx.headers_status is not None else "before the response headers")
    if isinstance(exc, gevent.Timeout):
        if exc is not ctx.own_timer:
            return Failure("cancelled", "cancelled: an outer timeout stopped the request in flight", True)
        if ctx.stage == "pool" or ctx.pool_wait_s >= ctx.total_timeout_s / 2:
            return Failure("client_error", f"llmload's own connection pool had no free connection for "
                           f"{ctx.pool_wait_s:.3g}s of the {ctx.total_timeout_s:g}s timeout")
        late = ctx.elapsed_s - ctx.total_timeout_s
        if late > LATE_TIMEOUT_S:
            return Failure("client_error", f"llmload's total timeout ({ctx.total_timeout_s:g}s) fired "
                           f"{late:.1f}s late: the generator's loop was blocked")
        return Failure("timeout", f"total timeout: no complete answer within {ctx.total_timeout_s:g}s")
    if not isinstance(exc, Exception):  # GreenletExit (the test stopped), KeyboardInterrupt
        return Failure("cancelled", "cancelled: the test stopped while the request was in flight", True)
    if ctx.generator or _local_exhaustion(exc):
        return Failure("client_error", f"failure inside llmload: {_name(exc)}")
    if isinstance(exc, (ConnectFailed, ConnectionRefusedError, ssl.SSLCertVerificationError)):
        return Failure("connect_error", str(exc) if isinstance(exc, ConnectFailed)
                       else f"cannot connect: {exc.strerror or _name(exc)}")
    if isinstance(exc, OSError) and type(exc).__name__ == "gaierror":
        return Failure("connect_error", f"cannot resolve the target's host: {exc}")
    if isinstance(exc, TimeoutError):  # socket.timeout: the idle (network) timeout between bytes
        phase = "stream events" if ctx.answered else "the response headers"
        return Failure("timeout", f"idle timeout: no data for {ctx.idle_timeout_s:g}s waiting for {phase}")
    if isinstance(exc, (OSError, HTTPException)):  # reset, broken pipe, TLS alert, HTTP framing broken
        return Failure("disconnect", f"connection lost {where}: {_name(exc)}")
    if isinstance(exc, RuntimeError) and str(exc).startswith("Cannot resolve"):  # geventhttpclient
        return Failure("connect_error", str(exc))
    return Failure("client_error", f"failure inside llmload: {_name(exc)}")
