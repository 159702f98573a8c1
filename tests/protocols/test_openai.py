"""OpenAI chunk interpretation: what counts as output, usage, continuous usage, timings, errors."""

from __future__ import annotations

import json

from llmload.apis import get_api
from llmload.protocols import OpenAIStreamParser, ServerTimings


def chat(delta: dict, finish: str | None = None, **extra) -> str:
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m",
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                       **extra})


def test_role_only_empty_and_null_deltas_are_not_output() -> None:
    p = OpenAIStreamParser()
    for delta in ({"role": "assistant", "content": ""}, {"role": "assistant", "content": None}, {},
                  {"content": ""}):
        chunk = p.parse(chat(delta))
        assert not chunk.output and chunk.text == "" and not chunk.final


def test_content_reasoning_and_tool_calls_are_output() -> None:
    p = OpenAIStreamParser()
    assert p.parse(chat({"content": "Hi"})).text == "Hi"
    r = p.parse(chat({"reasoning_content": "think"}))
    assert r.output and r.reasoning == "think" and r.text == ""
    t = p.parse(chat({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{\"x\":"}}]}))
    assert t.output and t.text == '{"x":'


def test_usage_chunk_with_empty_choices_and_cached_tokens() -> None:
    c = OpenAIStreamParser().parse(json.dumps({"choices": [], "usage": {
        "prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 8}}}))
    assert not c.output
    assert (c.input_tokens, c.output_tokens, c.cached_tokens) == (12, 5, 8)
    assert c.tokens is None


def test_continuous_usage_gives_tokens_per_event() -> None:
    p = OpenAIStreamParser()
    role = p.parse(chat({"role": "assistant", "content": ""},
                        usage={"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4}))
    assert role.tokens is None
    one = p.parse(chat({"content": "a"}, usage={"prompt_tokens": 4, "completion_tokens": 1}))
    three = p.parse(chat({"content": "bcd"}, usage={"prompt_tokens": 4, "completion_tokens": 4}))
    assert (one.tokens, three.tokens) == (1, 3)
    finish = p.parse(chat({"content": ""}, "length", usage={"prompt_tokens": 4, "completion_tokens": 4}))
    assert finish.finish_reason == "length" and not finish.output


def test_role_chunk_that_already_counts_a_token_does_not_steal_it() -> None:
    p = OpenAIStreamParser()
    p.parse(chat({"role": "assistant", "content": ""}, usage={"prompt_tokens": 4, "completion_tokens": 1}))
    assert p.parse(chat({"content": "a"}, usage={"prompt_tokens": 4, "completion_tokens": 1})).tokens == 1
    assert p.parse(chat({"content": "b"}, usage={"prompt_tokens": 4, "completion_tokens": 2})).tokens == 1


def test_completions_text() -> None:
    c = OpenAIStreamParser().parse(json.dumps({"object": "text_completion",
                                               "choices": [{"index": 0, "text": " yes", "finish_reason": None}]}))
    assert c.output and c.text == " yes"


def test_llamacpp_timings_fill_counts_and_server_times() -> None:
    c = OpenAIStreamParser().parse(chat({}, "stop", timings={
        "prompt_n": 30, "cache_n": 5, "prompt_ms": 40.0, "predicted_n": 16, "predicted_ms": 250.0}))
    assert c.timings == ServerTimings(prompt_s=0.04, decode_s=0.25)
    assert (c.input_tokens, c.output_tokens, c.cached_tokens) == (35, 16, 5)


def test_done_errors_and_malformed() -> None:
    p = OpenAIStreamParser()
    assert p.parse("[DONE]").final
    assert p.parse('{"error": {"message": "CUDA out of memory", "type": "x", "code": 500}}').error \
        == "CUDA out of memory"
    assert p.parse('{"object": "error", "message": "bad", "code": 400}').error == "bad"
    assert p.parse('{"error": "plain"}').error == "plain"
    assert p.parse('{"choices": [{"delta": {"content"').error.startswith("malformed stream chunk")
    assert p.parse("[1, 2]").error.startswith("malformed")


def test_stream_decoder_end_to_end_with_llamacpp_error_event() -> None:
    body = (b": ping\n\n"
            b"data: " + chat({"role": "assistant", "content": None}).encode() + b"\n\n"
            b"data: " + chat({"content": "Hel"}).encode() + b"\n\n"
            b"event: other\ndata: ignored\n\n"
            b'error: {"code": 500, "message": "slot died", "type": "server_error"}\n\n')
    dec = get_api("openai-chat").decoder()
    chunks = [c for i in range(len(body)) for c in dec.feed(body[i:i + 1])] + dec.flush()
    assert [c.output for c in chunks] == [False, True, False]
    assert chunks[-1].error == "slot died"


def test_stream_decoder_event_at_a_time_as_socket_reads_bring_them() -> None:
    # whole `data:` events (the decoder's fast path) give the same chunks as the bytes one at a time,
    # an event name or data line pending from an earlier read is kept, and after a non-UTF-8 line every
    # feed reports it, as in the general path
    body = (b": ping\n\n"
            b"data: " + chat({"role": "assistant", "content": None}).encode() + b"\n\n"
            b"data: " + chat({"content": "Hel"}).encode() + b"\n\n"
            b"event: other\n" + b"data: " + chat({"content": "no"}).encode() + b"\n\n"
            b"data: " + chat({"content": "lo"}).encode() + b"\n\n"
            b"data: [DONE]\n\n")
    reads = [part + b"\n\n" for part in body.split(b"\n\n")[:-1]]
    reads[3:4] = [b"event: other\n", reads[3][len(b"event: other\n"):]]
    for feeds in (reads, [body[i:i + 1] for i in range(len(body))]):
        dec = get_api("openai-chat").decoder()
        chunks = [c for part in feeds for c in dec.feed(part)] + dec.flush()
        assert [c.text for c in chunks] == ["", "Hel", "lo", ""] and chunks[-1].final
    dec = get_api("openai-chat").decoder()
    assert dec.feed(b": hi\n\n") == [] and dec.feed(b"data: \xff\n\n")[0].error.startswith("malformed")
    assert dec.feed(b"data: " + chat({"content": "x"}).encode() + b"\n\n")[0].error.startswith("malformed")
