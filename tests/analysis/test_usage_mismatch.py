"""A server that did not do the work asked (issue 44 item 2): answers far over `max_tokens`, a prompt
count far from the planned input, or a token count llmload did not believe are each a usage mismatch:
counted per step and run in summary.json (`usage_mismatch`), named in a warning per step, and failed
by `slo.max_usage_mismatch_ratio` when set (METRICS.md "Usage mismatch")."""

from __future__ import annotations

import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from llmload.config import SLO


def _rows(*, over: int = 0, input_off: int = 0, disbelieved: int = 0, n: int = 20) -> list[dict]:
    rows = []
    for i in range(n):
        row = request(f"r{i}", "s", i * 0.5, out=16, planned_out=16)
        row["planned_input_tokens"] = 100  # request() gives input_tokens 100
        if i < over:  # 3,000 tokens streamed for max_tokens 16
            row.update(request(f"r{i}", "s", i * 0.5, out=3000, planned_out=16), planned_input_tokens=100)
        elif i < over + input_off:
            row["input_tokens"] = 5000
        elif i < over + input_off + disbelieved:
            row["usage_mismatch"] = True
        rows.append(row)
    return rows


def _analyze(rows: list[dict], **slo: object):
    return analyze(run_of(rows, [plan_step("s", 0, rate=2.0, length=10.0)]), SLO.model_validate({"min_samples": 10,
                                                                                                  **slo}))


def test_answers_far_over_max_tokens_are_counted_and_named():
    result = _analyze(_rows(over=5))
    row = result.steps.iloc[0]
    assert row["usage_mismatch"] == 5 and row["usage_mismatch_ratio"] == pytest.approx(0.25)
    step = result.summary["steps"][0]
    assert step["usage_mismatch"] == 5 and result.summary["usage_mismatch"] == 5
    said = [w for w in result.warnings if "usage_mismatch" in w]
    assert len(said) == 1 and said[0].startswith("step s: usage_mismatch: 5 of 20 answers"), said
    assert "up to 3000 output tokens for max_tokens 16" in said[0]
    assert row["verdict"] == "pass"  # counted and said, not judged without the SLO key


def test_input_far_from_planned_and_disbelieved_counts_are_mismatches_too():
    result = _analyze(_rows(input_off=2, disbelieved=1))
    assert result.steps.iloc[0]["usage_mismatch"] == 3
    said = next(w for w in result.warnings if "usage_mismatch" in w)
    assert "input 5000 tokens for 100 planned" in said and "token count not believed" in said


def test_a_few_tokens_over_is_not_a_mismatch():
    rows = _rows()
    rows[0].update(request("r0", "s", 0.0, out=20, planned_out=16), planned_input_tokens=100)
    rows[1]["input_tokens"] = 150  # a chat template's tokens on top of the planned prompt
    result = _analyze(rows)
    assert result.steps.iloc[0]["usage_mismatch"] == 0 and result.summary["usage_mismatch"] == 0
    assert not [w for w in result.warnings if "usage_mismatch" in w]


def test_the_slo_key_fails_a_step_over_it():
    result = _analyze(_rows(over=5), max_usage_mismatch_ratio=0.1)
    row = result.steps.iloc[0]
    assert row["verdict"] == "fail" and list(row["failing"]) == ["usage_mismatch_ratio"]
    assert "max_usage_mismatch_ratio" in SLO.model_validate({"max_usage_mismatch_ratio": 0}).checked
    assert _analyze(_rows(over=1), max_usage_mismatch_ratio=0.1).steps.iloc[0]["verdict"] == "pass"
