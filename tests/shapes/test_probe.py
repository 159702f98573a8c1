"""`shapes.probe`: the `auto` shape's range from probe rows, the placement walk and the window sizing,
as pure functions on hand-built rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.intervals import exceedance_interval
from shapes.probe import (
    DOWN,
    UP,
    autocorrelation_time,
    cold_transient,
    effective_samples,
    next_placement,
    next_probe_level,
    probe_level_s,
    probe_levels,
    probe_step,
    relaxation_s,
    samples_for,
    saturation_of,
    server_range,
    window_s,
)


def level_row(c: int, throughput: float, e2e: float, ttft: float = 0.05) -> dict:
    return {"phase": "probe", "concurrency": c, "completion_throughput": throughput, "e2e_p50_s": e2e,
            "ttft_p50_s": ttft}


def test_probe_step_is_a_closed_loop_probe_level():
    step = probe_step(8, index=3, seed=1)
    assert (step.label, step.phase, step.arrival, step.concurrency, step.requests) == ("probe-c8", "probe", "closed", 8, 16)
    assert step.drain and step.closed_loop


def test_the_ramp_quadruples_while_unloaded_doubles_once_loaded_and_stops_at_saturation():
    assert next_probe_level([], max_concurrency=64) == 1
    rows = [level_row(1, 1.0, 1.0), level_row(4, 3.8, 1.05)]
    assert next_probe_level(probe_levels(rows), max_concurrency=64) == 16  # latency still the idle one
    rows.append(level_row(16, 9.0, 1.8))
    assert next_probe_level(probe_levels(rows), max_concurrency=64) == 32  # loaded: 2x
    assert next_probe_level(probe_levels(rows), max_concurrency=20) == 20  # the cap
    saturated = rows + [level_row(32, 9.9, 3.3)]  # 10% more than the best before: only queueing
    assert next_probe_level(probe_levels(saturated), max_concurrency=64) is None
    assert next_probe_level(probe_levels(rows[:2]), max_concurrency=4) is None  # at the cap already


def test_a_probe_level_is_expected_to_last_its_rounds_of_the_latency():
    rows = [level_row(1, 0.074, 13.5), level_row(4, 0.26, 15.0)]
    assert probe_level_s(probe_levels(rows), 16) == pytest.approx(2 * 15.0)  # unloaded: the same latency
    rows.append(level_row(16, 0.69, 23.0))
    assert probe_level_s(probe_levels(rows), 32) == pytest.approx(2 * 23.0 * 2)  # loaded: it grows


def test_a_level_that_completed_nothing_ends_the_probe():
    rows = [{"phase": "probe", "concurrency": 1, "completion_throughput": math.nan}]
    assert next_probe_level(probe_levels(rows), max_concurrency=64) is None
    assert server_range(probe_levels(rows)) is None


def test_the_range_is_the_idle_latency_and_the_best_throughput():
    rows = [level_row(1, 1.0, 0.9, 0.03), {"phase": "ladder", "completion_throughput": 99.0},
            level_row(2, 1.9, 1.0), level_row(4, 3.6, 1.1), level_row(8, 3.5, 2.2)]
    rng = server_range(probe_levels(rows))
    assert (rng.idle_e2e_s, rng.idle_ttft_s, rng.saturation_rps, rng.levels) == (0.9, 0.03, 3.6, 4)


def test_little_law_when_a_level_has_no_completion_throughput():
    rows = [{"phase": "probe", "concurrency": 4, "in_flight_mean": 3.0, "e2e_mean_s": 1.5}]
    assert probe_levels(rows)[0].throughput == pytest.approx(2.0)


def test_placement_walks_up_while_steps_pass_and_down_from_a_first_failure():
    x = 10.0
    assert next_placement(x, []) == pytest.approx(UP[0] * x)
    assert next_placement(x, [(7.0, "pass")]) == pytest.approx(UP[1] * x)
    assert next_placement(x, [(7.0, "pass"), (9.0, "pass")]) == pytest.approx(UP[2] * x)
    assert next_placement(x, [(7.0, "fail")]) == pytest.approx(DOWN[0] * x)
    assert next_placement(x, [(7.0, "fail"), (4.5, "fail")]) == pytest.approx(DOWN[1] * x)
    assert next_placement(x, [(7.0, "pass"), (9.0, "fail")]) is None  # bracketed: the search takes over


def test_placement_steps_past_an_inconclusive_step_for_the_other_side():
    assert next_placement(10.0, [(7.0, "inconclusive")]) == pytest.approx(5.6)  # no pass yet: below
    assert next_placement(10.0, [(7.0, "pass"), (9.0, "inconclusive")]) == pytest.approx(10.8)  # no fail yet
    assert next_placement(10.0, [(7.0, "fail"), (4.5, "inconclusive")]) == pytest.approx(3.6)


def test_placement_does_not_repeat_a_rate_rounded_to_three_figures():
    # 0.535 / 0.7645 = 0.6998: the rounded first step is the 0.7 fraction, the next one is 0.9
    assert next_placement(0.7645, [(0.535, "pass")]) == pytest.approx(0.9 * 0.7645)


def test_placement_ends_when_the_fractions_are_spent():
    placed = [(f * 10.0, "pass") for f in UP]
    assert next_placement(10.0, placed) is None
    assert next_placement(10.0, [(f * 10.0, "fail") for f in (UP[0], *DOWN)]) is None


def test_invalid_steps_say_nothing_and_the_walk_goes_on():
    assert next_placement(10.0, [(7.0, "invalid")]) == pytest.approx(9.0)


def test_windows_hold_the_completions_a_judgement_needs():
    assert samples_for(95) == 200 and samples_for(99) == 1000
    assert window_s(20.0, 200, min_s=10, max_s=48) == 10.0  # fast: the floor
    assert window_s(5.0, 200, min_s=10, max_s=48) == 40.0
    assert window_s(0.5, 200, min_s=10, max_s=48) == 48.0  # slow: the budget's cap


@pytest.mark.parametrize("n_eff", [20.0, 150.0, 2000.0])
@pytest.mark.parametrize("share", [0.0, 0.05, 0.3])
def test_effective_samples_reads_back_the_trials_of_a_wilson_interval(share, n_eff):
    from analysis.intervals import _z, wilson

    high = wilson(share, n_eff, _z(0.9))[1]
    assert effective_samples(share, high, 0.9) == pytest.approx(n_eff, rel=1e-3)


def test_autocorrelation_time_from_the_rows_exceedance_intervals():
    rng = np.random.default_rng(3)
    independent = rng.exponential(1.0, 2000)
    correlated = np.repeat(rng.exponential(1.0, 100), 20)  # runs of 20 equal values
    rows = []
    for rate, values in ((4.0, independent), (5.0, correlated)):
        share, low, high = exceedance_interval(values, 2.5, 0.9)
        rows.append({"offered_rate": rate, "completed": len(values), "ttft_p95_over": share,
                     "ttft_p95_over_high": high})
    near_independent = autocorrelation_time(rows, ["ttft_p95"], 0.9, near=4.0, span=0.1)
    near_correlated = autocorrelation_time(rows, ["ttft_p95"], 0.9, near=5.0, span=0.1)
    assert near_independent < 3.0
    assert near_correlated > 8.0
    assert autocorrelation_time([], ["ttft_p95"], 0.9) == 1.0


def test_the_queues_relaxation_time_grows_without_bound_towards_saturation():
    times = [relaxation_s(rate, 1.0) for rate in (0.3, 0.5, 0.7, 0.9, 0.99)]
    assert times == sorted(times) and times[0] == pytest.approx(1.0 / (1.0 - math.sqrt(0.3)) ** 2)
    assert relaxation_s(1.0, 1.0) == math.inf and relaxation_s(2.0, 1.0) == math.inf
    assert relaxation_s(10.0, 20.0) == pytest.approx(relaxation_s(0.5, 1.0) / 20.0)  # in the server's time


def ladder_row(rate: float, window: float, *, warmup: float = 20.0, phase: str = "ladder") -> dict:
    return {"phase": phase, "offered_rate": rate, "warmup_s": warmup, "window_start": 50.0,
            "window_end": 50.0 + window}


def test_an_idle_started_step_shorter_than_its_queues_relaxation_read_its_transient():
    # the bench's auto-slow: saturation 0.687 req/s; 20 s warm-up + 57.6 s window
    assert not cold_transient(ladder_row(0.486, 57.6), 0.687)  # relaxation 58 s: it lasted 77.6 s
    assert cold_transient(ladder_row(0.625, 57.6), 0.687)  # relaxation about 11 minutes
    assert cold_transient(ladder_row(0.7, 600.0), 0.687)  # past saturation: never steady
    assert not cold_transient(ladder_row(0.625, 900.0), 0.687)  # long enough
    assert not cold_transient(ladder_row(0.625, 57.6, phase="refine"), 0.687)  # chained: started loaded
    assert not cold_transient(ladder_row(0.625, 57.6), None)  # no probe, no saturation to judge by
    assert cold_transient(ladder_row(0.486, 57.6, warmup=0.0), 0.687)  # the warm-up counts: it builds the queue


def test_the_saturation_is_the_probes():
    assert saturation_of([level_row(1, 0.1, 13.0), level_row(4, 0.3, 13.5), level_row(16, 0.687, 23.0),
                          ladder_row(0.5, 60.0)]) == pytest.approx(0.687)
    assert saturation_of([ladder_row(0.5, 60.0)]) is None
