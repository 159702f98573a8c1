"""The typed result of reading one stream event, whatever the API.

Every per-API parser turns one event (an SSE `data:` payload or an NDJSON line) into one
`StreamChunk`. The streaming core only reads these fields, so adding an API means adding a parser.
`output` follows METRICS.md: true only when the event carries generated output (non-empty content,
reasoning, completion text, Ollama `response`/`thinking`, or a tool call); role-only deltas, empty
deltas, usage-only chunks and final objects without text are not output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:  # orjson is about 3x faster on stream chunks; optional
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

__all__ = ["ServerTimings", "StreamChunk", "error_message", "load_payload", "loads_json"]


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
        return StreamChunk(error=f"malformed stream {'line' if ndjson else 'chunk'}: {data[:120]!r}")
    err = obj.get("error")
    if err is not None:
        return StreamChunk(error=error_message(err))
    return obj
