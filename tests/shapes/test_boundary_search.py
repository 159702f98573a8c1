"""Boundary search: bisection converges on a known capacity; it stops for the right reasons."""

from __future__ import annotations

import pytest

from shapes.boundary import BoundarySearch, realised_rate_note


def judge(capacity: float):
    """A server whose SLO holds up to `capacity` req/s: the input of the unit under test."""
    return lambda rate: "pass" if rate <= capacity else "fail"


def run_search(ladder_rates, capacity, *, resolution=0.1, max_steps=8):
    verdict = judge(capacity)
    search = BoundarySearch([(r, verdict(r), 200 + int(r * 10)) for r in ladder_rates],
                            resolution=resolution, max_steps=max_steps)
    tried = []
    while (rate := search.next_rate()) is not None:
        tried.append(rate)
        search.record(rate, verdict(rate), 200 + int(rate * 10))
    return search, tried


@pytest.mark.parametrize("capacity", [1.3, 2.05, 3.3, 5.99, 7.5])
def test_converges_on_the_capacity_within_the_resolution(capacity):
    search, tried = run_search([1, 2, 4, 8], capacity)
    answer = search.answer
    assert answer.rate is not None and answer.rate <= capacity
    assert capacity - answer.rate <= 0.1
    assert answer.failing_rate - answer.rate <= 0.1
    assert answer.samples == 200 + int(answer.rate * 10)
    assert answer.stopped == "resolution" and answer.refine_steps == len(tried) <= 6
    assert all(r not in (1, 2, 4, 8) for r in tried)


def test_first_rate_is_the_midpoint_and_is_stable_until_recorded():
    search = BoundarySearch([(1, "pass"), (2, "pass"), (4, "fail"), (8, "fail")], resolution=0.1)
    assert search.next_rate() == 3.0
    assert search.next_rate() == 3.0
    search.record(3.0, "pass")
    assert search.next_rate() == 3.5


def test_max_steps_bounds_the_search():
    search, tried = run_search([1, 2], 1.2345, resolution=0.001, max_steps=3)
    assert tried == [1.5, 1.25, 1.125]
    assert (search.answer.stopped, search.answer.rate, search.answer.failing_rate) == ("max_steps", 1.125, 1.25)


def test_pass_above_the_first_failure_is_not_the_answer():
    search = BoundarySearch([(1, "pass"), (2, "fail"), (3, "pass"), (4, "fail")], resolution=0.5)
    assert search.answer.rate == 1 and search.answer.failing_rate == 2
    assert search.next_rate() == 1.5


@pytest.mark.parametrize(("results", "stopped", "rate"), [
    ([(1, "pass"), (2, "pass")], "no_failure", 2),
    ([(1, "fail"), (2, "fail")], "no_pass", None),
    ([(1, "pass"), (2, "insufficient"), (4, "fail")], None, 1),
])
def test_nothing_or_something_to_bisect(results, stopped, rate):
    search = BoundarySearch(results, resolution=0.1)
    assert search.answer.rate == rate
    if stopped:
        assert search.next_rate() is None and search.answer.stopped == stopped
    else:
        assert search.next_rate() == 2.5


@pytest.mark.parametrize("verdict", ["invalid", "insufficient", "unjudged"])
def test_an_undecided_refine_step_stops_the_search(verdict):
    search = BoundarySearch([(1, "pass"), (2, "fail")], resolution=0.1)
    search.record(search.next_rate(), verdict)
    assert search.next_rate() is None
    assert search.answer.stopped == "inconclusive" and search.answer.rate == 1


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="verdict"):
        BoundarySearch([(1, None)], resolution=0.1)
    with pytest.raises(ValueError, match="resolution"):
        BoundarySearch([], resolution=0)


def test_the_realised_rate_is_stated_when_a_short_step_drew_far_from_its_target():
    """The demo's r5.50 step offered 4.10 req/s (a -1.9 sd Poisson draw): the answer must say so."""
    assert realised_rate_note(5.5, [4.1]) == " (offered 4.1 req/s realised)"
    assert realised_rate_note(5.5, [5.2, None, float("nan")]) == ""  # within 10%: the label stands
    assert realised_rate_note(5.5, [6.2, 5.4]) == " (offered 6.2 req/s realised)"
