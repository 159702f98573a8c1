"""Tool-call deltas at every chunk split: output-bearing events counted apart from the answer text.

Shapes as vLLM (`DeltaToolCall`: unset fields left out, the opening without `arguments`) and llama.cpp
(the opening with `arguments: ""`) stream them, and Ollama's whole call in one NDJSON line."""

from __future__ import annotations

import json

import pytest

from llmload.apis import get_api
from llmload.client.core import _event_tokens, _Stream
from llmload.records import Record
from llmload.tokens import count_tokens

ARGS = ['{"q": "', "caf\u00e9", " menu", '"}']


def _sse(delta: dict, finish: str | None = None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def openai_body(flavor: str) -> bytes:
    fn = {"name": "search"} if flavor == "vllm" else {"name": "search", "arguments": ""}
    out = [_sse({"role": "assistant", "content": ""}),
           _sse({"tool_calls": [{"id": "call_1", "type": "function", "index": 0, "function": fn}]})]
    out += [_sse({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in ARGS]
    out.append(_sse({}, finish="tool_calls"))
    return b"".join(out) + b"data: [DONE]\n\n"


def ollama_body() -> bytes:
    call = {"function": {"name": "search", "arguments": {"q": "caf\u00e9 menu"}}}
    lines = [{"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [call]}, "done": False},
             {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
              "total_duration": 1, "eval_count": 1}]
    return b"".join(json.dumps(x, ensure_ascii=False).encode() + b"\n" for x in lines)


CASES = {"vllm": ("openai-chat", lambda: openai_body("vllm"), 5),
         "llamacpp": ("openai-chat", lambda: openai_body("llamacpp"), 5),
         "ollama-chat": ("ollama-chat", ollama_body, 1)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tool_call_events_at_every_split(case: str) -> None:
    api, body_of, events = CASES[case]
    body = body_of()
    for i in range(len(body) + 1):
        stream = _Stream(Record(request_id="r", step="s", worker="w", scheduled_at=0.0))
        decoder = get_api(api).decoder()
        for t, piece in enumerate((body[:i], body[i:])):
            for chunk in decoder.feed(piece):
                assert chunk.error is None
                stream.apply(chunk, float(t))
        for chunk in decoder.flush():
            stream.apply(chunk, 2.0)
        assert stream.tool_events == events == len(stream.times)
        assert stream.record.first_answer_at == stream.record.first_token_at
        text = "".join(stream.tool_texts)
        if api == "openai-chat":
            assert json.loads(text) == {"q": "caf\u00e9 menu"}
        else:
            assert json.loads(text) == [{"q": "caf\u00e9 menu"}]
        # no usage (vLLM without include_usage, llama.cpp): the arguments counted; Ollama: its eval_count
        expected = events if stream.output_tokens is not None else count_tokens(text)
        assert _event_tokens(stream, stream.tool_events, 0, text, stream.output_tokens,
                             trust_counts=False) == expected
