"""SGLang `/generate` stream (llmload.apis.sglang_generate): cumulative text in, per-event new text out,
counts from `meta_info`, at every split of the body."""

from __future__ import annotations

import json

from llmload.apis import get_api
from llmload.apis.sglang_generate import SGLangGenerateParser


def event(text: str, n: int, finish: dict | None = None, **meta) -> bytes:
    info = {"id": "r1", "finish_reason": finish, "prompt_tokens": 7, "weight_version": "default",
            "total_retractions": 0, "completion_tokens": n, "cached_tokens": 3, **meta}
    return b"data: " + json.dumps({"text": text, "output_ids": list(range(n)), "meta_info": info},
                                  ensure_ascii=False).encode() + b"\n\n"


# as SGLang writes it: the whole answer so far in each event (here a held-back token: "é" needs 2)
BODY = (event("Hi", 1) + event("Hi", 2) + event("Hi \u00e9t\u00e9", 3) + event("Hi \u00e9t\u00e9!", 4)
        + event("Hi \u00e9t\u00e9! Bye", 5, {"type": "length", "length": 5}, e2e_latency=0.25)
        + b"data: [DONE]\n\n")


def test_cumulative_text_becomes_new_text_at_every_split() -> None:
    for i in range(len(BODY) + 1):
        dec = get_api("sglang-generate").decoder()
        chunks = dec.feed(BODY[:i]) + dec.feed(BODY[i:]) + dec.flush()
        assert [c.text for c in chunks] == ["Hi", "", " \u00e9t\u00e9", "!", " Bye", ""], i
        assert [c.output for c in chunks] == [True, False, True, True, True, False]
        # tokens per output event: the rise of completion_tokens since the previous output event
        assert [c.tokens for c in chunks if c.output] == [1, 2, 1, 1]
        last, done = chunks[-2], chunks[-1]
        assert (last.input_tokens, last.output_tokens, last.cached_tokens) == (7, 5, 3)
        assert last.finish_reason == "length" and last.timings.total_s == 0.25 and last.error is None
        assert done.final and not chunks[-2].final


def test_error_event_abort_and_malformed() -> None:
    p = SGLangGenerateParser()
    assert p.parse(json.dumps({"error": {"message": "The input (9000 tokens) is longer than the model's "
                                                    "context length (8192 tokens)."}})).error.startswith("The input")
    abort = p.parse(json.dumps({"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "x"},
                                                         "completion_tokens": 0}}))
    assert abort.error == "aborted: x" and abort.finish_reason == "abort" and not abort.output
    assert p.parse('{"text": "a').error.startswith("malformed stream chunk")
    assert p.parse("[1]").error.startswith("malformed stream chunk")


def test_stop_finish_and_incremental_servers() -> None:
    p = SGLangGenerateParser()
    c = p.parse(json.dumps({"text": "ab", "meta_info": {"finish_reason": {"type": "stop", "matched": 2},
                                                         "completion_tokens": 2}}))
    assert c.text == "ab" and c.finish_reason == "stop" and c.tokens == 2
    # `--incremental-streaming-output`: each text is an increment (it does not extend the text so far)
    q = SGLangGenerateParser()
    assert [q.parse(json.dumps({"text": t})).text for t in ("one", " two", " three")] == ["one", " two", " three"]
