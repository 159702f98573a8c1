"""Small statistics the analysis needs, vectorised and dependency-free (numpy only).

- `quantiles`: percentiles from raw values by **linear interpolation** between order statistics
  (numpy's default, the same as `pandas.Series.quantile`), NaN when there is no value. float32 input
  (per-event gaps) is interpolated in float32.
- `mann_kendall`: the Mann-Kendall trend test, one-sided for an increasing trend. Exact p-value from
  the distribution of inversions when there are no ties (small series such as 6 sub-windows need it:
  the normal approximation is poor there), normal approximation with the tie correction otherwise.
- `sen_slope`: the Theil-Sen slope (median of pairwise slopes), the trend's size per step.
- `binomial_sf`: P(X >= k) for X ~ Binomial(n, p), for error-burst tests.
- `counter_increase`: the increase of a Prometheus counter over samples, resets handled as Prometheus does.
- `busy_integral`: integral over time of the number of open intervals, for time-averaged in-flight.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "QUANTILES",
    "binomial_sf",
    "busy_integral",
    "counter_increase",
    "mann_kendall",
    "quantiles",
    "sen_slope",
    "time_average",
]

#: the percentiles every latency is summarised with (plus the max)
QUANTILES = (50.0, 95.0, 99.0)

_EXACT_MAX_N = 60


def quantiles(values: np.ndarray, qs: tuple[float, ...] = QUANTILES, *,
              scratch: bool = False) -> dict[float | str, float]:
    """`{q: value}` plus `{"max": value}` from raw values (NaN dropped); all NaN when none is left.
    `scratch`: `values` are the caller's to lose, reordered in place when they hold no NaN (no copy of
    a step's millions of gaps)."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f":
        arr = arr.astype(float)
    if not scratch or np.isnan(arr).any():
        arr = arr[~np.isnan(arr)]  # a copy: the partition below may reorder it
    if arr.size == 0:
        return {**{q: math.nan for q in qs}, "max": math.nan}
    top = float(arr.max())
    out = np.percentile(arr, qs, method="linear", overwrite_input=True)
    return {**{q: float(v) for q, v in zip(qs, out, strict=True)}, "max": top}


def _inversion_cdf(n: int) -> np.ndarray:
    """P(inversions <= i) for a random permutation of n distinct values (Mahonian numbers)."""
    dist = np.array([1.0])
    for k in range(2, n + 1):
        dist = np.convolve(dist, np.ones(k))
        dist /= dist.sum()
    return np.cumsum(dist)


def mann_kendall(series: np.ndarray) -> tuple[float, float]:
    """(S, p) of the one-sided Mann-Kendall test for an increasing trend; p = 1 for < 3 values.

    S = sum over pairs i < j of sign(x_j - x_i). Without ties and for n <= 60 the p-value is exact:
    S = n(n-1)/2 - 2 * inversions, and the inversion count of a random order has a known distribution.
    """
    x = np.asarray(series, dtype=float)
    x = x[~np.isnan(x)]
    n = x.size
    if n < 3:
        return 0.0, 1.0
    diff = x[None, :] - x[:, None]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    s = float(np.sign(diff[upper]).sum())
    _, counts = np.unique(x, return_counts=True)
    ties = counts[counts > 1]
    if ties.size == 0 and n <= _EXACT_MAX_N:
        pairs = n * (n - 1) // 2
        max_inversions = int(round((pairs - s) / 2))
        return s, float(min(1.0, _inversion_cdf(n)[max_inversions]))
    var = (n * (n - 1) * (2 * n + 5) - float((ties * (ties - 1) * (2 * ties + 5)).sum())) / 18.0
    if var <= 0 or s <= 0:
        return s, 1.0 if s <= 0 else 0.5
    z = (s - 1.0) / math.sqrt(var)
    return s, 0.5 * math.erfc(z / math.sqrt(2.0))


def sen_slope(series: np.ndarray) -> float:
    """Median of (x_j - x_i) / (j - i) over pairs i < j, by position; NaN for fewer than 2 values."""
    x = np.asarray(series, dtype=float)
    idx = np.flatnonzero(~np.isnan(x))
    if idx.size < 2:
        return math.nan
    i, j = np.triu_indices(idx.size, k=1)
    return float(np.median((x[idx[j]] - x[idx[i]]) / (idx[j] - idx[i])))


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact for the sizes of a run)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])
    ks = np.arange(k, n + 1)
    logs = log_fact[n] - log_fact[ks] - log_fact[n - ks] + ks * math.log(p) + (n - ks) * math.log1p(-p)
    top = logs.max()
    return float(min(1.0, math.exp(top) * np.exp(logs - top).sum()))


def counter_increase(values: np.ndarray) -> float:
    """Increase of a counter over time-ordered samples; a drop is a reset (the new value counts)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size < 2:
        return 0.0 if v.size == 1 else math.nan
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def busy_integral(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`: integral from -inf to that time of the count of intervals [start, end) open.

    O((n + m) log n): F(b) = sum over starts < b of (b - s) - sum over ends < b of (b - e).
    Differences of F over a window divided by its length give a time-averaged in-flight count.
    """
    s = np.sort(np.asarray(starts, dtype=float))
    e = np.sort(np.asarray(ends, dtype=float))
    at = np.asarray(at, dtype=float)
    cs = np.concatenate([[0.0], np.cumsum(s)])
    ce = np.concatenate([[0.0], np.cumsum(e)])
    ns = np.searchsorted(s, at, side="left")
    ne = np.searchsorted(e, at, side="left")
    return (at * ns - cs[ns]) - (at * ne - ce[ne])


def time_average(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of open intervals within each [edges[i], edges[i+1])."""
    edges = np.asarray(edges, dtype=float)
    f = busy_integral(starts, ends, edges)
    width = np.diff(edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(width > 0, np.diff(f) / width, np.nan)
