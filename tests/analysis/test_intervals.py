"""Percentile intervals on autocorrelated series whose percentiles are known (analysis.intervals).

An AR(1) series x_t = phi x_{t-1} + e_t with Gaussian e of variance 1 - phi^2 is stationary N(0, 1): its
true p95 is 1.6449 whatever phi. Over 200 series (seeds 0-199, deterministic), the nominal 90% interval
must hold the truth in at least 80% of them, while the i.i.d. formula (the same interval with tau = 1)
holds it far less often: that difference is why the interval exists.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from analysis.intervals import autocorrelation_time, iid_percentile_interval, percentile_interval, rising

TRUE_P95 = NormalDist().inv_cdf(0.95)


def ar1(n: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(n) * math.sqrt(1 - phi * phi)
    e[0] = rng.standard_normal()  # start in the stationary distribution
    # x_t = e_t + phi x_{t-1} in Python floats: the floats scipy.signal.lfilter([1.0], [1.0, -phi], e) gives
    # (its step is z + 1.0 e_t, z = 0.0 e_t - (-phi) x_t: the same product and sum), without importing
    # scipy.signal (0.8 s of CPU in each xdist worker that ran one of these tests; 2,000 values take 0.3 ms)
    x = e.tolist()
    for t in range(1, n):
        x[t] += phi * x[t - 1]
    return np.array(x)


def coverage(n: int, phi: float, interval) -> float:
    hits = 0
    for seed in range(200):
        low, high = interval(ar1(n, phi, seed), 95, 0.9)
        hits += low <= TRUE_P95 <= high
    return hits / 200


@pytest.mark.parametrize("n,phi", [(1000, 0.9), (300, 0.5), (2000, 0.95)])
def test_interval_covers_the_true_p95_of_autocorrelated_series(n, phi):
    ours, iid = coverage(n, phi, percentile_interval), coverage(n, phi, iid_percentile_interval)
    assert ours >= 0.8, (ours, iid)
    assert iid < ours - 0.15, (ours, iid)  # the i.i.d. formula under-covers: measured 0.39 vs 0.94 at phi .9


def test_iid_formula_under_covers_strongly_correlated_series():
    """The gap, measured (n 1000, phi 0.9): the i.i.d. interval holds the truth in under 55% of series."""
    assert coverage(1000, 0.9, iid_percentile_interval) < 0.55


def test_independent_series_keep_their_nominal_coverage_and_width():
    """No autocorrelation: tau is about 1 and the interval is as narrow as the i.i.d. one (not padded)."""
    assert coverage(1000, 0.0, percentile_interval) >= 0.85
    x = ar1(1000, 0.0, 1)
    ours, iid = percentile_interval(x, 95, 0.9), iid_percentile_interval(x, 95, 0.9)
    assert (ours[1] - ours[0]) <= 1.3 * (iid[1] - iid[0])


def test_autocorrelation_time_of_ar1_is_about_its_theory():
    """tau = (1 + phi) / (1 - phi) for an AR(1) series: 19 at phi 0.9, 1 for white noise."""
    assert autocorrelation_time(ar1(20_000, 0.9, 5)) == pytest.approx(19.0, rel=0.25)
    assert autocorrelation_time(ar1(20_000, 0.0, 5)) == pytest.approx(1.0, abs=0.2)


def test_interval_brackets_the_point_and_widens_with_confidence():
    x = ar1(500, 0.7, 2)
    point = np.percentile(x, 95)
    lo90, hi90 = percentile_interval(x, 95, 0.9)
    lo99, hi99 = percentile_interval(x, 95, 0.99)
    assert lo99 <= lo90 <= point <= hi90 <= hi99


def test_too_few_values_give_no_interval():
    assert all(math.isnan(v) for v in percentile_interval(np.array([1.0, 2.0, np.nan]), 95, 0.9))
    assert all(math.isnan(v) for v in percentile_interval(np.array([]), 95, 0.9))


def test_an_overloaded_steps_rising_latencies_give_a_one_sided_interval():
    """The demo sim at 1.5x its capacity for 10 s (virtual time): TTFTs climb all through the window.
    The steady state is at least what the window saw, so the low end is the point and a step over its
    target fails instead of reading as undecided; a stationary series keeps its two-sided interval."""
    from llmload.arrivals import poisson_exact_offsets
    from llmload.runtime.launcher.demo import DEMO_SIM
    from llmload.sim.truth import engine_limits, run_virtual

    offsets = poisson_exact_offsets(8.7, (2.0, 10.0), np.random.default_rng(1))
    got = run_virtual(engine_limits(DEMO_SIM), offsets, np.full(len(offsets), 64), np.full(len(offsets), 32))
    ttft = got["ttft_s"].to_numpy()[offsets >= 2.0]
    assert rising(ttft)
    low, high = percentile_interval(ttft, 95, 0.9)
    assert low == pytest.approx(np.percentile(ttft, 95)) and high >= low
    assert not rising(ar1(600, 0.5, 3))
    x = ar1(600, 0.5, 3)
    assert percentile_interval(x, 95, 0.9)[0] < np.percentile(x, 95)


def test_completions_to_decide_is_where_the_wilson_interval_leaves_the_level() -> None:
    """Independent values (the share's interval from as many trials as completions): at the count it
    returns, the Wilson interval of the same share lies wholly on one side of the level; one fewer does not."""
    from analysis.intervals import completions_to_decide, wilson

    z = NormalDist().inv_cdf(0.95)
    for share, level in ((0.0, 0.05), (0.02, 0.05), (0.12, 0.05), (0.1, 0.03)):
        n = 40
        high = wilson(share, n, z)[1]
        need = completions_to_decide(share, high, n, level, 0.9)
        low_at, high_at = wilson(share, need, z)
        assert (low_at > level) if share > level else (high_at < level), (share, level, need)
        before = wilson(share, need - 1, z)
        assert not ((before[0] > level) if share > level else (before[1] < level)), (share, level, need)
    assert completions_to_decide(0.05, 0.1, 40, 0.05, 0.9) == math.inf  # on the level: never
    assert math.isnan(completions_to_decide(math.nan, 0.1, 40, 0.05, 0.9))


def test_past_the_data_the_high_end_is_the_sample_maximum() -> None:
    """36 independent values bound a p95 from above with 84% (1 - 0.95^36), not the 95% a 90% interval
    needs: the high end is the largest value, not one interpolated under it (a step with one TTFT over
    its 2 s target then read a bound under the target, and passed)."""
    values = np.full(36, 0.2)
    values[[4, 17, 18]] = [1.05, 1.37, 1.38]
    values[19] = 2.19
    low, high = percentile_interval(values, 95, 0.9)
    assert high == pytest.approx(2.19)
    many = np.random.default_rng(3).exponential(1.0, 400)  # inside the data: an order statistic under the maximum
    assert percentile_interval(many, 95, 0.9)[1] < many.max()
