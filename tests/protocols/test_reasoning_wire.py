"""Reasoning deltas in each server's own format, split at every byte: the reasoning is kept apart from
the answer, the first answer-bearing event is found (TTFA) and the reasoning tokens are counted.

The wire samples follow the servers' sources named in docs/SIM.md ("Reasoning fields"): vLLM's
`DeltaMessage` (`reasoning`, mirrored into the deprecated `reasoning_content`), SGLang's and llama.cpp's
`reasoning_content`, Ollama's /v1 `Delta.reasoning` and native `Message.thinking` / generate `thinking`.
"""

from __future__ import annotations

import json

import pytest

from llmload.apis import get_api
from llmload.client.core import _reasoning_tokens, _Stream
from llmload.records import Record

REASONING = ["Let", " me", " th\u00efnk", ","]  # a multi-byte character: split inside it too
ANSWER = ["The", " answer", " is", " 4"]


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _chat(delta: dict, *, usage: dict | None = None, finish: str | None = None, **extra) -> bytes:
    obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    if usage is not None:
        obj["usage"] = usage
    return _sse(obj)


def _usage(n: int) -> dict:
    return {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}


def vllm_body() -> bytes:
    """vLLM with continuous usage stats: both reasoning fields, a count on every chunk."""
    out = [_chat({"role": "assistant", "content": ""}, usage=_usage(0))]
    for i, piece in enumerate(REASONING, 1):
        out.append(_chat({"reasoning": piece, "reasoning_content": piece}, usage=_usage(i)))
    for i, piece in enumerate(ANSWER, len(REASONING) + 1):
        out.append(_chat({"content": piece}, usage=_usage(i), finish="length" if i == 8 else None))
    out.append(_sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [], "usage": _usage(8)}))
    return b"".join(out) + b"data: [DONE]\n\n"


def reasoning_content_body(flavor: str) -> bytes:
    """SGLang (vLLM-like chunks) or llama.cpp (`content: null` role chunk, `timings` at the end):
    `reasoning_content` deltas, then content, then the usage chunk."""
    role = {"role": "assistant", "content": "" if flavor == "sglang" else None}
    out = [_chat(role)]
    out += [_chat({"reasoning_content": p}) for p in REASONING]
    out += [_chat({"content": p}) for p in ANSWER]
    out.append(_chat({}, finish="length"))
    extra = {"timings": {"prompt_n": 10, "prompt_ms": 5.0, "predicted_n": 8, "predicted_ms": 80.0}} \
        if flavor == "llamacpp" else {}
    out.append(_sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [], "usage": _usage(8), **extra}))
    return b"".join(out) + b"data: [DONE]\n\n"


def ollama_v1_body() -> bytes:
    """Ollama's /v1: every delta says `role`; reasoning in `reasoning`; no usage (estimated counts)."""
    out = [_chat({"role": "assistant", "reasoning": p}) for p in REASONING]
    out += [_chat({"role": "assistant", "content": p}) for p in ANSWER]
    out.append(_chat({"role": "assistant", "content": ""}, finish="stop"))
    return b"".join(out) + b"data: [DONE]\n\n"


def openai_details_body() -> bytes:
    """The server counts reasoning itself (`usage.completion_tokens_details.reasoning_tokens`)."""
    out = [_chat({"role": "assistant", "reasoning_content": "".join(REASONING)})]
    out += [_chat({"content": "".join(ANSWER)})]
    usage = {**_usage(8), "completion_tokens_details": {"reasoning_tokens": 4}}
    out.append(_sse({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                     "usage": usage}))
    return b"".join(out) + b"data: [DONE]\n\n"


def ollama_native_body(chat: bool) -> bytes:
    """Ollama native NDJSON: `message.thinking` (chat) or `thinking` (generate), one token a line."""
    def line(text: str, thinking: str = "", **extra) -> bytes:
        obj: dict = {"model": "m", "created_at": "2025-01-01T00:00:00Z"}
        if chat:
            obj["message"] = {"role": "assistant", "content": text, **({"thinking": thinking} if thinking else {})}
        else:
            obj.update(response=text, **({"thinking": thinking} if thinking else {}))
        return json.dumps({**obj, **extra}, ensure_ascii=False).encode() + b"\n"

    out = [line("", p, done=False) for p in REASONING] + [line(p, done=False) for p in ANSWER]
    out.append(line("", done=True, done_reason="length", total_duration=10, prompt_eval_count=10,
                    eval_count=8))
    return b"".join(out)


CASES = {
    "vllm": ("openai-chat", vllm_body),
    "sglang": ("openai-chat", lambda: reasoning_content_body("sglang")),
    "llamacpp": ("openai-chat", lambda: reasoning_content_body("llamacpp")),
    "ollama-v1": ("openai-chat", ollama_v1_body),
    "openai-details": ("openai-chat", openai_details_body),
    "ollama-chat": ("ollama-chat", lambda: ollama_native_body(True)),
    "ollama-generate": ("ollama-generate", lambda: ollama_native_body(False)),
}


def _read(api: str, pieces: list[bytes]) -> tuple[_Stream, list]:
    """Feed `pieces` (one socket read each, stamped 0, 1, 2, ...) through the API's decoder into the
    client's stream state."""
    stream = _Stream(Record(request_id="r", step="s", worker="w", scheduled_at=0.0))
    decoder = get_api(api).decoder()
    chunks = []
    for t, piece in enumerate(pieces):
        for chunk in decoder.feed(piece):
            chunks.append(chunk)
            stream.apply(chunk, float(t))
    for chunk in decoder.flush():
        chunks.append(chunk)
        stream.apply(chunk, float(len(pieces)))
    return stream, chunks


def _check(stream: _Stream, chunks: list, *, answer_read: float | None = None) -> None:
    assert not [c.error for c in chunks if c.error]
    assert "".join(stream.reasoning) == "".join(REASONING)
    assert "".join(stream.texts) == "".join(ANSWER)
    assert stream.reasoning_events in (1, len(REASONING))
    assert _reasoning_tokens(stream, stream.output_tokens if stream.output_tokens is not None else 8) == 4
    if answer_read is not None:
        assert stream.record.first_answer_at == answer_read
        assert stream.record.first_token_at == answer_read - stream.reasoning_events  # reasoning came first


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_single_split(case: str) -> None:
    api, body_of = CASES[case]
    body = body_of()
    for i in range(len(body) + 1):
        stream, chunks = _read(api, [body[:i], body[i:]])
        _check(stream, chunks)
        assert stream.record.first_answer_at is not None


@pytest.mark.parametrize("case", sorted(CASES))
def test_byte_at_a_time_finds_the_first_answer_event(case: str) -> None:
    """One byte a read: the first answer event is stamped with the read that completed it, after
    every reasoning event's read."""
    api, body_of = CASES[case]
    body = body_of()
    stream, chunks = _read(api, [body[i:i + 1] for i in range(len(body))])
    _check(stream, chunks)
    sep = b"\n\n" if api == "openai-chat" else b"\n"
    events = [e + sep for e in body.split(sep) if e]
    first = _first_answer(events)
    completed_at = sum(len(e) for e in events[:first + 1]) - 1  # the event's last byte ends it
    assert stream.record.first_answer_at == float(completed_at)
    assert stream.record.first_token_at < stream.record.first_answer_at


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_event_a_read(case: str) -> None:
    """Each event its own read: the answer begins at the event after the reasoning ones."""
    api, body_of = CASES[case]
    sep = b"\n\n" if api == "openai-chat" else b"\n"
    events = [e + sep for e in body_of().split(sep) if e]
    stream, chunks = _read(api, events)
    _check(stream, chunks, answer_read=float(_first_answer(events)))


def _first_answer(events: list[bytes]) -> int:
    return next(i for i, e in enumerate(events) if b'"content": "The' in e or b'"response": "The' in e)


def test_reasoning_only_answer_has_no_first_answer() -> None:
    """A stream cut by max_tokens during reasoning: output, but no answer (TTFA unknown)."""
    body = b"".join(_chat({"reasoning_content": p}) for p in REASONING) + b"data: [DONE]\n\n"
    stream, _ = _read("openai-chat", [body])
    assert stream.times and stream.record.first_answer_at is None
    assert _reasoning_tokens(stream, 4) == 4


def test_no_reasoning_counts_zero_and_answer_is_first_token() -> None:
    body = b"".join(_chat({"content": p}) for p in ANSWER) + b"data: [DONE]\n\n"
    stream, _ = _read("openai-chat", [body[:40], body[40:]])
    assert stream.record.first_answer_at == stream.record.first_token_at is not None
    assert _reasoning_tokens(stream, 4) == 0
