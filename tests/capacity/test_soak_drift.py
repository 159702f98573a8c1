"""Soak on the sim (issue 10): a slow injected leak is flagged as drift, a steady service is not.

Each run is the run's own machinery with a soak of six 4-s slices run back to back (no drain pause
between slices: `StepSpec.drain` False for all but the last), whole in virtual time (`llmload run
--virtual`, `tests/virtual_truth.py`) against the sim's engine, its leak and its /metrics (KV usage)
on the run's clock: deterministic, seconds of CPU. What a soak adds to a live run is only its length
(the live machinery of a step after step run is tests/runtime's).
"""

from __future__ import annotations

import pytest
from capacity_helpers import read_json, sim_target
from virtual_truth import CLOSED, run_against_sim

SLICES, SLICE_S = 6, 4.0


def soak_config(url: str) -> dict:
    return {"target": sim_target([url]),
            "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                         "output_tokens": {"dist": "fixed", "value": 8}},
            "shape": {"soak": {"rate": 8, "duration": f"{SLICES * SLICE_S:g}s", "slice": f"{SLICE_S:g}s",
                               "arrival": "poisson", "drain_timeout": "10s"}},
            # trend_alpha 0.01: six strictly rising slices give p ~ 0.004; a steady run is seldom that ordered
            "slo": {"min_samples": 5, "trend_alpha": 0.01, "ttft_p95": "2s"},
            "telemetry": {"gpu": "off"}, "conditions": {"owner": "capacity team", "gpus": 1}}


def check_slices_back_to_back(run_dir):
    steps = read_json(run_dir, "plan.json")["steps"]
    assert [s["label"] for s in steps] == [f"soak-{i:03d}" for i in range(SLICES)]
    assert all(s["status"] == "run" and s["phase"] == "soak" for s in steps)
    for before, after in zip(steps, steps[1:], strict=False):
        # the next slice starts when this one's arrivals end: no drain pause (and no cancellation)
        assert after["start_at"] - before["window_end"] == pytest.approx(0.0, abs=0.05)
        assert not before["cancelled"]


def test_a_slow_leak_is_flagged_as_drift_and_memory_growth(tmp_path, unrendered_plots):
    # the report's text is read, not its plots (drawn: tests/report/test_report_page.py)
    # each engine step costs 0.6 s more per minute (24 s: 10 ms -> 250 ms, about 40 ms more each slice, so
    # a loaded machine's noise in a slice's p95 seldom reorders two slices: at 60 ms a minute, 4 ms a slice,
    # three quiet tests side by side missed the drift once, p 0.07); KV blocks leak (1000 per minute of
    # 4096: ~0.1 of the cache by the end), the way a fragmenting allocator would
    code, run_dir = run_against_sim(tmp_path, soak_config(CLOSED), name="leak", report=True,
                                    sim={"step_base_s": "10ms", "step_cost_growth_s_per_min": "600ms",
                                         "kv_leak_blocks_per_min": 1000})
    assert (run_dir / "summary.json").exists(), code
    check_slices_back_to_back(run_dir)
    summary = read_json(run_dir, "summary.json")
    soak = summary["soak"]
    assert soak["slices"] == SLICES
    assert {"ttft_p95_s", "e2e_p95_s"} <= set(soak["drifting"]), soak["trends"]
    # the decision record says what drifted: a pass over a drifting soak does not hold for longer runs
    assert summary["decision"]["soak_drift"]["drifting"] == soak["drifting"]
    assert soak["memory_growth"] is True and "kv_usage_peak" in soak["drifting"]
    trends = {t["metric"]: t for t in soak["trends"]}
    assert trends["e2e_p95_s"]["slope_per_slice"] > 0
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'id="slices-table"' in report and "Drifting series: " in report and "Memory growth: yes" in report
    assert "Soak: drifting upward across 6 slices of 4 s: " in report  # the answer says it, not only the table


def test_a_steady_soak_is_not_flagged(tmp_path):
    code, run_dir = run_against_sim(tmp_path, soak_config(CLOSED), name="steady", sim={"step_base_s": "10ms"})
    # 0 pass (in virtual time the generator is never late: no invalid slice, exit 3, to allow for)
    assert code == 0 and (run_dir / "summary.json").exists(), code
    check_slices_back_to_back(run_dir)
    summary = read_json(run_dir, "summary.json")
    soak = summary["soak"]
    assert soak["slices"] == SLICES
    assert soak["drifting"] == [] and soak["memory_growth"] is False and soak["error_bursts"] == [], soak
    assert summary["decision"]["soak_drift"] == {"drifting": [], "memory_growth": False, "error_bursts": []}
