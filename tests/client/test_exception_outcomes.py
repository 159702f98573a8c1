"""One classifier maps every exception raised while sending to an outcome (as httpx maps httpcore's):
walk the exception types the transport can raise (geventhttpclient, gevent, socket, ssl, the OSError
family) and llmload's own failures, which are `client_error` and never the server's."""

from __future__ import annotations

import errno
import socket
import ssl

import gevent
import gevent.socket
import pytest
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPProtocolViolationError

from llmload.client.outcomes import LATE_TIMEOUT_S, SendContext, classify_exception
from llmload.client.transport import ConnectFailed
from llmload.records import OUTCOMES


def _refused_at_connect() -> ConnectFailed:
    try:
        raise ConnectFailed("cannot connect to 127.0.0.1:9: Connection refused") from ConnectionRefusedError(
            errno.ECONNREFUSED, "Connection refused")
    except ConnectFailed as exc:
        return exc


def _out_of_files_at_connect() -> ConnectFailed:
    try:
        raise ConnectFailed("cannot connect to 127.0.0.1:9: Too many open files") from OSError(
            errno.EMFILE, "Too many open files")
    except ConnectFailed as exc:
        return exc


#: (exception, answered, outcome)
CASES = [
    # connecting: the target's fault (or its address's)
    (_refused_at_connect(), False, "connect_error"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), False, "connect_error"),
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False, "connect_error"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed"), False, "connect_error"),
    (RuntimeError("Cannot resolve example.invalid:80"), False, "connect_error"),  # geventhttpclient
    # the idle (network) timeout between bytes: socket.timeout is TimeoutError, gevent raises the same
    (TimeoutError("timed out"), False, "timeout"),
    (gevent.socket.timeout("timed out"), True, "timeout"),
    # the connection broke, or the server's bytes broke the HTTP framing
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), True, "disconnect"),
    (ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort"), True, "disconnect"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), False, "disconnect"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), True, "disconnect"),
    (ssl.SSLError(1, "decryption failed or bad record mac"), True, "disconnect"),
    (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), True, "disconnect"),
    (ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed"), True, "disconnect"),
    (HTTPConnectionClosed("connection closed."), False, "disconnect"),
    (HTTPParseError("connection closed before end of the headers"), False, "disconnect"),
    (HTTPProtocolViolationError("A new response began before end of the last"), True, "disconnect"),
    # this machine ran out of something, or our own code failed: the generator's fault
    (_out_of_files_at_connect(), False, "client_error"),
    (OSError(errno.EMFILE, "Too many open files"), False, "client_error"),
    (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), False, "client_error"),
    (OSError(errno.ENOBUFS, "No buffer space available"), True, "client_error"),
    (OSError(errno.EBADF, "Bad file descriptor"), True, "client_error"),
    (RuntimeError("connection pool closed"), False, "client_error"),  # geventhttpclient, our pool
    (ValueError("invalid header field name 'x\\n'"), False, "client_error"),  # geventhttpclient, our headers
    (KeyError("choices"), True, "client_error"),
    (AttributeError("'NoneType' object has no attribute 'append'"), True, "client_error"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), True, "client_error"),
    (MemoryError(), True, "client_error"),
]


@pytest.mark.parametrize(("exc", "answered", "outcome"), CASES,
                         ids=[f"{type(c[0]).__name__}-{c[2]}" for c in CASES])
def test_every_transport_exception_has_its_outcome(exc, answered, outcome):
    failure = classify_exception(exc, SendContext(answered=answered, idle_timeout_s=30.0))
    assert (failure.outcome, failure.reraise) == (outcome, False), failure.message
    assert failure.outcome in OUTCOMES and failure.message and "\n" not in failure.message


def test_our_own_code_outside_the_transport_is_always_client_error():
    # even an OSError raised while building a request (a dataset file gone) is not the server's
    failure = classify_exception(FileNotFoundError(errno.ENOENT, "No such file", "prompts.jsonl"),
                                 SendContext(generator=True))
    assert failure.outcome == "client_error" and "prompts.jsonl" in failure.message


def test_timeouts_own_late_pooled_and_somebody_elses():
    own = gevent.Timeout(5.0)
    on_time = classify_exception(own, SendContext(own_timer=own, total_timeout_s=5.0, elapsed_s=5.01, stage="ready"))
    assert on_time.outcome == "timeout" and "5s" in on_time.message
    late = classify_exception(own, SendContext(own_timer=own, total_timeout_s=5.0,
                                               elapsed_s=5.0 + LATE_TIMEOUT_S + 0.5, stage="ready"))
    assert late.outcome == "client_error" and "late" in late.message
    pooled = classify_exception(own, SendContext(own_timer=own, total_timeout_s=5.0, elapsed_s=5.0, stage="pool"))
    assert pooled.outcome == "client_error" and "pool" in pooled.message
    # it got a connection late, after waiting most of its time in our pool: still ours
    held = classify_exception(own, SendContext(own_timer=own, total_timeout_s=5.0, elapsed_s=5.0, stage="ready",
                                               pool_wait_s=4.0))
    assert held.outcome == "client_error" and "4s of the 5s" in held.message
    other = classify_exception(gevent.Timeout(1.0), SendContext(own_timer=own))
    assert (other.outcome, other.reraise) == ("cancelled", True)
    killed = classify_exception(gevent.GreenletExit(), SendContext(own_timer=own))
    assert (killed.outcome, killed.reraise) == ("cancelled", True)


@pytest.mark.slow
def test_our_own_exhausted_pool_is_client_error_not_a_server_timeout(vllm_sim):
    from client_helpers import fixed_requests, send_batch, sim_target

    from llmload.client import Transport

    # one pooled connection and a 0.5 s total timeout: the first request holds the connection with a
    # ~1.2 s stream and times out on the server's time; the second never got a connection from our
    # pool, so its timeout is ours
    target = sim_target(vllm_sim.url, "openai-chat", "vllm", timeout="500ms")
    transport = Transport.from_target(target, concurrency=1)
    try:
        first, second = send_batch(target, fixed_requests(output_tokens=48), 2, concurrency=2,
                                   transport=transport)
    finally:
        transport.close()
    assert first.outcome == "timeout", first.error
    assert second.outcome == "client_error" and "pool" in second.error, second.error
