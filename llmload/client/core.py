"""The streaming request core: send one request, read its stream incrementally, fill its Record.

`send(transport, request, record, expect=None) -> SendResult` runs inside a gevent greenlet (a Locust
user, or a plain test). Server failures never raise: they are data (the record's `outcome`, `error`,
`http_status`). Only cancellation propagates: a `GreenletExit` (the greenlet was killed: the test was
stopped) fills the record as `cancelled` with the times seen so far, then re-raises.

Timestamps (METRICS.md), all from `llmload.clock.now()`:
- `sent_at` when the pool hands over a connected socket, right before the bytes are written (a new
  connection's connect time is not in TTFT; if the connection fails, the time of the attempt);
- `first_answer_at` at the first output-bearing event that is not reasoning only (content, text, a
  tool call); `reasoning_tokens` from the server's count, per-event counts or the share of reasoning
  events (`_reasoning_tokens`);
- each event is stamped when the bytes that complete it were read (`StreamResponse.read_some()`: what
  one socket read brought, for SSE the blank line, which servers write together with the `data:`
  line); events that arrived in the same read share its time. `first_token_at` and `token_times` at
  output-bearing events only; `last_token_at` is the last of them. An unterminated last line at the end
  of the body is dropped (it may be cut);
- `closed_at` at `[DONE]` / Ollama's `done` object / the error / the end of the body.

Outcomes: `ok` (at least one output-bearing event, then the final event, or a finish_reason then a
cleanly ended body, for servers that omit `[DONE]`), `rejected`, `http_error`, `oom` (status + body message, or an error inside the stream:
`llmload.client.outcomes`), `timeout` (total: `gevent.Timeout`; idle: the transport's `IdleTimer`, restarted by each read that ends a line),
`disconnect` (the body ended or broke before the final event, or the server closed before answering),
`connect_error`, `cancelled`, `quality_fail` (`expect` given and the answer failed it), `client_error`
(a failure of llmload itself, never the server's). Every exception is mapped by one classifier,
`llmload.client.outcomes.classify_exception`. `malformed`: the server's stream broke its API's
format: a chunk that is not JSON, not UTF-8, of the wrong shape or with a wrong-typed field (usage
counts as strings, `finish_reason: 7`, `choices: ["x"]`), or a line longer than 1 MiB
(`llmload.protocols.events`); never an exception, never `client_error`. A 200 stream that reached its end with no
output-bearing event ("stream ended with no output": `data: [DONE]` alone, `choices: []` only, an
Ollama `done` object without text), whatever counts it reported. Error texts are one line, at most 300 characters,
with the API key removed.

Counts: `input_tokens` / `output_tokens` from usage, Ollama's counts or llama.cpp `timings`; when the
server gives none, the planned input and `count_tokens` of the received text, with
`tokens_estimated=True`; a 200 stream without any output event has `output_tokens` 0 (no tokens are
counted without output). `token_counts` is filled only when every output event carried a count
(vLLM `continuous_usage_stats`). A reported output count that disagrees with the output events seen
(`usage_agrees`: fewer than the events less 5% and one, or more than 64 per event) is not believed:
`output_tokens` is the events seen (`tokens_estimated`), `usage_mismatch` is set and the server's count
kept in `reported_output_tokens`, so TPOT and rates are timed on what arrived. A reported prompt count
over `MAX_INPUT_OVER_PLANNED` (10) times the planned one plus 1000 is replaced by the planned count
(estimated, `usage_mismatch`). `retries`: how often the
request was sent again (`_post`). Ollama durations fill `server_*_s`; `server_queue_s = total - load -
prompt - decode`; `cold` is true when the load took over `COLD_LOAD_S`.

The answer text is returned in `SendResult.text` (for quality checks), never put in the record.
"""

from __future__ import annotations

from dataclasses import dataclass

import gevent
from geventhttpclient.response import HTTPConnectionClosed

from llmload.apis import get_api
from llmload.client.bodies import PreparedRequest
from llmload.client.checks import check_answer
from llmload.client.outcomes import (
    SendContext,
    body_message,
    classify_error_text,
    classify_exception,
    classify_status,
    trim,
)
from llmload.client.transport import IdleTimer, NotSent, SocketTiming, StreamResponse, Transport
from llmload.clock import now
from llmload.config import Expect
from llmload.protocols import ServerTimings, StreamChunk
from llmload.records import Record
from llmload.tokens import count_tokens

__all__ = ["COLD_LOAD_S", "MAX_INPUT_OVER_PLANNED", "MAX_TOKENS_PER_EVENT", "USAGE_TOLERANCE", "SendResult", "send",
           "usage_agrees"]

#: an Ollama `load_duration` above this means the model had to be loaded (warm requests report a few ms)
COLD_LOAD_S = 0.5
#: a server's output token count is believed when it is at least the output-bearing events seen, less
#: this share of them and one token, ...
USAGE_TOLERANCE = 0.05
#: ... and at most this many tokens per output event (vLLM's `--stream-interval` batches a few)
MAX_TOKENS_PER_EVENT = 64
#: a reported prompt count above this many times the planned one (plus 1000 tokens) is not believed
MAX_INPUT_OVER_PLANNED = 10
#: how long to wait for the end of the body after the final event, to keep the connection reusable
_DRAIN_S = 0.2


@dataclass(slots=True)
class SendResult:
    """The filled record and the answer text (not stored anywhere)."""

    record: Record
    text: str


class _Stream:
    """What one response stream has said so far."""

    __slots__ = ("record", "times", "counts", "texts", "reasoning", "input_tokens", "output_tokens",
                 "cached_tokens", "timings", "finish_reason", "error", "malformed", "final", "reasoning_events",
                 "reasoning_counted", "server_reasoning", "tool_events", "tool_counted", "tool_texts", "seen",
                 "body_head")

    def __init__(self, record: Record) -> None:
        self.record = record
        self.times = record.token_times
        self.counts: list[int] | None = []
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.timings: ServerTimings | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.malformed = False
        self.final = False
        #: output events that carried reasoning only, the tokens they carried (when counted), and the
        #: server's own reasoning count
        self.reasoning_events = 0
        self.reasoning_counted = 0
        self.server_reasoning: int | None = None
        #: output events that carried a tool call, their counted tokens and their argument text
        self.tool_events = 0
        self.tool_counted = 0
        self.tool_texts: list[str] = []
        #: a chunk of the API was decoded (an event, a count, an error); the body's first bytes, kept to
        #: name a body that held none (an HTML page)
        self.seen = False
        self.body_head = b""

    def apply(self, chunk: StreamChunk, t: float) -> bool:
        """Take one chunk stamped `t`; True when the stream is over (final event or error)."""
        self.seen = True
        if chunk.output:
            if not self.times:
                self.record.first_token_at = t
            self.times.append(t)
            if self.counts is not None:
                if chunk.tokens is None:
                    self.counts = None
                else:
                    self.counts.append(chunk.tokens)
            if chunk.text:
                self.texts.append(chunk.text)
            if chunk.reasoning:
                self.reasoning.append(chunk.reasoning)
            if chunk.reasoning and not chunk.text:  # reasoning only: not yet the answer
                self.reasoning_events += 1
                self.reasoning_counted += chunk.tokens or 0
            elif self.record.first_answer_at is None:
                self.record.first_answer_at = t
            if chunk.tool_call:
                self.tool_events += 1
                self.tool_counted += chunk.tokens or 0
                self.tool_texts.append(chunk.text)
        if chunk.reasoning_tokens is not None:
            self.server_reasoning = chunk.reasoning_tokens
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.output_tokens is not None:
            self.output_tokens = chunk.output_tokens
        if chunk.input_tokens is not None:
            self.input_tokens = chunk.input_tokens
        if chunk.cached_tokens is not None:
            self.cached_tokens = chunk.cached_tokens
        if chunk.timings is not None:
            self.timings = chunk.timings
        if chunk.error is not None:
            self.error = chunk.error
            self.malformed = chunk.malformed
            self.record.closed_at = t
            return True
        if chunk.final:
            self.final = True
            self.record.closed_at = t
            return True
        return False


def send(transport: Transport, request: PreparedRequest, record: Record, *,
         expect: Expect | None = None) -> SendResult:
    """Send `request`, stream the answer, fill `record` (see the module docstring). Call under gevent."""
    record.api = request.api
    record.planned_input_tokens = request.planned_input_tokens
    record.planned_output_tokens = request.planned_output_tokens
    record.prefix_id = request.prefix_id
    credentials = transport.credentials
    base = transport.router.acquire()
    record.instance = base
    stream = _Stream(record)
    resp = None
    got_200 = False
    timing = SocketTiming()
    idle = IdleTimer(transport.idle_timeout_s)
    timer = gevent.Timeout(transport.total_timeout_s)
    started = now()
    timer.start()
    try:
        headers = {**credentials.headers(), **request.headers}
        decoder = get_api(request.api).decoder()
        resp = _post(transport, base, request, headers, record, timing, idle,
                     attempts=transport.concurrency + 1)
        status = record.http_status = resp.status_code
        if status != 200:
            message = body_message(resp.read())
            record.closed_at = now()
            _fail(record, classify_status(status, message), f"HTTP {status}: {message}", transport)
            return SendResult(record, "")
        got_200 = True
        read, apply, feed, touch = resp.read_some, stream.apply, decoder.feed, idle.touch
        done = False
        while not done:
            data = read()
            t = now()
            if not data:
                for chunk in decoder.flush():
                    if apply(chunk, t):
                        break
                if record.closed_at is None:
                    record.closed_at = t
                break
            if b"\n" in data:  # a line ended: the idle timeout counts from here
                touch()
            if not stream.body_head:
                stream.body_head = data[:80]
            for chunk in feed(data):
                if apply(chunk, t):
                    done = True
                    break
        _judge(record, stream, transport, clean_end=resp.message_complete)
        if stream.final and not resp.message_complete:
            _drain(resp)
    except BaseException as exc:  # every failure, one classifier (llmload.client.outcomes)
        failure = classify_exception(exc, SendContext(
            answered=got_200, headers_status=timing.status, stage=timing.stage, pool_wait_s=timing.pool_wait_s,
            own_timer=timer,
            elapsed_s=now() - started,
            total_timeout_s=transport.total_timeout_s, idle_timeout_s=transport.idle_timeout_s))
        if failure.outcome == "disconnect":
            record.closed_at = now()
        if record.http_status is None and timing.status is not None:  # its headers came, its body broke
            record.http_status = timing.status
        _fail(record, failure.outcome, failure.message, transport)
        if failure.reraise:  # cancelled: a kill or somebody else's deadline
            _count(record, stream, request, got_200)
            raise
    finally:
        timer.close()
        idle.close()
        if resp is not None:
            resp.release()
        transport.router.release(base)
    text = "".join(stream.texts)
    _count(record, stream, request, got_200)
    if expect is not None and record.outcome == "ok":
        record.quality_checked = True
        passed, reason = check_answer(text, expect)
        if not passed:
            record.outcome = "quality_fail"
            record.error = trim(transport.credentials.redact(reason))
    return SendResult(record, text)


def _post(transport: Transport, base: str, request: PreparedRequest, headers: dict, record: Record,
          timing: SocketTiming, idle: IdleTimer, *, attempts: int) -> StreamResponse:
    """POST and return the response once its headers are in. A POST is sent twice only when its first
    attempt cannot have reached the server's handler: a kept-alive connection the server had closed
    (llama-server closes after each stream while announcing keep-alive) is found closed before anything
    is written (`NotSent`), or resets the connection before any response byte (a reset: the server's
    TCP stack threw the unread request away). A connection that the server closes cleanly after the
    request was written is never retried: the server may have read it (a `disconnect`). Each new
    attempt counts in `record.retries`; `sent_at` is the time of the send that got through. A failure
    on a new connection is never retried. `timing` is the transport's account of the last attempt."""
    for attempt in range(1, attempts + 1):
        timing.reset()
        record.sent_at = now()  # replaced by the time the connection was ready, once known
        try:
            resp = transport.post(base, request.path, request.body, headers, timing, idle)
        except NotSent:
            if attempt == attempts:
                raise
            record.retries += 1
            continue
        except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError) as exc:
            if attempt == attempts or not timing.reused or not _reset(exc):
                record.sent_at = timing.ready_at or record.sent_at
                raise
            record.retries += 1
            continue
        record.sent_at = timing.ready_at or record.sent_at
        return resp
    raise AssertionError("unreachable")


def _reset(exc: BaseException) -> bool:
    """The connection was reset (not closed cleanly): geventhttpclient turns a reset before the first
    response byte into `HTTPConnectionClosed`, raised while handling the `ConnectionResetError`."""
    return isinstance(exc, (ConnectionResetError, BrokenPipeError)) or isinstance(
        exc.__context__, (ConnectionResetError, BrokenPipeError))


def _drain(resp: StreamResponse) -> None:
    """Read the end of the body after the final event so the connection can be reused; a failure
    here only costs the connection (release() closes an unfinished one)."""
    try:
        with gevent.Timeout(_DRAIN_S, False):
            resp.read()
    except Exception:  # noqa: BLE001 - the answer is complete; nothing here changes it
        pass


def _fail(record: Record, outcome: str, message: str, transport: Transport) -> None:
    record.outcome = outcome
    record.error = trim(transport.credentials.redact(message))


def _judge(record: Record, stream: _Stream, transport: Transport, *, clean_end: bool) -> None:
    """Outcome of a 200 stream that ended."""
    if stream.malformed:
        _fail(record, "malformed", stream.error or "malformed stream", transport)
    elif stream.error is not None:
        _fail(record, classify_error_text(stream.error), f"error in stream: {stream.error}", transport)
    elif stream.final or (stream.finish_reason is not None and clean_end):
        if stream.times:
            record.outcome = "ok"
        else:  # an answer that said nothing is not a success, whatever its counts claim
            claimed = f" (it reported {stream.output_tokens} output tokens)" if stream.output_tokens else ""
            _fail(record, "http_error", f"stream ended with no output: no output-bearing event before its "
                  f"final event{claimed}", transport)
    elif clean_end and not stream.seen and stream.body_head.strip():
        head = stream.body_head.decode("utf-8", "replace").strip().splitlines()[0][:60]
        _fail(record, "malformed", f"the 200 body is not an event stream of the API: nothing in it could be "
              f"read (it begins {head!r})", transport)
    else:
        _fail(record, "disconnect", "stream ended before its final event", transport)


def _reasoning_tokens(stream: _Stream, output_tokens: int | None, *, trust_counts: bool = True) -> int:
    """Reasoning tokens of a 200 stream: the server's own count (OpenAI's `completion_tokens_details`),
    else the tokens the reasoning-only events carried when every event had a count (vLLM continuous
    usage), else the output tokens shared in proportion of reasoning-only events (exact when each event
    is one token, as Ollama and llama.cpp stream), else the reasoning text counted by the sim's rule."""
    if stream.server_reasoning is not None:
        return min(stream.server_reasoning, output_tokens) if output_tokens is not None else stream.server_reasoning
    return _event_tokens(stream, stream.reasoning_events, stream.reasoning_counted, "".join(stream.reasoning),
                         output_tokens, trust_counts=trust_counts)


def _event_tokens(stream: _Stream, events: int, counted: int, text: str, output_tokens: int | None, *,
                  trust_counts: bool) -> int:
    """Tokens of some of a stream's output events (reasoning-only, tool-call): their own counts when
    every event had one, else the output tokens shared in proportion of events, else `text` counted."""
    if not events or not stream.times:
        return 0
    if stream.counts and trust_counts:
        return counted
    if stream.output_tokens is not None and output_tokens is not None:
        return round(output_tokens * events / len(stream.times))
    return count_tokens(text)


def usage_agrees(reported: int, events: int) -> bool:
    """A reported output count is consistent with `events` output-bearing events (each carries at least
    one token; `USAGE_TOLERANCE`, `MAX_TOKENS_PER_EVENT`)."""
    return events * (1.0 - USAGE_TOLERANCE) - 1 <= reported <= events * MAX_TOKENS_PER_EVENT


def _count(record: Record, stream: _Stream, request: PreparedRequest, got_200: bool) -> None:
    """Token counts, server timings and last_token_at from what the stream said."""
    if stream.times:
        record.last_token_at = stream.times[-1]
    if stream.counts:
        record.token_counts = stream.counts
    record.finish_reason = stream.finish_reason
    record.cached_tokens = stream.cached_tokens
    estimated = False
    planned_in = request.planned_input_tokens
    if stream.input_tokens is not None and (
            planned_in is None or stream.input_tokens <= planned_in * MAX_INPUT_OVER_PLANNED + 1000):
        record.input_tokens = stream.input_tokens
    elif stream.input_tokens is not None:  # an absurd prompt count: the planned one, flagged
        record.usage_mismatch = True
        record.input_tokens, estimated = planned_in, True
    elif got_200 and planned_in is not None:
        record.input_tokens, estimated = request.planned_input_tokens, True
    if got_200 and not stream.times:
        record.output_tokens = 0  # nothing was received: a server's count without output is not counted
    elif stream.output_tokens is not None:
        events = len(stream.times)
        if usage_agrees(stream.output_tokens, events):
            record.output_tokens = stream.output_tokens
        else:  # the server's count is not what arrived: time with the events seen, and say so
            record.usage_mismatch = True
            record.reported_output_tokens = stream.output_tokens
            record.output_tokens = events
            record.token_counts = []
            estimated = True
    elif got_200:
        record.output_tokens = count_tokens("".join(stream.reasoning) + " " + "".join(stream.texts))
        estimated = True
    record.tokens_estimated = estimated
    if got_200:
        record.reasoning_tokens = _reasoning_tokens(stream, record.output_tokens,
                                                    trust_counts=not record.usage_mismatch)
        record.tool_call_tokens = _event_tokens(stream, stream.tool_events, stream.tool_counted,
                                                "".join(stream.tool_texts), record.output_tokens,
                                                trust_counts=not record.usage_mismatch)
    timings = stream.timings
    if timings is not None:
        record.server_load_s = timings.load_s
        record.server_prompt_s = timings.prompt_s
        record.server_decode_s = timings.decode_s
        record.server_total_s = timings.total_s
        if timings.load_s is not None:
            record.cold = timings.load_s > COLD_LOAD_S
        total, load, prompt, decode = timings.total_s, timings.load_s, timings.prompt_s, timings.decode_s
        if total is not None and load is not None and prompt is not None and decode is not None:
            record.server_queue_s = max(0.0, total - load - prompt - decode)
