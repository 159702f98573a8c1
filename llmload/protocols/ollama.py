"""Ollama native NDJSON stream lines (`/api/chat`, `/api/generate`).

`OllamaStreamParser().parse(line)` takes one JSON line and returns a `StreamChunk`:
- `message.content` (chat) or `response` (generate) is answer text; `thinking` (either place) is
  reasoning; `message.tool_calls` is output (its arguments, as JSON, become the text);
- the object with `done: true` is final: `done_reason`, `prompt_eval_count` / `eval_count` as input /
  output tokens, and the integer-nanosecond `load_duration`, `prompt_eval_duration`, `eval_duration`,
  `total_duration` as server timings in seconds;
- `{"error": "..."}` is an error inside the 200 stream (Ollama reports failures after the headers so).
Ollama's Go structs drop zero values (`omitempty`): on the final object an absent duration or
`eval_count` means 0. With a cached prompt `prompt_eval_count` counts only the tokens it evaluated, and
is absent when that is 0: input_tokens is then left unknown (the client records the planned count,
flagged estimated) rather than 0. A line of the wrong shape or with a wrong-typed field is malformed
(`events.parse_guarded`).
"""

from __future__ import annotations

import json
from typing import Any

from llmload.protocols.events import ServerTimings, StreamChunk, parse_guarded, text_field, token_count

__all__ = ["OllamaStreamParser"]

_NS = 1e-9


def _seconds(value: object) -> float | None:
    return value * _NS if value.__class__ in (int, float) else None


class OllamaStreamParser:
    """One request's Ollama stream: `parse(line) -> StreamChunk`. Stateless; one per request anyway."""

    __slots__ = ()

    def parse(self, line: bytes | str) -> StreamChunk:
        return parse_guarded(_read, line, ndjson=True)


def _read(obj: dict[str, Any]) -> StreamChunk:
    chunk = StreamChunk()
    message = obj.get("message")
    if message is not None:
        content, thinking = message.get("content"), message.get("thinking")
        calls = message.get("tool_calls")
        if calls:
            chunk.tool_call = True
            chunk.text = json.dumps([(c.get("function") or {}).get("arguments") for c in calls])
    else:
        content, thinking = obj.get("response"), obj.get("thinking")
    if content:
        chunk.text = (text_field(content, "content") or "") + chunk.text
    if thinking:
        chunk.reasoning = text_field(thinking, "thinking") or ""
    chunk.output = bool(chunk.text or chunk.reasoning)

    if obj.get("done"):
        chunk.final = True
        chunk.finish_reason = text_field(obj.get("done_reason"), "done_reason")
        chunk.input_tokens = token_count(obj.get("prompt_eval_count"))
        chunk.output_tokens = token_count(obj.get("eval_count", 0))
        if "total_duration" in obj:  # Go's omitempty drops zero durations: absent means 0
            chunk.timings = ServerTimings(
                load_s=_seconds(obj.get("load_duration", 0)),
                prompt_s=_seconds(obj.get("prompt_eval_duration", 0)),
                decode_s=_seconds(obj.get("eval_duration", 0)),
                total_s=_seconds(obj["total_duration"]))
    return chunk
