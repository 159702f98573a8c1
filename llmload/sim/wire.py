"""Stream events and bodies as each real server writes them, one renderer per (flavour, endpoint).

OpenAI-compatible SSE (`data: {...}\\n\\n`, ending `data: [DONE]`):
- vLLM chat: a role-only first delta `{"role":"assistant","content":""}`, one content delta per token, the
  last one carrying `finish_reason`; then a usage chunk with `choices: []` only when
  `stream_options.include_usage`; `continuous_usage_stats` adds `usage` to every chunk.
- llama.cpp chat: first delta `{"role":"assistant","content":null}`, content deltas, a finish chunk with
  `delta: {}` and `timings`, the usage chunk only with `include_usage`.
- Ollama chat: every delta says `role`; a finish chunk with empty content.
Completions use `text` instead of `delta`. Ollama native is NDJSON with integer-nanosecond durations;
llama.cpp `/completion` is SSE without `[DONE]`, with `timings` on the `stop: true` event.
SGLang's OpenAI endpoints are rendered as vLLM's; its native `/generate` is SSE with the whole answer so
far in `text` and the counts in `meta_info` on every event, ending `data: [DONE]` (docs/SIM.md).

Reasoning (`Exchange.reasoning` > 0, the sim's `reasoning_tokens`): the first tokens of a chat answer are
reasoning, each in its server's own field (docs/SIM.md names the sources): vLLM `delta.reasoning`, which
it mirrors into the deprecated `delta.reasoning_content`; SGLang and llama.cpp `delta.reasoning_content`;
Ollama's /v1 `delta.reasoning`; Ollama native `message.thinking` (chat) or `thinking` (generate), with an
empty `content` / `response`. The answer's own tokens then follow, counted from its first.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from llmload.clock import now
from llmload.sim.text import AnswerText

__all__ = ["Exchange", "Renderer", "renderer_for", "rfc3339"]

#: flavours whose OpenAI-compatible streams are written as vLLM writes them
_VLLM_LIKE = ("vllm", "sglang")
#: the chat delta field of a reasoning token, per flavour (module docstring)
_REASONING_FIELD = {"vllm": "reasoning", "sglang": "reasoning_content", "llamacpp": "reasoning_content",
                    "ollama": "reasoning"}


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(t: float) -> str:
    """Go's RFC 3339 with nanoseconds, as Ollama writes `created_at`."""
    dt = datetime.fromtimestamp(t, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((t % 1) * 1e9):09d}Z"


@dataclass(slots=True)
class Exchange:
    """Per-request facts the renderers need (times are wall seconds)."""

    flavor: str
    kind: str  # chat | completions | ollama_chat | ollama_generate | llamacpp_completion
    model: str
    completion_id: str
    prompt_tokens: int
    answer: AnswerText
    stream: bool = True
    include_usage: bool = False
    continuous_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    received_at: float = 0.0
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    load_s: float = 0.0
    sent: int = 0  # tokens written so far
    stop_reason: str | None = None  # vLLM: the stop string that ended the answer
    n_predict: int = -1  # the output cap the request asked for (-1: none)
    sent_planned: int = 0  # the tokens this answer will have (its draws), for a tool call's closing
    reasoning: int = 0  # the first this many output tokens are reasoning (chat kinds only)
    tool: str | None = None  # chat with tools: the answer is a call of this function (finish `tool_calls`)

    def piece(self, k: int) -> tuple[str, str]:
        """Token k as streamed: ("reasoning" or "answer", its text); the answer counts from its first."""
        if k < self.reasoning:
            return "reasoning", self.answer.delta(k)
        return "answer", self.answer.delta(k - self.reasoning)

    def answer_text(self, n: int) -> str:
        """The answer part of the first n tokens."""
        return self.answer.text(max(0, n - self.reasoning))

    def reasoning_text(self, n: int) -> str:
        return self.answer.text(min(n, self.reasoning))

    def usage(self, completion_tokens: int | None = None) -> dict:
        n = self.sent if completion_tokens is None else completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + n,
                "completion_tokens": n}

    def timings(self) -> dict:
        """llama.cpp's `timings` object."""
        prompt_ms = ((self.first_token_at or 0) - (self.admitted_at or 0)) * 1000 if self.first_token_at else 0.0
        predicted_ms = ((self.last_token_at or 0) - (self.first_token_at or 0)) * 1000 if self.sent else 0.0
        p, n = self.prompt_tokens, self.sent
        return {"cache_n": 0, "prompt_n": p, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / p if p else 0.0,
                "prompt_per_second": p / prompt_ms * 1000 if prompt_ms > 0 else 0.0,
                "predicted_n": n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / n if n else 0.0,
                "predicted_per_second": n / predicted_ms * 1000 if predicted_ms > 0 else 0.0}

    def ollama_durations(self, finished_at: float) -> dict:
        """Ollama's final-object counters and integer-nanosecond durations."""
        first = self.first_token_at or finished_at
        admitted = self.admitted_at or first
        return {"total_duration": int((finished_at - self.received_at) * 1e9),
                "load_duration": int(self.load_s * 1e9),
                "prompt_eval_count": self.prompt_tokens,
                "prompt_eval_duration": int((first - admitted) * 1e9),
                "eval_count": self.sent,
                "eval_duration": int(((self.last_token_at or first) - first) * 1e9)}


class Renderer:
    """Events of one endpoint. Subclasses fill in the shapes; each method returns whole events."""

    content_type = "text/event-stream; charset=utf-8"
    done = b"data: [DONE]\n\n"

    def sse(self, obj: object) -> bytes:
        return b"data: " + _dumps(obj) + b"\n\n"

    def before_first(self, ex: Exchange) -> list[bytes]:
        return []

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        raise NotImplementedError

    def finish(self, ex: Exchange, reason: str, finished_at: float) -> list[bytes]:
        return [self.done]

    def error_event(self, ex: Exchange, message: str, code: int = 500) -> bytes:
        return self.sse({"error": {"message": message, "type": "InternalServerError", "param": None,
                                   "code": code}})

    def malformed(self, ex: Exchange) -> bytes:
        return b'data: {"id":"' + ex.completion_id.encode() + b'","choices":[{"delta":{"content":"\n\n'

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        raise NotImplementedError


class OpenAIChat(Renderer):
    #: the `object` of a stream chunk
    chunk_object = "chat.completion.chunk"

    def _usage_and_done(self, ex: Exchange) -> list[bytes]:
        """The stream's end: the `choices: []` usage chunk when `stream_options.include_usage` asks for it
        (llama.cpp: with its `timings`), then `[DONE]`."""
        if not ex.include_usage:
            return [self.done]
        obj = {"id": ex.completion_id, "object": self.chunk_object, "created": ex.created,
               "model": ex.model, "choices": [], "usage": ex.usage()}
        if ex.flavor == "llamacpp":
            obj["timings"] = ex.timings()
        return [self.sse(obj), self.done]

    def _chunk(self, ex: Exchange, delta: dict, finish: str | None, **extra) -> dict:
        if ex.flavor in _VLLM_LIKE:  # vLLM dumps set fields only: stop_reason comes with the finish
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = ex.stop_reason if finish == "stop" else None
        else:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = {"id": ex.completion_id, "object": self.chunk_object, "created": ex.created,
               "model": ex.model, "choices": [choice]}
        if ex.flavor not in _VLLM_LIKE:
            obj["system_fingerprint"] = "fp_ollama" if ex.flavor == "ollama" else "b6500-llmload-sim"
        if ex.continuous_usage:
            obj["usage"] = ex.usage()
        obj.update(extra)
        return obj

    def before_first(self, ex: Exchange) -> list[bytes]:
        if ex.flavor == "ollama":
            return []
        role = {"role": "assistant", "content": "" if ex.flavor in _VLLM_LIKE else None}
        return [self.sse(self._chunk(ex, role, None))]

    def _tool_delta(self, ex: Exchange, j: int) -> dict:
        """Answer token j of a tool call: the call's opening (id, type, name) at 0, then one token of
        its JSON arguments per event (`{"q": "w1 w2 ... wn"}`), in the flavour's shape: vLLM and SGLang
        leave unset fields out (the opening has no `arguments`), llama.cpp opens with `arguments: ""`."""
        n = max(1, ex.sent_planned - ex.reasoning)
        if j == 0:
            fn: dict = {"name": ex.tool}
            if n == 1:
                fn["arguments"] = "{}"
            elif ex.flavor not in _VLLM_LIKE:
                fn["arguments"] = ""
            call = {"index": 0, "id": "call_" + ex.completion_id[-24:], "type": "function", "function": fn}
            if ex.flavor in _VLLM_LIKE:
                call = {"id": call["id"], "type": "function", "index": 0, "function": fn}
            return {"tool_calls": [call]}
        word = ex.answer.delta(j).strip()
        piece = ('{"q": "' if j == 1 else " ") + word + ('"}' if j == n - 1 else "")
        return {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        kind, text = ex.piece(k)
        if finish is not None and ex.tool:
            finish = "tool_calls"
        if kind == "answer" and ex.tool:
            delta = self._tool_delta(ex, k - ex.reasoning)
        elif kind == "answer":
            delta = {"content": text}
        elif ex.flavor == "vllm":  # DeltaMessage copies `reasoning` into the deprecated field
            delta = {"reasoning": text, "reasoning_content": text}
        else:
            delta = {_REASONING_FIELD[ex.flavor]: text}
        if ex.flavor == "ollama":
            delta = {"role": "assistant", **delta}
        if ex.flavor in _VLLM_LIKE:
            return [self.sse(self._chunk(ex, delta, finish))]
        return [self.sse(self._chunk(ex, delta, None))]

    def finish(self, ex: Exchange, reason: str, finished_at: float) -> list[bytes]:
        out = []
        if ex.tool:
            reason = "tool_calls"
        # llama.cpp (server-context.cpp, to_json_oaicompat_chat_stream): `timings` ride on the usage
        # chunk when include_usage asks for one, else on the finish chunk
        if ex.flavor == "llamacpp":
            extra = {} if ex.include_usage else {"timings": ex.timings()}
            out.append(self.sse(self._chunk(ex, {}, reason, **extra)))
        elif ex.flavor == "ollama":
            out.append(self.sse(self._chunk(ex, {"role": "assistant", "content": ""}, reason)))
        return out + self._usage_and_done(ex)

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        message = {"role": "assistant", "content": ex.answer_text(ex.sent)}
        if ex.reasoning:
            message[_REASONING_FIELD[ex.flavor]] = ex.reasoning_text(ex.sent)
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
        obj = {"id": ex.completion_id, "object": "chat.completion", "created": ex.created,
               "model": ex.model, "choices": [choice], "usage": ex.usage()}
        if ex.flavor == "llamacpp":
            obj["timings"] = ex.timings()
        return obj


class OpenAICompletions(OpenAIChat):
    chunk_object = "text_completion"

    def _text_chunk(self, ex: Exchange, text: str, finish: str | None, **extra) -> dict:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        if ex.flavor in _VLLM_LIKE:
            choice["stop_reason"] = ex.stop_reason if finish == "stop" else None
        obj = {"id": ex.completion_id, "object": self.chunk_object, "created": ex.created,
               "model": ex.model, "choices": [choice]}
        if ex.continuous_usage:
            obj["usage"] = ex.usage()
        obj.update(extra)
        return obj

    def before_first(self, ex: Exchange) -> list[bytes]:
        return []

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        return [self.sse(self._text_chunk(ex, ex.answer.delta(k), finish if ex.flavor in _VLLM_LIKE else None))]

    def finish(self, ex: Exchange, reason: str, finished_at: float) -> list[bytes]:
        out = []
        if ex.flavor not in _VLLM_LIKE:  # llama.cpp: timings on the usage chunk when there is one (as chat)
            extra = {"timings": ex.timings()} if ex.flavor == "llamacpp" and not ex.include_usage else {}
            out.append(self.sse(self._text_chunk(ex, "", reason, **extra)))
        return out + self._usage_and_done(ex)

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        choice = {"index": 0, "text": ex.answer.text(ex.sent), "logprobs": None, "finish_reason": reason}
        return {"id": ex.completion_id, "object": "text_completion", "created": ex.created,
                "model": ex.model, "choices": [choice], "usage": ex.usage()}


class OllamaNative(Renderer):
    """`/api/chat` and `/api/generate`: NDJSON, `{"error": ...}` lines for in-stream errors."""

    content_type = "application/x-ndjson"

    def __init__(self, chat: bool) -> None:
        self.chat = chat

    def _line(self, obj: object) -> bytes:
        return _dumps(obj) + b"\n"

    def _piece(self, ex: Exchange, text: str, at: float, thinking: str = "") -> dict:
        obj: dict = {"model": ex.model, "created_at": rfc3339(at)}
        if self.chat:
            obj["message"] = {"role": "assistant", "content": text}
            if thinking:
                obj["message"]["thinking"] = thinking
        else:
            obj["response"] = text
            if thinking:
                obj["thinking"] = thinking
        return obj

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        kind, text = ex.piece(k)
        piece = self._piece(ex, text, time.time()) if kind == "answer" else \
            self._piece(ex, "", time.time(), thinking=text)
        return [self._line({**piece, "done": False})]

    def _final(self, ex: Exchange, text: str, reason: str, finished_at: float, thinking: str = "") -> dict:
        obj = {**self._piece(ex, text, time.time(), thinking), "done": True, "done_reason": reason}
        if not self.chat:
            obj["context"] = list(range(1, min(ex.prompt_tokens + ex.sent, 64) + 1))
        obj.update(ex.ollama_durations(finished_at))
        return obj

    def finish(self, ex: Exchange, reason: str, finished_at: float) -> list[bytes]:
        return [self._line(self._final(ex, "", reason, finished_at))]

    def error_event(self, ex: Exchange, message: str, code: int = 500) -> bytes:
        return self._line({"error": message})

    def malformed(self, ex: Exchange) -> bytes:
        return b'{"model":"' + ex.model.encode() + b'","created_at":"2024-\n'

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        return self._final(ex, ex.answer_text(ex.sent), reason, finished_at, ex.reasoning_text(ex.sent))


class LlamaCppCompletion(Renderer):
    """llama.cpp's native `/completion` (SSE without `[DONE]`)."""

    def _event(self, ex: Exchange, text: str, stop: bool) -> dict:
        return {"index": 0, "content": text, "tokens": [], "stop": stop, "id_slot": 0,
                "tokens_predicted": ex.sent, "tokens_evaluated": ex.prompt_tokens}

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        return [self.sse(self._event(ex, ex.answer.delta(k), False))]

    def _final(self, ex: Exchange, text: str, reason: str) -> dict:
        obj = self._event(ex, text, True)
        obj.update({"model": ex.model, "stop_type": "limit" if reason == "length" else "eos",
                    "stopping_word": "", "truncated": False, "has_new_line": False,
                    "tokens_cached": ex.prompt_tokens + ex.sent, "timings": ex.timings()})
        return obj

    def finish(self, ex: Exchange, reason: str, finished_at: float) -> list[bytes]:
        return [self.sse(self._final(ex, "", reason))]

    def error_event(self, ex: Exchange, message: str, code: int = 500) -> bytes:
        return self.sse({"error": {"code": code, "message": message, "type": "server_error"}})

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        return self._final(ex, ex.answer.text(ex.sent), reason)


class SGLangGenerate(Renderer):
    """SGLang's native `/generate` (`entrypoints/http_server.py` `generate_request`): one
    `data: {"text", "output_ids", "meta_info"}` event per token with the whole answer so far (SGLang's
    default, without `--incremental-streaming-output`), `finish_reason` and `e2e_latency` on the last
    one, then `data: [DONE]`. `output_ids` are placeholders (the sim has no vocabulary)."""

    def __init__(self) -> None:
        self._text: list[str] = []

    def _meta(self, ex: Exchange, n: int, reason: str | None) -> dict:
        meta: dict = {"id": ex.completion_id, "finish_reason": None, "prompt_tokens": ex.prompt_tokens,
                      "weight_version": "default", "total_retractions": 0, "completion_tokens": n,
                      "cached_tokens": 0}
        if reason is not None:  # schedule_batch.py FINISH_LENGTH / FINISH_MATCHED_TOKEN `to_json()`
            meta["finish_reason"] = {"type": "length", "length": n} if reason == "length" else \
                {"type": "stop", "matched": 2}
            meta["e2e_latency"] = now() - ex.received_at
        return meta

    def token(self, ex: Exchange, k: int, finish: str | None) -> list[bytes]:
        if len(self._text) != k:
            self._text = [ex.answer.text(k)]
        self._text.append(ex.answer.delta(k))
        return [self.sse({"text": "".join(self._text), "output_ids": list(range(1, k + 2)),
                          "meta_info": self._meta(ex, k + 1, finish)})]

    def error_event(self, ex: Exchange, message: str, code: int = 500) -> bytes:
        return self.sse({"error": {"message": message}})

    def malformed(self, ex: Exchange) -> bytes:
        return b'data: {"text":"' + ex.answer.text(ex.sent).encode() + b'\n\n'

    def body(self, ex: Exchange, reason: str, finished_at: float) -> dict:
        return {"text": ex.answer.text(ex.sent), "output_ids": list(range(1, ex.sent + 1)),
                "meta_info": self._meta(ex, ex.sent, reason)}


def renderer_for(kind: str) -> Renderer:
    """The renderer of an endpoint kind."""
    return {"chat": OpenAIChat, "completions": OpenAICompletions,
            "ollama_chat": lambda: OllamaNative(chat=True), "ollama_generate": lambda: OllamaNative(chat=False),
            "llamacpp_completion": LlamaCppCompletion, "sglang_generate": SGLangGenerate}[kind]()
