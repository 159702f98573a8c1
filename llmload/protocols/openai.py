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
The parser keeps one integer of state (`completion_tokens` at the last output chunk), so use one per request.
"""

from __future__ import annotations

from llmload.protocols.events import ServerTimings, StreamChunk, error_message, load_payload

__all__ = ["OpenAIStreamParser", "error_message"]


class OpenAIStreamParser:
    """One request's OpenAI stream: `parse(data) -> StreamChunk`."""

    __slots__ = ("_completion_tokens",)

    def __init__(self) -> None:
        self._completion_tokens = 0

    def parse(self, data: str) -> StreamChunk:
        obj = load_payload(data)
        if isinstance(obj, StreamChunk):
            return obj
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
                    chunk.text = content
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:
                    chunk.reasoning = reasoning
                calls = delta.get("tool_calls")
                if calls:
                    chunk.text += "".join((c.get("function") or {}).get("arguments") or "" for c in calls)
                    chunk.output = True
            else:
                text = choice.get("text")
                if text:
                    chunk.text = text
            if chunk.text or chunk.reasoning:
                chunk.output = True
            chunk.finish_reason = choice.get("finish_reason")

        usage = obj.get("usage")
        if usage:
            completion = usage.get("completion_tokens")
            chunk.input_tokens = usage.get("prompt_tokens")
            chunk.output_tokens = completion
            details = usage.get("prompt_tokens_details")
            if details:
                chunk.cached_tokens = details.get("cached_tokens")
            out_details = usage.get("completion_tokens_details")
            if isinstance(out_details, dict) and isinstance(out_details.get("reasoning_tokens"), int):
                chunk.reasoning_tokens = out_details["reasoning_tokens"]
            if completion is not None and chunk.output:
                chunk.tokens = completion - self._completion_tokens
                self._completion_tokens = completion

        timings = obj.get("timings")
        if timings:
            prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
            chunk.timings = ServerTimings(
                prompt_s=prompt_ms / 1000.0 if prompt_ms is not None else None,
                decode_s=predicted_ms / 1000.0 if predicted_ms is not None else None)
            if chunk.input_tokens is None and timings.get("prompt_n") is not None:
                chunk.input_tokens = timings["prompt_n"] + (timings.get("cache_n") or 0)
                if timings.get("cache_n") is not None:
                    chunk.cached_tokens = timings["cache_n"]
            if chunk.output_tokens is None and timings.get("predicted_n") is not None:
                chunk.output_tokens = timings["predicted_n"]
        return chunk
