"""OpenAI-compatible stream chunks (chat and completions; vLLM, llama.cpp, SGLang, Ollama's /v1).

`OpenAIStreamParser().parse(data)` takes one SSE `data:` payload and returns a `StreamChunk`:
- `[DONE]` is final;
- chat: `choices[0].delta.content`, `reasoning_content` (or `reasoning`) and `tool_calls` are output;
  `{"role": "assistant"}` and `{"content": ""}` / `null` deltas are not. Reasoning comes as
  `reasoning_content` (SGLang, llama.cpp `--reasoning-format`, vLLM before its rename) or `reasoning`
  (vLLM now, which still mirrors it into `reasoning_content`; Ollama's /v1): docs/SIM.md names the
  source files read. A delta with reasoning only is reasoning; one with content or a tool call is answer;
- `usage.completion_tokens_details.reasoning_tokens` (OpenAI's API), when present, is the reasoning count;
- completions: `choices[0].text` is output;
- `usage` (the `choices: []` chunk from `stream_options.include_usage`, or on every chunk with vLLM's
  `continuous_usage_stats`) gives input/output/cached tokens; on an output chunk the rise of
  `completion_tokens` since the previous output chunk is that event's token count (counting from the
  previous output chunk, not the previous report, because servers differ on what the role-only chunk
  reports: vLLM says 0, others already count the first token there);
- llama.cpp's `timings` (`prompt_ms`, `predicted_ms`, `prompt_n`, `predicted_n`, `cache_n`) give server
  timings and, when no usage comes, the counts;
- `{"error": {...}}` / `{"error": "..."}` and vLLM's older `{"object": "error", "message": ...}` are
  in-stream errors; a payload that is not JSON is reported as an error too (a malformed chunk).
A chunk of the wrong shape or with a wrong-typed field (`events.parse_guarded`, `token_count`) is
malformed; a cumulative `completion_tokens` that goes down gives no per-event count for that event.
The parser keeps one integer of state (`completion_tokens` at the last output chunk), so use one per request.
"""

from __future__ import annotations

from typing import Any

from llmload.protocols.events import (
    MAX_TOKEN_COUNT,
    MalformedChunk,
    ServerTimings,
    StreamChunk,
    error_message,
    load_payload,
    malformed_chunk,
    text_field,
    token_count,
)

__all__ = ["OpenAIStreamParser", "error_message"]


def _ms(value: Any) -> float | None:
    if value is None:
        return None
    if value.__class__ in (int, float):
        return value / 1000.0
    raise MalformedChunk(f"timing {value!r}")


class OpenAIStreamParser:
    """One request's OpenAI stream: `parse(data) -> StreamChunk`."""

    __slots__ = ("_completion_tokens",)

    def __init__(self) -> None:
        self._completion_tokens = 0

    def parse(self, data: str) -> StreamChunk:
        # `events.parse_guarded`, inlined: this runs once per stream event
        obj = load_payload(data)
        if isinstance(obj, StreamChunk):
            return obj
        try:
            return self._read(obj)
        except MalformedChunk as exc:
            return malformed_chunk(data, str(exc))
        except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError) as exc:
            return malformed_chunk(data, f"unexpected shape ({type(exc).__name__})")

    def _read(self, obj: dict[str, Any]) -> StreamChunk:
        if obj.get("object") == "error":
            return StreamChunk(error=error_message(obj))

        chunk = StreamChunk()
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta is not None:
                content = delta.get("content")
                if content:
                    if content.__class__ is not str:
                        raise MalformedChunk(f"delta.content {content!r:.60}")
                    chunk.text = content
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:
                    chunk.reasoning = text_field(reasoning, "delta.reasoning") or ""
                calls = delta.get("tool_calls")
                if calls:
                    chunk.tool_call = True
                    chunk.text += "".join(text_field((c.get("function") or {}).get("arguments"),
                                                     "tool_calls.arguments") or "" for c in calls)
                    chunk.output = True
            else:
                text = choice.get("text")
                if text:
                    if text.__class__ is not str:
                        raise MalformedChunk(f"choices[0].text {text!r:.60}")
                    chunk.text = text
            if chunk.text or chunk.reasoning:
                chunk.output = True
            finish = choice.get("finish_reason")
            if finish is not None:
                chunk.finish_reason = text_field(finish, "finish_reason")

        usage = obj.get("usage")
        if usage:
            completion = usage.get("completion_tokens")
            if completion.__class__ is not int or not 0 <= completion <= MAX_TOKEN_COUNT:
                completion = token_count(completion)  # None, a whole float, or malformed
            prompt = usage.get("prompt_tokens")
            chunk.input_tokens = prompt if prompt.__class__ is int and 0 <= prompt <= MAX_TOKEN_COUNT \
                else token_count(prompt)
            chunk.output_tokens = completion
            details = usage.get("prompt_tokens_details")
            if details:
                chunk.cached_tokens = token_count(details.get("cached_tokens"))
            out_details = usage.get("completion_tokens_details")
            if isinstance(out_details, dict):
                chunk.reasoning_tokens = token_count(out_details.get("reasoning_tokens"))
            if completion is not None and chunk.output:
                rise = completion - self._completion_tokens
                chunk.tokens = rise if rise >= 0 else None  # a count that went down says nothing per event
                self._completion_tokens = completion

        timings = obj.get("timings")
        if timings:
            chunk.timings = ServerTimings(prompt_s=_ms(timings.get("prompt_ms")),
                                          decode_s=_ms(timings.get("predicted_ms")))
            prompt_n = token_count(timings.get("prompt_n"))
            cache_n = token_count(timings.get("cache_n"))
            if chunk.input_tokens is None and prompt_n is not None:
                chunk.input_tokens = min(prompt_n + (cache_n or 0), 2**31 - 1)
                if cache_n is not None:
                    chunk.cached_tokens = cache_n
            if chunk.output_tokens is None:
                chunk.output_tokens = token_count(timings.get("predicted_n"))
        return chunk
