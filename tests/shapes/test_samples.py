"""The sample-size line a run prints before load (shapes.samples): what each window gives, the floor,
what a pass rests on, and a warning for a step that will be insufficient."""

from __future__ import annotations

from llmload.config import Config
from shapes.plan import build_plan
from shapes.samples import independent_for_pass, sample_lines


def _config(steps: list[dict], slo: dict) -> Config:
    return Config.model_validate({"target": {"url": "http://127.0.0.1:9", "model": "m"},
                                  "shape": {"ladder": {"steps": steps}}, "slo": slo})


def test_the_issue_41_config_is_told_what_its_30s_steps_give_and_what_a_p95_needs():
    config = _config([{"rate": r, "duration": "30s"} for r in (1, 2, 3, 4, 5)],
                     {"ttft_p95": "800ms", "tpot_p95": "100ms"})
    lines = sample_lines(config, build_plan(config))
    assert len(lines) == 1  # every step is over the floor of 20: no warning
    assert "r1.00 30, r2.00 60, r3.00 90, r4.00 120, r5.00 150 completions" in lines[0]
    assert "judged from 20 (min_samples)" in lines[0] and "p95 pass rests on fewer than 52" in lines[0]


def test_a_step_under_the_floor_is_warned_with_the_window_that_judges_it():
    config = _config([{"rate": 0.5, "duration": "20s"}, {"rate": 4, "duration": "20s"}],
                     {"ttft_p99": "1s", "min_samples": 30})
    lines = sample_lines(config, build_plan(config))
    assert lines[1] == ("warning: step r0.50 gives about 10 completions, under min_samples 30: it will be "
                        "insufficient; a window of at least 60 s judges it")
    assert len(lines) == 2 and f"p99 pass rests on fewer than {independent_for_pass(99, 0.9)}" in lines[0]


def test_no_line_without_a_percentile_target():
    config = _config([{"rate": 1, "duration": "30s"}], {"max_reject_ratio": 0.0})
    assert sample_lines(config, build_plan(config)) == []
