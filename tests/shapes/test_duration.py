"""A plan's expected wall time (`shapes.duration`), said as a run starts: steps, drains, the knee search."""

from __future__ import annotations

import pytest

from llmload.config import parse_config
from shapes.duration import format_span, plan_duration
from shapes.plan import build_plan


def _duration(shape: dict):
    config = parse_config({"target": {"url": "http://127.0.0.1:9", "model": "m"}, "shape": shape})
    return plan_duration(config, build_plan(config))


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (44.2, "45 s"), (60, "1 min"), (200, "3 min 20 s"),
                                               (599, "9 min 59 s"), (640, "11 min"), (7260, "2 h 1 min")])
def test_spans_read_as_a_person_says_them(seconds, text):
    assert format_span(seconds) == text


def test_a_ladder_is_its_warmups_and_windows_and_its_drains_are_said_apart():
    duration = _duration({"ladder": {"warmup": "10s", "drain_timeout": "30s",
                                     "steps": [{"rate": 1, "duration": "50s"}, {"rate": 2, "duration": "90s"}]}})
    assert (duration.steps, duration.scheduled_s, duration.drain_max_s, duration.expected_s) == (2, 160, 60, 190)
    assert duration.line() == ("2 steps, about 3 min 10 s, less if a step fails before the last (steps 2 min 40 s, "
                               "a drain 30 s; all drains up to 1 min)")
    every = _duration({"ladder": {"warmup": "10s", "drain_timeout": "30s", "stop_after_failures": None,
                                  "steps": [{"rate": 1, "duration": "50s"}, {"rate": 2, "duration": "90s"}]}})
    assert "less if" not in every.line()  # null: every step runs
    # a drain never outlasts a request: target.timeout bounds it
    config = parse_config({"target": {"url": "http://127.0.0.1:9", "model": "m", "timeout": "20s"},
                           "shape": {"ladder": {"drain_timeout": "30s", "steps": [{"rate": 1, "duration": "50s"}]}}})
    assert plan_duration(config, build_plan(config)).drain_max_s == 20


def test_the_knee_search_counts_the_refine_steps_that_fit_its_budget():
    ladder = {"warmup": "10s", "drain_timeout": "30s", "steps": [{"rate": 1, "duration": "50s"}],
              "refine": {"budget": "200s"}}
    duration = _duration({"ladder": ladder})
    assert (duration.search_steps, duration.search_s, duration.expected_s) == (3, 180, 270)
    assert duration.drain_max_s == 60  # the last refine step drains
    assert duration.line().startswith("1 step + knee search, about 4 min 30 s (")  # one step: it is the last
    assert "knee search up to 3 min (3 refine steps) of its 3 min 20 s budget" in duration.line()
    capped = _duration({"ladder": {**ladder, "refine": {"budget": "200s", "max_steps": 2}}})
    assert (capped.search_steps, capped.search_s) == (2, 120)
    longer = _duration({"ladder": {**ladder, "refine": {"budget": "200s", "duration": "90s"}}})
    assert (longer.search_steps, longer.search_s) == (2, 200)


def test_closed_loop_levels_of_a_request_count_have_no_fixed_length():
    duration = _duration({"concurrency": {"levels": [1, 4], "requests_per_level": 20, "drain_timeout": "10s"}})
    assert duration.open_ended == 2
    assert duration.line() == ("2 steps, as long as the server takes (closed-loop levels of a request count) "
                               "(a drain 10 s; all drains up to 20 s)")
    timed = _duration({"concurrency": {"levels": [1, 4], "duration": "30s", "drain_timeout": "10s"}})
    assert timed.open_ended == 0 and timed.expected_s == 70


def test_soak_slices_run_back_to_back_and_only_the_last_drains():
    duration = _duration({"soak": {"rate": 1, "duration": "10m", "slice": "2m", "drain_timeout": "45s"}})
    assert (duration.steps, duration.scheduled_s, duration.drain_max_s) == (5, 600, 45)
    assert duration.line() == "5 steps, about 11 min (steps 10 min, a drain 45 s)"
