"""The small statistics under the verdicts, against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import stats
from analysis.stats import binomial_sf, busy_integral, counter_increase, mann_kendall, quantiles, sen_slope


def test_mann_kendall_exact_p_for_small_series() -> None:
    # strictly increasing 6 values: S = 15, only 1 of 6! orders is as extreme
    assert mann_kendall([1, 2, 3, 4, 5, 6]) == (15.0, pytest.approx(1 / 720))
    # one swap: S = 13; orders with at most one inversion: 1 + 5 = 6
    assert mann_kendall([2, 1, 3, 4, 5, 6]) == (13.0, pytest.approx(6 / 720))
    assert mann_kendall([6, 5, 4, 3, 2, 1])[1] == pytest.approx(1.0)
    assert mann_kendall([3, 3, 3, 3, 3, 3]) == (0.0, 1.0)
    assert mann_kendall([1, 2]) == (0.0, 1.0)


def test_mann_kendall_with_ties_uses_the_normal_approximation() -> None:
    s, p = mann_kendall([1, 1, 2, 2, 3, 3, 4, 4])
    assert s == 24.0 and p < 0.01


def test_sen_slope_and_quantiles() -> None:
    # pairwise slopes: (0,1)=1 (0,2)=1 (0,10)=10/3 (1,2)=1 (1,10)=4.5 (2,10)=8 -> median (1 + 10/3) / 2
    assert sen_slope([0, 1, 2, 10]) == pytest.approx((1 + 10 / 3) / 2)
    q = quantiles(np.array([1.0, 2.0, 3.0, 4.0, np.nan]))
    assert q[50.0] == pytest.approx(2.5) and q[95.0] == pytest.approx(3.85) and q["max"] == 4.0
    assert math.isnan(quantiles(np.array([]))[95.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_radix_percentiles_are_numpys_bit_for_bit(monkeypatch, dtype) -> None:
    """Issue 46: a step's tens of millions of gaps are selected by their bits, not partitioned; the
    percentiles are `np.percentile`'s to the last bit (ties, zeros, one value, huge and tiny values), and
    values it cannot order by their bits (negative, -0.0) go to the partition."""
    monkeypatch.setattr(stats, "RADIX_MIN", 1)
    rng = np.random.default_rng(5)
    qs = (50.0, 95.0, 99.0, 0.0, 100.0, 99.9, 1.0)
    cases = [rng.lognormal(-3, 0.3, 100_003), rng.integers(0, 5, 1001).astype(float), np.full(17, 0.25),
             np.array([0.3]), np.array([2.0, 1.0]), rng.exponential(1.0, 4097) * 1e-6,
             np.concatenate([np.zeros(500), rng.uniform(0, 1e30, 501), [1e38]])]
    for values in cases:
        x = values.astype(dtype)
        expected = np.percentile(x, qs)
        got = stats._radix_percentiles(x.copy(), qs)
        assert got is not None and got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
        assert quantiles(x.copy(), qs) == quantiles(x.copy(), qs, scratch=True)
        assert [quantiles(x, qs)[q] for q in qs] == expected.tolist()
    assert stats._radix_percentiles(np.array([-1.0, 2.0], dtype=dtype), qs) is None
    assert stats._radix_percentiles(np.array([-0.0, 2.0], dtype=dtype), qs) is None
    assert quantiles(np.array([-1.0, 2.0, 3.0], dtype=dtype))[50.0] == 2.0


def test_counter_increase_handles_resets() -> None:
    assert counter_increase([5, 7, 9]) == 4.0
    assert counter_increase([5, 7, 2, 3]) == 2.0 + 2.0 + 1.0  # reset to 2 counts as +2
    assert counter_increase([5]) == 0.0 and math.isnan(counter_increase([]))


def test_busy_integral_and_binomial_tail() -> None:
    # intervals [0,2) and [1,3): integral up to 1, 2, 3 = 1, 3, 4
    assert busy_integral([0, 1], [2, 3], [1, 2, 3]) == pytest.approx([1, 3, 4])
    # P(X >= 3) for Binomial(10, 0.1) = 1 - (0.9^10 + 10 0.1 0.9^9 + 45 0.01 0.9^8)
    expected = 1 - (0.9 ** 10 + 10 * 0.1 * 0.9 ** 9 + 45 * 0.01 * 0.9 ** 8)
    assert binomial_sf(3, 10, 0.1) == pytest.approx(expected)
    assert binomial_sf(0, 10, 0.1) == 1.0 and binomial_sf(11, 10, 0.1) == 0.0
