"""Property: the OpenAI, Ollama and SGLang stream parsers take any JSON value in any field and return one
well-typed `StreamChunk`; no exception escapes (issue 33, item 11). The decoders cap a line at
MAX_LINE_BYTES and buffer an unfinished line in linear time (item 1)."""

from __future__ import annotations

import functools
import json
import time

import pytest

from llmload.apis.sglang_generate import SGLangGenerateParser
from llmload.protocols import (
    MAX_LINE_BYTES,
    MAX_TOKEN_COUNT,
    NDJSONDecoder,
    OllamaStreamParser,
    OpenAIStreamParser,
    SSEDecoder,
    StreamChunk,
    StreamDecoder,
)

#: the property tests' marker: hypothesis is imported inside them, so that collecting this module does not
#: import it (tests/conftest.py: `hypothesis` tests run on one xdist worker, the only one that pays for it)
property_test = pytest.mark.hypothesis


@functools.cache
def _json():
    """Any JSON value (a few leaves)."""
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                        max_leaves=8)


def _shaped(template):
    """`template` with any of its leaves (and sub-objects) replaced by arbitrary JSON."""
    from hypothesis import strategies as st

    if isinstance(template, dict):
        return st.fixed_dictionaries({k: st.one_of(_shaped(v), _json()) for k, v in template.items()})
    if isinstance(template, list):
        return st.one_of(st.lists(_shaped(template[0]), max_size=2), _json()) if template else _json()
    return st.one_of(st.just(template), _json())


_OPENAI = {"id": "x", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": "r",
                                              "tool_calls": [{"function": {"arguments": "{}"}}]},
                        "text": "t", "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}},
           "timings": {"prompt_ms": 1.0, "predicted_ms": 2.0, "prompt_n": 3, "predicted_n": 2, "cache_n": 0}}
_OLLAMA = {"model": "m", "message": {"role": "assistant", "content": "a", "thinking": "t",
                                     "tool_calls": [{"function": {"arguments": {}}}]},
           "response": "r", "thinking": "t", "done": True, "done_reason": "stop", "prompt_eval_count": 3,
           "eval_count": 2, "load_duration": 1, "prompt_eval_duration": 1, "eval_duration": 1, "total_duration": 4}
_SGLANG = {"text": "abc", "meta_info": {"id": "x", "finish_reason": {"type": "stop", "message": "m"},
                                        "prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": 0,
                                        "e2e_latency": 0.5}}


def _well_typed(chunk: StreamChunk) -> None:
    assert isinstance(chunk, StreamChunk)
    assert isinstance(chunk.text, str) and isinstance(chunk.reasoning, str)
    assert chunk.finish_reason is None or isinstance(chunk.finish_reason, str)
    for count in (chunk.tokens, chunk.input_tokens, chunk.output_tokens, chunk.cached_tokens):
        assert count is None or (type(count) is int and 0 <= count <= MAX_TOKEN_COUNT), count
    assert chunk.error is None or isinstance(chunk.error, str)
    if chunk.malformed:
        assert chunk.error and "malformed" in chunk.error


def _run(parser_factory, payloads, *, as_bytes: bool = False) -> None:
    parser = parser_factory()
    for payload in payloads:
        text = json.dumps(payload)
        _well_typed(parser.parse(text.encode() if as_bytes else text))


def _check_any_json(parser_factory, template: dict, *, as_bytes: bool = False) -> None:
    """100 examples: lists of 1-4 payloads, each `template` with any part replaced by any JSON, or any JSON."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.one_of(_shaped(template), _json()), min_size=1, max_size=4))
    def check(payloads) -> None:
        _run(parser_factory, payloads, as_bytes=as_bytes)

    check()


@property_test
def test_openai_parser_takes_any_json() -> None:
    _check_any_json(OpenAIStreamParser, _OPENAI)


@property_test
def test_ollama_parser_takes_any_json() -> None:
    _check_any_json(OllamaStreamParser, _OLLAMA, as_bytes=True)


@property_test
def test_sglang_parser_takes_any_json() -> None:
    _check_any_json(SGLangGenerateParser, _SGLANG)


def test_the_shapes_from_the_issue_are_malformed() -> None:
    p = OpenAIStreamParser()
    for payload in ({"choices": ["x"]}, {"choices": [{"delta": "str"}]},
                    {"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": "3"}},
                    {"choices": [], "usage": {"prompt_tokens": 2**70}},
                    {"choices": [{"delta": {"content": "a"}, "finish_reason": 7}]}):
        chunk = p.parse(json.dumps(payload))
        assert chunk.malformed and chunk.error.startswith("malformed stream chunk"), payload
    assert not p.parse(json.dumps({"choices": [{"delta": {"content": "a"}}]})).malformed
    assert OllamaStreamParser().parse(b'{"message": "x"}').malformed


def test_a_line_over_the_cap_is_malformed_in_both_framings() -> None:
    sse = StreamDecoder(ndjson=False)
    assert sse.feed(b"data: " + b"x" * 4096) == []
    out = []
    for _ in range(MAX_LINE_BYTES // 4096 + 1):
        out = sse.feed(b"x" * 4096)
        if out:
            break
    assert out and out[0].malformed and "longer than" in out[0].error
    ndjson = StreamDecoder(ndjson=True)
    out = ndjson.feed(b'{"response": "' + b"x" * (MAX_LINE_BYTES + 1))
    assert out and out[0].malformed
    # a complete line that is too long is refused as well
    assert StreamDecoder(ndjson=False).feed(b"data: " + b"x" * MAX_LINE_BYTES + b"\n\n")[0].malformed


def test_a_long_unfinished_line_costs_linear_time() -> None:
    """32 MiB in 4 KiB reads: a copy of the whole buffer per read would move 128 GiB."""
    piece = b"x" * 4096
    for decoder in (SSEDecoder(max_line_bytes=1 << 30), NDJSONDecoder(max_line_bytes=1 << 30)):
        started = time.process_time()
        decoder.feed(b"data: ")
        for _ in range(8192):
            assert decoder.feed(piece) == []
        events = decoder.feed(b"\n\n")
        assert time.process_time() - started < 10.0  # linear: well under a second; quadratic: minutes
        assert len(events) == 1 and len(events[0] if isinstance(events[0], bytes) else events[0].data) >= 32 << 20
