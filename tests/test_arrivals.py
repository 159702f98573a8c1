"""Arrival processes and sharding: counts, variability, determinism, exact splits across workers."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.arrivals import (
    Arrival,
    closed_loop_arrival,
    closed_loop_users,
    constant_offsets,
    gamma_offsets,
    plan_arrivals,
    planned_count,
    poisson_exact_offsets,
    poisson_offsets,
    request_id,
    shard_indices,
    step_offsets,
)
from shapes.steps import StepSpec, TraceArrivals


def open_step(arrival: str, rate: float = 20.0, *, seed: int = 7, burstiness: float = 1.0,
              warmup_s: float = 2.0, duration_s: float = 18.0) -> StepSpec:
    return StepSpec(label=f"r{rate:.2f}", index=0, phase="ladder", arrival=arrival, target_rate=rate,
                    burstiness=burstiness, warmup_s=warmup_s, duration_s=duration_s, seed=seed)


def trace_step() -> StepSpec:
    offsets = [0.0, 0.0, 0.3, 1.1, 1.15, 4.0, 4.0, 4.2, 9.9]
    n = len(offsets)
    return StepSpec(label="burst", index=0, phase="burst", arrival="trace", target_rate=0.9, duration_s=10.0,
                    trace=TraceArrivals(offsets_s=offsets, input_tokens=list(range(100, 100 + n)),
                                        output_tokens=list(range(10, 10 + n)), prefix_id=[None] * n,
                                        prefix_tokens=[None] * n, prompt=[f"p{i}" for i in range(n)]))


def closed_step(requests: int | None = 23, concurrency: int = 5) -> StepSpec:
    return StepSpec(label=f"c{concurrency}", index=0, phase="concurrency", arrival="closed",
                    concurrency=concurrency, requests=requests, duration_s=None if requests else 30.0)


def test_constant_count_and_spacing_are_exact():
    offsets = constant_offsets(20.0, 10.0)
    assert len(offsets) == 200
    np.testing.assert_allclose(np.diff(offsets), 0.05)
    assert len(constant_offsets(0.5, 10.0)) == 5  # 0, 2, 4, 6, 8: the boundary 10 is excluded
    assert len(constant_offsets(3.0, 0.0)) == 0


def test_poisson_count_and_cv():
    offsets = poisson_offsets(50.0, 400.0, np.random.default_rng(1))
    assert abs(len(offsets) - 20_000) < 5 * np.sqrt(20_000)
    assert offsets.min() >= 0 and offsets.max() < 400.0
    gaps = np.diff(offsets)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_gamma_burstiness_sets_cv_and_keeps_mean_rate():
    offsets = gamma_offsets(100.0, 400.0, 0.25, np.random.default_rng(2))
    gaps = np.diff(offsets)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, abs=0.1)
    assert len(offsets) / 400.0 == pytest.approx(100.0, rel=0.05)
    smooth = np.diff(gamma_offsets(100.0, 100.0, 4.0, np.random.default_rng(2)))
    assert smooth.std() / smooth.mean() == pytest.approx(0.5, abs=0.05)


@pytest.mark.parametrize("rate,warmup_s,window_s", [(4.6, 2.0, 10.0), (0.35, 10.0, 7.0), (20.0, 0.0, 18.0),
                                                     (5.5, 3.0, 240.0)])
def test_poisson_exact_carries_exactly_its_rate_in_every_seed(rate, warmup_s, window_s):
    """Every seed: round(rate x warm-up) arrivals in the warm-up, round(rate x window) in the window,
    so the window's realised offered rate is the target (plain Poisson: 0.6x to 1.65x in 10 s steps)."""
    for seed in range(50):
        offsets = step_offsets(open_step("poisson_exact", rate, seed=seed, warmup_s=warmup_s, duration_s=window_s))
        assert (offsets < warmup_s).sum() == round(rate * warmup_s)
        assert ((offsets >= warmup_s) & (offsets < warmup_s + window_s)).sum() == round(rate * window_s)
        assert np.all(np.diff(offsets) >= 0) and offsets.min(initial=0.0) >= 0
    plain = [len(step_offsets(open_step("poisson", 4.0, seed=s, warmup_s=0.0, duration_s=10.0))) for s in range(50)]
    assert len(set(plain)) > 5  # the old default: the count itself is random


def test_poisson_exact_gaps_are_exponential():
    """Sorted uniform times have the gaps of a Poisson process (conditioned on its count): a
    Kolmogorov-Smirnov test against the exponential of mean 1 / rate does not reject them."""
    from scipy import stats

    offsets = poisson_exact_offsets(50.0, (400.0,), np.random.default_rng(3))
    assert len(offsets) == 20_000
    gaps = np.diff(offsets)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 50.0)).pvalue > 0.05
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    # and the counts in equal sub-intervals are Poisson-like (dispersion ~1), not evenly spaced
    counts = np.histogram(offsets, bins=400, range=(0, 400.0))[0]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.2)


def test_poisson_exact_is_deterministic_per_seed_and_sharded_without_loss():
    step = open_step("poisson_exact", 4.6, warmup_s=2.0, duration_s=10.0)
    np.testing.assert_array_equal(step_offsets(step), step_offsets(step))
    assert planned_count(step) == 9 + 46
    parts = [plan_arrivals(step, 0.0, i, 3) for i in range(3)]
    assert sum(len(p) for p in parts) == 55
    window = [a for p in parts for a in p if 2.0 <= a.scheduled_at < 12.0]
    assert len(window) == 46


def test_ladder_arrival_defaults_to_poisson_exact_and_poisson_stays():
    from llmload.config import LadderShape

    assert LadderShape(steps=[{"rate": 1, "duration": 10}]).arrival == "poisson_exact"
    assert LadderShape(steps=[{"rate": 1, "duration": 10}], arrival="poisson").arrival == "poisson"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_rate_is_refused(bad):
    with pytest.raises(ValueError, match="rate"):
        constant_offsets(bad, 1.0)


def test_step_offsets_are_deterministic_per_seed():
    for kind in ("poisson", "gamma"):
        a = step_offsets(open_step(kind, burstiness=0.5))
        b = step_offsets(open_step(kind, burstiness=0.5))
        c = step_offsets(open_step(kind, burstiness=0.5, seed=8))
        np.testing.assert_array_equal(a, b)
        assert len(a) != len(c) or not np.array_equal(a, c)
        assert a.max() < 20.0  # warm-up + window


def test_step_offsets_cover_warmup_and_window():
    assert len(step_offsets(open_step("constant", rate=5.0, warmup_s=2.0, duration_s=8.0))) == 50


@pytest.mark.parametrize("make", [
    lambda: open_step("constant", 33.0),
    lambda: open_step("poisson", 33.0),
    lambda: open_step("poisson_exact", 33.0),
    lambda: open_step("gamma", 33.0, burstiness=0.25),
    trace_step,
    closed_step,
])
@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_shards_union_is_exactly_the_plan(make, shards):
    step = make()
    start_at = 1_000.0
    whole = plan_arrivals(step, start_at, 0, 1)
    parts = [plan_arrivals(step, start_at, i, shards) for i in range(shards)]
    union = sorted((a for part in parts for a in part), key=lambda a: a.index)
    assert [a.request_id for a in union] == [a.request_id for a in whole]
    assert len({a.request_id for a in union}) == len(whole)
    assert [a.scheduled_at for a in union] == [a.scheduled_at for a in whole]
    if step.arrival != "closed":
        assert len(whole) == len(step_offsets(step))
        for part in parts:  # each shard's own list is in time order
            assert [a.scheduled_at for a in part] == sorted(a.scheduled_at for a in part)


def test_trace_arrivals_carry_sizes_and_absolute_times():
    arrivals = plan_arrivals(trace_step(), 500.0, 1, 2)
    assert arrivals[0] == Arrival("burst-000001", "burst", 1, 500.0, input_tokens=101, output_tokens=11,
                                  prompt="p1")
    assert [a.index for a in arrivals] == [1, 3, 5, 7]
    assert arrivals[-1].scheduled_at == pytest.approx(504.2)


def test_request_ids_are_unique_and_labelled():
    arrivals = plan_arrivals(open_step("poisson"), 0.0, 0, 1)
    assert arrivals[0].request_id == "r20.00-000000" == request_id("r20.00", 0)
    assert len({a.request_id for a in arrivals}) == len(arrivals)
    assert {a.step for a in arrivals} == {"r20.00"}


def test_closed_loop_requests_follow_the_users():
    step = closed_step(requests=23, concurrency=5)
    assert [closed_loop_users(step, i, 2) for i in range(2)] == [3, 2]
    # one user: every request goes where that user runs, none to a shard without users
    lone = closed_step(requests=7, concurrency=1)
    assert len(plan_arrivals(lone, 0.0, 0, 2)) == 7
    assert plan_arrivals(lone, 0.0, 1, 2) == []
    assert closed_loop_users(lone, 1, 2) == 0


def test_time_bound_closed_loop_makes_unique_ids_without_coordination():
    step = closed_step(requests=None, concurrency=4)
    assert plan_arrivals(step, 0.0, 0, 2) == []
    ids = {closed_loop_arrival(step, shard, 3, n, at=1.0).request_id for shard in range(3) for n in range(50)}
    assert len(ids) == 150
    assert closed_loop_arrival(step, 2, 3, 4, at=9.5) == Arrival("c4-000014", "c4", 14, 9.5)


def test_bad_shard_is_refused():
    with pytest.raises(ValueError, match="shard"):
        shard_indices(10, 2, 2)
    with pytest.raises(ValueError, match="shard"):
        plan_arrivals(open_step("constant"), 0.0, 0, 0)
    with pytest.raises(ValueError, match="closed loop"):
        step_offsets(closed_step())


def test_planned_count_matches_the_schedule():
    assert planned_count(open_step("constant", rate=5.0, warmup_s=2.0, duration_s=8.0)) == 50
    assert planned_count(trace_step()) == 9
    assert planned_count(closed_step(requests=23)) == 23
    assert planned_count(closed_step(requests=None)) is None
