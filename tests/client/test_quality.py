"""Answer checks (pure) and quality cases run through the streaming core against the sim."""

from __future__ import annotations

import pytest
from client_helpers import sim_target

from llmload.client import (
    Transport,
    calibrate_tokens_per_word,
    case_request,
    check_answer,
    quality_failure,
    run_quality_cases,
    send,
)
from llmload.clock import now
from llmload.config import Expect, Quality
from llmload.records import Record


@pytest.mark.parametrize(("text", "expect", "passed"), [
    ("The answer is 4.", {"contains": "4"}, True),
    ("The answer is four.", {"contains": "4"}, False),
    ("id: AB-123", {"regex": r"[A-Z]{2}-\d+"}, True),
    ("id: ab-123", {"regex": r"^[A-Z]{2}-\d+$"}, False),
    ("  yes\n", {"exact": "yes"}, True),
    ("yes.", {"exact": "yes"}, False),
    ('```json\n{"n": 4}\n```', {"json_schema": {"type": "object", "required": ["n"]}}, True),
    ('{"n": "4"}', {"json_schema": {"properties": {"n": {"type": "integer"}}}}, False),
    ("not json", {"json_schema": {"type": "object"}}, False),
])
def test_check_answer(text: str, expect: dict, passed: bool) -> None:
    ok, reason = check_answer(text, Expect(**expect))
    assert ok is passed
    assert (reason == "") is passed and "\n" not in reason


@pytest.mark.slow
def test_quality_cases_before_and_under_load(sim_factory) -> None:
    sim = sim_factory(flavor="vllm", config={"load_time_s": 0.0})
    target = sim_target(sim.url, "openai-chat", "vllm")
    quality = Quality(cases=[
        {"prompt": "What is 2+2? Answer with a number.", "expect": {"contains": "4"}, "max_tokens": 4},
        {"messages": [{"role": "user", "content": "Say hi"}], "expect": {"regex": "^hello$"}, "max_tokens": 3},
    ])
    transport = Transport.from_target(target)
    results = run_quality_cases(quality, target, transport)
    assert [r.passed for r in results] == [True, False]
    assert results[0].answer.startswith("4") and results[0].ttft_s > 0 and results[0].e2e_s >= results[0].ttft_s
    assert results[1].outcome == "quality_fail"
    assert quality_failure(results) == ("quality case 1 failed: answer does not match /^hello$/ "
                                        f"(answer: {results[1].answer!r})")
    assert quality_failure(results[:1]) is None

    # under load: the runtime passes a sampled case's expectation to send()
    case = quality.cases[1]
    record = Record(request_id="q-load", step="s0", worker="w0", scheduled_at=now())
    result = send(transport, case_request(case, target, "q-load"), record, expect=case.expect)
    assert record.outcome == "quality_fail" and record.quality_checked and result.text
    assert "hello" in record.error and result.text not in record.to_json()
    transport.close()


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["vllm", "llamacpp", "ollama"])
def test_tokenize_calibration(sim_factory, flavor: str) -> None:
    sim = sim_factory(flavor=flavor, config={"load_time_s": 0.0})
    ratio = calibrate_tokens_per_word(sim.url, server=flavor, model="sim-model")
    assert ratio == (None if flavor == "ollama" else 1.0)  # one sim token per synthesised word
