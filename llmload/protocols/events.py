"""The typed result of reading one stream event, whatever the API.

Every per-API parser turns one event (an SSE `data:` payload or an NDJSON line) into one
`StreamChunk`. The streaming core only reads these fields, so adding an API means adding a parser.
`output` follows METRICS.md: true only when the event carries generated output (non-empty content,
reasoning, completion text, Ollama `response`/`thinking`, or a tool call); role-only deltas, empty
deltas, usage-only chunks and final objects without text are not output.

A payload that is not what its API says a chunk is, is the server's malformed output, never an
exception: not JSON, not a JSON object, a field of the wrong type or shape (`choices: ["x"]`,
`delta: "str"`, text that is not a string, a `finish_reason` that is not a string), a token count that
is not a whole number in [0, `MAX_TOKEN_COUNT`] (`"12"`, `-5`, `2**70`). Each parser wraps its reading
in `parse_guarded`, so such a payload becomes one `StreamChunk` with `malformed=True` and an `error`
saying why; the client ends the request with outcome `malformed` (METRICS.md). Nothing is dropped
silently: one bad field makes the whole request malformed, so no wrong count reaches the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:  # orjson is about 3x faster on stream chunks; optional
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    def _loads(data: bytes | bytearray | memoryview | str, /) -> Any:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)

__all__ = ["MAX_LINE_BYTES", "MAX_TOKEN_COUNT", "MalformedChunk", "ServerTimings", "StreamChunk", "error_message",
           "load_payload", "loads_json", "malformed_chunk", "parse_guarded", "text_field", "token_count"]

#: the longest stream line (an SSE line or an NDJSON line) the decoders buffer: 1 MiB. A line still
#: unterminated past it makes the request `malformed` (a server writing one endless line would otherwise
#: grow the buffer, and the CPU spent on it, without bound)
MAX_LINE_BYTES = 1 << 20
#: the largest token count a stream may report (int32's largest); above it, or below 0, the chunk is
#: malformed
MAX_TOKEN_COUNT = 2**31 - 1


#: decode JSON (orjson when installed); raises ValueError on malformed input. Bound directly, no
#: wrapper: it runs once per stream event
loads_json: Callable[[str | bytes], Any] = _loads


@dataclass(slots=True)
class ServerTimings:
    """Server-reported timings in seconds (Ollama durations, llama.cpp `timings`); None where absent."""

    load_s: float | None = None
    prompt_s: float | None = None
    decode_s: float | None = None
    total_s: float | None = None


@dataclass(slots=True)
class StreamChunk:
    """What one stream event said, as the client needs it."""

    #: generated answer text in this event (content, completion text, tool-call arguments)
    text: str = ""
    #: reasoning text (`reasoning_content`, Ollama `thinking`): output, but not part of the answer
    reasoning: str = ""
    #: the event carries output (first_token_at / token_times are taken at such events)
    output: bool = False
    #: the event carries a tool call (its arguments, as text, are in `text`): counted apart
    tool_call: bool = False
    #: output tokens in this event when the server says (continuous usage stats delta); else None
    tokens: int | None = None
    finish_reason: str | None = None
    #: usage or final counts, when this event reports them (the last report wins)
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: reasoning tokens among the output tokens, when the server says (OpenAI's
    #: `usage.completion_tokens_details.reasoning_tokens`); else None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    timings: ServerTimings | None = None
    #: an error reported inside the stream (`{"error": ...}`), its message
    error: str | None = None
    #: the stream's final event: `[DONE]` or Ollama's `done: true`
    final: bool = False
    #: `error` is not the server's message but our reason for refusing its output (module docstring)
    malformed: bool = False


class MalformedChunk(ValueError):
    """A payload field of the wrong type or an impossible value (raised inside a parser, caught by
    `parse_guarded`)."""


def token_count(value: Any) -> int | None:
    """A token count as the stream reported it: None, or a whole number in [0, MAX_TOKEN_COUNT] (a float
    with a whole value is taken, as JSON does not tell 3 from 3.0); anything else is malformed."""
    if value is None:
        return None
    if value.__class__ is int:
        if 0 <= value <= MAX_TOKEN_COUNT:
            return value
    elif value.__class__ is float and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    raise MalformedChunk(f"token count {_excerpt(value)}")


def text_field(value: Any, name: str) -> str | None:
    """A text field: None or a string, else malformed."""
    if value is None or value.__class__ is str:
        return value
    raise MalformedChunk(f"{name} {_excerpt(value)}")


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "\u2026"


def malformed_chunk(payload: str | bytes, why: str, *, ndjson: bool = False) -> StreamChunk:
    """The chunk standing for a payload that is not a valid chunk: `why`, then the payload's start."""
    return StreamChunk(error=f"malformed stream {'line' if ndjson else 'chunk'}: {why}: {payload[:120]!r}",
                       malformed=True)


def parse_guarded(read: Callable[[dict[str, Any]], StreamChunk], payload: str | bytes, *,
                  ndjson: bool = False) -> StreamChunk:
    """`read(obj)` for the JSON object of `payload` (`load_payload`); a payload that `read` cannot take
    (a wrong type or shape: `MalformedChunk`, or Python's own TypeError / AttributeError / KeyError /
    IndexError / ValueError raised by reading it) is a malformed chunk, never an exception."""
    obj = load_payload(payload, ndjson=ndjson)
    if isinstance(obj, StreamChunk):
        return obj
    try:
        return read(obj)
    except MalformedChunk as exc:
        return malformed_chunk(payload, str(exc), ndjson=ndjson)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError) as exc:
        return malformed_chunk(payload, f"unexpected shape ({type(exc).__name__})", ndjson=ndjson)


def error_message(obj: Any) -> str:
    """The human message of an error value: `{"message": ...}`, a string, or the JSON as text."""
    if isinstance(obj, dict):
        msg = obj.get("message") or obj.get("error") or obj.get("detail")
        if isinstance(msg, (dict, list)):
            return error_message(msg)
        if msg:
            return str(msg)
    elif isinstance(obj, list) and obj:
        return error_message(obj[0])
    return str(obj)


def load_payload(data: str | bytes, *, ndjson: bool = False) -> dict[str, Any] | StreamChunk:
    """One stream payload (an SSE `data:` payload; `ndjson`: one NDJSON line) as its JSON object, or the
    chunk that stands for it instead: SSE's `[DONE]` is the final chunk, a payload that is not a JSON
    object is malformed (`malformed stream chunk: ...` / `line: ...`), and an `{"error": ...}` object is
    an in-stream error (its message). Every parser starts here."""
    if not ndjson and data == "[DONE]":
        return StreamChunk(final=True)
    try:
        obj = loads_json(data)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return malformed_chunk(data, "not a JSON object", ndjson=ndjson)
    err = obj.get("error")
    if err is not None:
        return StreamChunk(error=error_message(err))
    return obj
