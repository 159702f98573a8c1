"""Time to first answer token (TTFA) and reasoning / answer token rates, on hand-built records whose
truth is known: the per-request columns, the step percentiles, the `ttfa_p95` SLO and goodput."""

from __future__ import annotations

import numpy as np
import pandas as pd
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from analysis.requests import derive_requests
from llmload.config import SLO


def _reasoning(row: dict, *, thinking_s: float, reasoning: int) -> dict:
    """`row` whose first `reasoning` output tokens were reasoning, its answer starting `thinking_s`
    after its first token."""
    return {**row, "first_answer_at": row["first_token_at"] + thinking_s, "reasoning_tokens": reasoning}


def test_derived_ttfa_and_phase_rates() -> None:
    row = _reasoning(request("r0", "s", 10.0, wait=0.5, ttft=0.2, e2e=3.2, out=21), thinking_s=1.0, reasoning=10)
    old = request("r1", "s", 11.0, ttft=0.2, e2e=1.2, out=5)  # a record from before first_answer_at
    out = derive_requests(pd.DataFrame([row, old]), {"s": (0.0, 20.0)}, SLO())
    r, o = out.iloc[0], out.iloc[1]
    assert np.isclose(r["ttfa_s"], 1.2) and np.isclose(r["user_ttfa_s"], 1.7)
    assert np.isclose(r["ttft_s"], 0.2)  # TTFT stays the first token of either kind
    assert r["answer_tokens"] == 11
    assert np.isclose(r["reasoning_rate"], 10 / 1.0) and np.isclose(r["answer_rate"], 10 / 2.0)
    assert np.isnan(o["ttfa_s"]) and np.isnan(o["reasoning_rate"]) and o["answer_tokens"] == 5


def test_ttfa_p95_slo_judges_steps_and_goodput() -> None:
    thinking = np.linspace(0.0, 2.0, 40)  # TTFA = 0.1 s TTFT + thinking: 0.1 to 2.1 s
    rows = [_reasoning(request(f"r{i}", "s", float(i), ttft=0.1, e2e=3.0, out=20), thinking_s=float(t),
                       reasoning=5) for i, t in enumerate(thinking)]
    slo = SLO.model_validate({"ttft_p95": "1s", "ttfa_p95": "1s", "ttfa_p50": "5s", "min_samples": 10})
    result = analyze(run_of(rows, [plan_step("s", 0, rate=1.0, length=40.0)]), slo)
    step = result.steps.iloc[0]
    ttfa = 0.1 + thinking
    assert abs(step["ttfa_p95_s"] - np.percentile(ttfa, 95)) < 1e-9
    assert abs(step["ttfa_p50_s"] - np.percentile(ttfa, 50)) < 1e-9
    assert step["ttft_p95_s"] < 0.11 and step["verdict"] == "fail" and list(step["failing"]) == ["ttfa_p95"]
    assert int(result.requests["good"].sum()) == int((ttfa <= 1.0 + 1e-9).sum())
    out = step["output_tokens_per_s"]  # the same requests' tokens: 5 of each 20 were reasoning
    assert out > 0 and np.isclose(step["reasoning_tokens_per_s"], out * 5 / 20)
    assert np.isclose(step["answer_tokens_per_s"], out * 15 / 20)
    assert np.isclose(step["reasoning_rate_p50"], 5 / np.median(thinking[thinking > 0]), rtol=0.2)


def test_report_and_live_table_show_ttfa_only_when_answers_reasoned() -> None:
    from llmload.report.page import step_table
    from llmload.runtime.master.live_table import format_header, format_row, step_row

    rows = [_reasoning(request(f"r{i}", "s", float(i), ttft=0.1, e2e=3.0, out=20), thinking_s=1.0, reasoning=5)
            for i in range(20)]
    reasoned = analyze(run_of(rows, [plan_step("s", 0, rate=1.0, length=20.0)]), SLO()).steps
    plain = analyze(run_of([request(f"r{i}", "s", float(i)) for i in range(20)],
                           [plan_step("s", 0, rate=1.0, length=20.0)]), SLO()).steps
    assert "TTFA p95 ms" in step_table(reasoned) and "TTFA p95 ms" not in step_table(plain)
    stats = reasoned.iloc[0].to_dict()
    assert "TTFA p95 1100ms" in format_row(step_row("s", stats, "pass", [], None))  # TTFA p95 = 0.1 + 1.0 s
    plain_row = step_row("s", plain.iloc[0].to_dict(), "pass", [], None)
    assert plain_row["ttfa_p95_s"] is None
    assert "TTFA" not in format_row(plain_row) and "TTFA" not in format_header()  # no column of dashes


def test_live_request_values_have_ttfa_as_the_analysis() -> None:
    from llmload.runtime.master.live_series import request_values

    row = _reasoning(request("r0", "s", 10.0, wait=0.5, ttft=0.2, e2e=3.2, out=21), thinking_s=1.0, reasoning=10)
    values = request_values(row)
    assert np.isclose(values["ttfa"], 1.2) and np.isclose(values["user_ttfa"], 1.7)
    assert request_values(request("r1", "s", 10.0))["ttfa"] is None  # no first_answer_at: not judged
