"""SGLang native generate: `POST /generate`, SSE with cumulative text.

Read from SGLang's source (commits recorded in docs/SIM.md): `entrypoints/http_server.py`
`generate_request` streams `data: <json>\\n\\n` per output of `TokenizerManager.generate_request`, an
`{"error": {"message": ...}}` event for a ValueError, and always ends with `data: [DONE]`. Each object
is `{"text", "output_ids", "meta_info"}`; `text` is the whole answer so far (`state.text +=
output_strs[i]`; only `--incremental-streaming-output` servers send increments), `meta_info` has `id`,
`finish_reason` (null until the end, then `{"type": "length"|"stop"|"abort", ...}`), `prompt_tokens`,
`completion_tokens` and `cached_tokens` (so far), and `e2e_latency` (seconds) on the last object.

The body is `GenerateReqInput`: `text`, `sampling_params` (`max_new_tokens`, `temperature`,
`ignore_eos`) and `stream: true`; it has no `model` field (the server serves one model). `ignore_eos`
is native here, so it is sent whenever `requests.ignore_eos` asks, whatever `target.server` says.

The parser turns cumulative text into each event's new text (output only when there is some, as
METRICS.md counts output-bearing events); when an object's text does not extend the text so far it is
taken as an increment (an `--incremental-streaming-output` server). Tokens per event are the rise of
`completion_tokens` since the previous output event (a token the detokenizer held back counts with the
next text). Counts that are not whole numbers in range make the chunk malformed
(`llmload.protocols.events.token_count`). `finish_reason` `abort` is an error (its message). `e2e_latency` is the server's total time.
"""

from __future__ import annotations

from llmload.apis.spec import ApiSpec
from llmload.protocols.events import ServerTimings, StreamChunk, parse_guarded, token_count

__all__ = ["SPEC", "SGLangGenerateParser", "build"]


def build(*, messages: list[dict], prompt: str, model: str, max_tokens: int, temperature: float,
          ignore_eos: bool, server: str | None, reasoning_effort: str | None = None) -> dict:
    """The `/generate` body; it has no reasoning effort (the native API takes no chat template
    arguments), so `reasoning_effort` is not sent."""
    params: dict = {"max_new_tokens": max_tokens, "temperature": temperature}
    if ignore_eos:
        params["ignore_eos"] = True
    return {"text": prompt, "sampling_params": params, "stream": True}


class SGLangGenerateParser:
    """One request's `/generate` stream: `parse(data) -> StreamChunk` (keeps the text so far)."""

    __slots__ = ("_text", "_completion_tokens")

    def __init__(self) -> None:
        self._text = ""
        self._completion_tokens = 0

    def parse(self, data: str) -> StreamChunk:
        return parse_guarded(self._read, data)

    def _read(self, obj: dict) -> StreamChunk:
        chunk = StreamChunk()
        text = obj.get("text")
        if isinstance(text, str) and text:
            seen = self._text
            if text.startswith(seen):
                new = text[len(seen):]
                self._text = text
            else:  # an increment (incremental streaming output)
                new = text
                self._text = seen + text
            if new:
                chunk.text = new
                chunk.output = True
        meta = obj.get("meta_info")
        if isinstance(meta, dict):
            completion = token_count(meta.get("completion_tokens"))
            chunk.input_tokens = token_count(meta.get("prompt_tokens"))
            chunk.output_tokens = completion
            chunk.cached_tokens = token_count(meta.get("cached_tokens"))
            if completion is not None and chunk.output:
                rise = completion - self._completion_tokens
                chunk.tokens = rise if rise >= 0 else None
                self._completion_tokens = completion
            finish = meta.get("finish_reason")
            if isinstance(finish, dict):
                if finish.get("type") == "abort":
                    chunk.error = f"aborted: {finish.get('message') or 'the server aborted the request'}"
                chunk.finish_reason = str(finish.get("type"))
            elif finish is not None:
                chunk.finish_reason = str(finish)
            total = meta.get("e2e_latency")
            if isinstance(total, (int, float)):
                chunk.timings = ServerTimings(total_s=float(total))
        return chunk


SPEC = ApiSpec(
    name="sglang-generate", path="/generate", build=build, framing="sse", parser=SGLangGenerateParser,
    chat=False, probe_path="/v1/models", tokenize_path="/tokenize",
    usage="`meta_info.prompt_tokens` / `completion_tokens` / `cached_tokens` on every event",
    timings="`meta_info.e2e_latency` (server total) on the last event",
    servers=("sglang",), sim_flavors=("sglang",), names_model=False)
