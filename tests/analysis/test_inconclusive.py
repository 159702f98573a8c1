"""The `inconclusive` verdict: a percentile target whose interval straddles its threshold decides nothing.

Rules (analysis.verdict): fail only when a target's whole interval is over it; inconclusive when an
interval straddles (whichever side the point is on) and nothing failed; the count and ratio rules are
unchanged; the run verdict is inconclusive when no step failed, none was invalid or insufficient, and
one was inconclusive (exit code 3, no conclusion).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze, exit_code
from analysis.metrics import empty_metrics
from analysis.summary import overall_verdict
from analysis.verdict import VERDICTS, judge
from llmload.config import SLO

STEP = {"label": "r1", "index": 0, "phase": "ladder", "status": "run", "target_rate": 1.0,
        "window_start": 0.0, "window_end": 300.0}
SLO2 = SLO(ttft_p95=1.0, tpot_p95=0.08, max_reject_ratio=0.0)


def metrics(**figures: float) -> dict:
    row = empty_metrics(STEP)
    row.update(completed=300, arrivals=300, outcomes={"ok": 300}, error_ratio=0.0, reject_ratio=0.0, oom=0,
               queue_growth=False, tpot_p95_s=0.04, tpot_p95_s_low=0.035, tpot_p95_s_high=0.045)
    row.update(figures)
    return row


@pytest.mark.parametrize("point,low,high,verdict,failing,undecided", [
    (0.9, 0.8, 0.95, "pass", [], []),  # wholly under
    (0.9, 0.8, 1.2, "inconclusive", [], ["ttft_p95"]),  # point under, interval over the line
    (1.1, 0.95, 1.3, "inconclusive", [], ["ttft_p95"]),  # point over, interval under the line
    (1.3, 1.1, 1.6, "fail", ["ttft_p95"], []),  # wholly over
    (1.1, math.nan, math.nan, "fail", ["ttft_p95"], []),  # no interval: the point decides, as before
])
def test_the_interval_decides_a_percentile_target(point, low, high, verdict, failing, undecided):
    got, got_failing, details = judge(metrics(ttft_p95_s=point, ttft_p95_s_low=low, ttft_p95_s_high=high),
                                      STEP, SLO2)
    assert (got, got_failing, details["undecided_targets"]) == (verdict, failing, undecided)


def test_a_wholly_over_target_fails_even_when_another_straddles():
    got, failing, details = judge(metrics(ttft_p95_s=0.9, ttft_p95_s_low=0.8, ttft_p95_s_high=1.2,
                                          tpot_p95_s=0.1, tpot_p95_s_low=0.09, tpot_p95_s_high=0.12), STEP, SLO2)
    assert got == "fail" and failing == ["tpot_p95"] and details["undecided_targets"] == ["ttft_p95"]


def test_count_rules_are_unchanged_by_a_straddling_interval():
    row = metrics(ttft_p95_s=0.9, ttft_p95_s_low=0.8, ttft_p95_s_high=1.2, reject_ratio=0.1,
                  outcomes={"ok": 270, "rejected": 30})
    assert judge(row, STEP, SLO2)[:2] == ("fail", ["reject_ratio"])
    few = metrics(ttft_p95_s=0.9, ttft_p95_s_low=0.8, ttft_p95_s_high=1.2, completed=50)
    assert judge(few, STEP, SLO(ttft_p95=1.0, min_samples=200))[0] == "insufficient"


def test_inconclusive_is_a_verdict_and_the_run_verdict_and_exit_code_follow():
    assert "inconclusive" in VERDICTS
    steps = pd.DataFrame({"verdict": ["pass", "inconclusive", "not_run"]})
    assert overall_verdict(steps) == "inconclusive"
    assert overall_verdict(pd.DataFrame({"verdict": ["pass", "inconclusive", "fail"]})) == "fail"
    assert overall_verdict(pd.DataFrame({"verdict": ["insufficient", "inconclusive"]})) == "insufficient"
    assert exit_code({"verdict": "inconclusive"}) == 3


def test_a_step_whose_tail_is_one_long_episode_is_inconclusive_end_to_end():
    """100 requests, p95 0.99 s against 0.95 s, but every slow request in one burst (one queue episode):
    the interval straddles the target, so the step is inconclusive (an i.i.d. reading fails it outright)."""
    ttfts = [0.3] * 88 + [0.99] * 12  # the slow ones at the end, all together
    rows = [request(f"r{i}", "s", float(i), ttft=t, e2e=t + 0.5) for i, t in enumerate(ttfts)]
    result = analyze(run_of(rows, [plan_step("s", 0, length=100.0)]), SLO(ttft_p95=0.95, min_samples=20))
    row = result.steps.iloc[0]
    assert row["ttft_p95_s"] > 0.95 and row["ttft_p95_s_low"] <= 0.95 < row["ttft_p95_s_high"]
    assert row["verdict"] == "inconclusive" and list(row["undecided_targets"]) == ["ttft_p95"]
    assert result.summary["verdict"] == "inconclusive" and exit_code(result.summary) == 3
    entry = result.summary["steps"][0]
    assert entry["undecided_targets"] == ["ttft_p95"] and entry["ttft_p95_s_low"] is not None
