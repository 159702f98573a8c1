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
    out = _radix_percentiles(arr, qs) if arr.size >= RADIX_MIN else None
    if out is None:
        out = np.percentile(arr, qs, method="linear", overwrite_input=True)
    return {**{q: float(v) for q, v in zip(qs, out, strict=True)}, "max": top}


#: values from which `quantiles` selects its order statistics by their bits (`_radix_percentiles`): a
#: step's tens of millions of event gaps, where a partition is several passes over them
RADIX_MIN = 1 << 22
#: values per pass of the radix selection (its temporaries are a block's)
_RADIX_BLOCK = 1 << 22
#: the radix selection's bins: the top 20 bits of each value
_RADIX_BINS_BITS = 20


def _radix_percentiles(arr: np.ndarray, qs: tuple[float, ...]) -> np.ndarray | None:
    """`np.percentile(arr, qs, method="linear")`, the same bits, for NaN-free float32 / float64 values
    that are all >= +0.0 (None otherwise: the caller partitions). Such values order as their bit
    patterns do: one pass counts the values per bin of their top bits, which gives the bin of each
    order statistic the percentiles read; a second pass gathers those bins' values only, partitioned
    to the exact order statistics; these are interpolated as numpy's `_quantile` does."""
    uint = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}.get(arr.dtype)
    if uint is None or arr.ndim != 1:
        return None
    bits = arr.view(uint)
    if int(bits.max()) >> (8 * arr.itemsize - 1):  # a negative value, -0.0 or a negative NaN
        return None
    n = arr.size
    # numpy's linear method: virtual index (n - 1) q, its floor and the next, clamped (`_get_indexes`)
    q = np.true_divide(qs, 100)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = following[above] = -1
    below = virtual < 0
    previous[below] = following[below] = 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    ranks = np.unique(np.concatenate([previous, following]) % n)
    values = dict(zip(ranks.tolist(), _order_statistics(arr, bits, ranks).tolist(), strict=True))
    a = np.array([values[int(r) % n] for r in previous], dtype=arr.dtype)
    b = np.array([values[int(r) % n] for r in following], dtype=arr.dtype)
    gamma = np.asanyarray(virtual - previous, dtype=virtual.dtype)  # `_get_gamma`
    diff = b - a  # `_lerp`
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=type(out.dtype))
    return out


def _order_statistics(arr: np.ndarray, bits: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """`np.sort(arr)[ranks]` (`bits`: `arr`'s non-negative values as unsigned integers, same order)."""
    shift = bits.dtype.type(8 * bits.itemsize - _RADIX_BINS_BITS)
    size = 1 << _RADIX_BINS_BITS
    counts = np.zeros(size, dtype=np.int64)
    for at in range(0, bits.size, _RADIX_BLOCK):
        counts += np.bincount(bits[at:at + _RADIX_BLOCK] >> shift, minlength=size)
    ends = np.cumsum(counts)
    bins = np.searchsorted(ends, ranks, side="right")  # the bin of each rank
    wanted = np.zeros(size, dtype=bool)
    wanted[bins] = True
    parts = [arr[at:at + _RADIX_BLOCK][wanted[bits[at:at + _RADIX_BLOCK] >> shift]]
             for at in range(0, bits.size, _RADIX_BLOCK)]
    gathered = np.concatenate(parts)
    gathered_bins = gathered.view(bits.dtype) >> shift
    out = np.empty(ranks.size, dtype=arr.dtype)
    for b in np.unique(bins):
        own = gathered[gathered_bins == b]
        where = np.flatnonzero(bins == b)
        local = ranks[where] - (ends[b] - counts[b])  # ranks inside the bin
        out[where] = np.partition(own, local)[local]
    return out


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
