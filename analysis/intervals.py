"""Percentile intervals that respect autocorrelation (METRICS.md "The percentile interval").

Requests near the knee share queue states for tens of seconds, so a step's latencies are far from
independent: 300 samples may carry the information of 20. An i.i.d. formula then gives intervals far
too narrow. The interval here is the distribution-free one for a quantile (the order statistics around
it), with the sample size replaced by an *effective* sample size measured on the data:

1. Order the step's completed requests by `scheduled_at`; `x` their values, `n` how many, `p = q / 100`.
2. The exceedance indicator `I_i = 1[x_i > Q(p)]` (`Q` the linear-interpolation quantile of `x`) is what
   decides the percentile's variance (Bahadur: `Var Q(p) ~ Var(mean I) / f^2`). Its integrated
   autocorrelation time `tau = 1 + 2 sum_k rho_k` is estimated with Geyer's initial monotone sequence
   (sums of pairs of autocorrelations while positive, made non-increasing), and bounded below by the
   batch-means estimate over blocks of `block = ceil(sqrt(n))` consecutive requests (the block size
   grows with the step, so blocks outlast the correlation as the step gets longer). A rare indicator
   (5% ones) gives a noisy estimate, so `tau` is the larger of the indicator's and the one of the
   values' ranks (same estimator): conservative, and it met its coverage on AR(1) series where the
   indicator's alone did not (tests/analysis/test_intervals.py). `n_eff = n / tau`.
3. A Wilson score interval at `confidence` for the proportion `p` with `n_eff` trials gives
   `[p_low, p_high]`; the percentile's interval is `[Q(p_low), Q(p_high)]`. Past the data
   (`p_high` above `1 - 1 / n_eff`: under one effective value expected over it) the high end is the
   sample maximum: the data say nothing beyond it, and a value interpolated under the maximum is no
   bound (36 values with one at 2.19 s read a p95 bound of 1.87 s against a 2 s target: a false pass).

4. A rising step: when the values, in `blocks` consecutive blocks of equal count, have block medians with
   a significant rising trend (one-sided Mann-Kendall, p < `alpha`), the step had not reached its steady
   state (an overloaded queue still building, or a step that started on an empty server near the knee):
   its steady-state percentile is at least what the window saw, so the low end is the point itself
   (the interval is one-sided below). Without this, an overloaded step's steadily rising latencies read
   as "autocorrelated" and its interval reached far under the point: a clear failure looked undecided.

`exceedance_interval(values, limit, confidence)`: the share of the values over `limit` (an SLO threshold)
with its interval, the same way (a Wilson interval with `n / tau` trials, tau the larger of the
indicator's and the ranks'; one-sided below on a rising step). A share is a mean, so unlike a step's
percentile it is not biased low when a short window misses the queue's rare long episodes: the knee
(`analysis.knee`) is placed where the share crosses `1 - q / 100`.

`iid_percentile_interval` is the same with `tau = 1` (the i.i.d. formula), kept to show in tests how
much it under-covers an autocorrelated series.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from analysis.stats import mann_kendall

__all__ = ["MIN_VALUES", "autocorrelation_time", "completions_to_decide", "effective_trials", "exceedance_interval",
           "iid_percentile_interval", "percentile_interval", "rank_tau", "rising", "wilson"]

#: fewer values than this: no interval (NaN, NaN)
MIN_VALUES = 5
#: blocks and one-sided level of the rising-trend check (the SLO's `sub_windows` and `trend_alpha` defaults)
TREND_BLOCKS = 6
TREND_ALPHA = 0.05


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def autocorrelation_time(series: np.ndarray) -> float:
    """Integrated autocorrelation time of `series` (>= 1), Geyer's initial monotone sequence estimator,
    bounded below by batch means over blocks of ceil(sqrt(n)); 1.0 for a constant or too short series."""
    x = np.asarray(series, dtype=float)
    n = x.size
    if n < 3:
        return 1.0
    x = x - x.mean()
    var = float(x @ x) / n
    if var <= 0:
        return 1.0
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, size)
    acov = np.fft.irfft(f * np.conj(f), size)[:n] / n
    rho = acov / acov[0]
    tau, prev = -1.0, math.inf
    for m in range(n // 2):
        pair = rho[2 * m] + (rho[2 * m + 1] if 2 * m + 1 < n else 0.0)
        if pair <= 0:
            break
        pair = min(pair, prev)
        tau += 2.0 * pair
        prev = pair
    return float(min(max(tau, 1.0, _batch_means_tau(x, var)), n))


def _batch_means_tau(centred: np.ndarray, var: float) -> float:
    """tau from the variance of means over consecutive blocks of ceil(sqrt(n)) values (>= 3 blocks)."""
    n = centred.size
    block = math.ceil(math.sqrt(n))
    blocks = n // block
    if blocks < 3:
        return 1.0
    means = centred[: blocks * block].reshape(blocks, block).mean(axis=1)
    return float(block * means.var(ddof=1) / var)


def wilson(p: float, n_eff: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion `p` seen in `n_eff` trials, at normal quantile `z`."""
    z2 = z * z
    denom = 1.0 + z2 / n_eff
    centre = (p + z2 / (2.0 * n_eff)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n_eff + z2 / (4.0 * n_eff * n_eff))
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_trials(share: float, high: float, z: float) -> float | None:
    """The trials of a Wilson interval at `z` whose high end over `share` is `high`: how many independent
    values a share's interval is worth (None when the interval has no width above the share)."""
    if not high > share or high >= 1.0:
        return None
    lo_n, hi_n = 0.5, 1e7
    for _ in range(60):
        mid = math.sqrt(lo_n * hi_n)
        lo_n, hi_n = (mid, hi_n) if wilson(share, mid, z)[1] > high else (lo_n, mid)
    return math.sqrt(lo_n * hi_n)


#: `completions_to_decide` says no more than this many times the completions a step had ("over 100x")
DECIDE_CAP = 100.0


def completions_to_decide(share: float, share_high: float, completed: float, level: float,
                          confidence: float) -> float:
    """About how many completions a step like this one needs before its target is decided: the share of
    values over the threshold (`share`, its interval's high end `share_high`, over `completed` values)
    must have a `confidence` Wilson interval wholly on one side of `level` (1 - q / 100), at the
    effective trials per completion this step showed (its autocorrelation). `inf` when the share sits
    on the level, or it would take over `DECIDE_CAP` times the completions; NaN without a share.

    >>> round(completions_to_decide(0.0, 0.08, 30, 0.05, 0.9))  # 30 values, none over: ~52 decide a P95 pass
    52
    """
    if any(v != v for v in (share, share_high, completed)) or completed <= 0:
        return math.nan
    z = _z(confidence)
    trials = effective_trials(share, share_high, z) or completed
    per_completion = min(1.0, trials / completed)
    if share == level:
        return math.inf

    def decided(n: float) -> bool:
        low, high = wilson(share, n, z)
        return low > level if share > level else high < level

    cap = DECIDE_CAP * completed * per_completion
    if not decided(cap):
        return math.inf
    lo_n, hi_n = 1.0, cap
    for _ in range(60):
        mid = (lo_n + hi_n) / 2
        lo_n, hi_n = (lo_n, mid) if decided(mid) else (mid, hi_n)
    return math.ceil(hi_n / per_completion)


def rising(values: np.ndarray, *, blocks: int = TREND_BLOCKS, alpha: float = TREND_ALPHA) -> bool:
    """True when the medians of `blocks` consecutive equal-count blocks of `values` (time order) rise
    significantly (one-sided Mann-Kendall p < `alpha`); False with fewer than 2 values per block."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    size = x.size // blocks
    if blocks < 3 or size < 2:
        return False
    medians = np.median(x[: size * blocks].reshape(blocks, size), axis=1)
    return mann_kendall(medians)[1] < alpha


def rank_tau(values: np.ndarray) -> float:
    """The autocorrelation time of the ranks of `values` (time order, NaN dropped): the part of an
    interval's tau that does not depend on the percentile or the limit, so one series' percentile and
    exceedance intervals can share it (`rank_tau=`)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    ranks = np.empty(x.size)
    ranks[np.argsort(x, kind="stable")] = np.arange(x.size)
    return autocorrelation_time(ranks)


def _tau(x: np.ndarray, indicator: np.ndarray, ranks_tau: float | None = None) -> float:
    return max(autocorrelation_time(indicator), rank_tau(x) if ranks_tau is None else ranks_tau)


def exceedance_interval(values: np.ndarray, limit: float, confidence: float, *, blocks: int = TREND_BLOCKS,
                        alpha: float = TREND_ALPHA, ranks_tau: float | None = None) -> tuple[float, float, float]:
    """(share, low, high): the share of `values` (time order) over `limit` and its `confidence` interval,
    autocorrelation-aware (module docstring); NaNs with fewer than `MIN_VALUES` values.

    >>> [round(v, 3) for v in exceedance_interval(np.arange(100.0) % 10, 8.5, 0.9)]
    [0.1, 0.05, 0.191]
    """
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size < MIN_VALUES:
        return math.nan, math.nan, math.nan
    indicator = (x > limit).astype(float)
    share = float(indicator.mean())
    low, high = wilson(share, x.size / _tau(x, indicator, ranks_tau), _z(confidence))
    if rising(x, blocks=blocks, alpha=alpha):
        low = share
    return share, min(low, share), max(high, share)


def _interval(values: np.ndarray, q: float, confidence: float, *, iid: bool, blocks: int = TREND_BLOCKS,
              alpha: float = TREND_ALPHA, ranks_tau: float | None = None) -> tuple[float, float]:
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = x.size
    if n < MIN_VALUES or not 0 < q < 100:
        return math.nan, math.nan
    p = q / 100.0
    point = float(np.percentile(x, q))
    tau = 1.0 if iid else _tau(x, (x > point).astype(float), ranks_tau)
    n_eff = n / tau
    p_low, p_high = wilson(p, n_eff, _z(confidence))
    ordered = np.sort(x)
    low = float(np.percentile(ordered, 100.0 * p_low))
    # past the data (under one effective value expected over the bound): the sample maximum, not a value
    # interpolated under it (36 values with one over 2 s gave a p95 bound of 1.87 s, and a pass)
    high = float(ordered[-1] if p_high > 1.0 - 1.0 / n_eff else np.percentile(ordered, 100.0 * p_high))
    if not iid and rising(x, blocks=blocks, alpha=alpha):
        low = point  # not yet at its steady state, which is at least what the window saw
    return min(low, point), max(high, point)


def percentile_interval(values: np.ndarray, q: float, confidence: float, *, blocks: int = TREND_BLOCKS,
                        alpha: float = TREND_ALPHA, ranks_tau: float | None = None) -> tuple[float, float]:
    """(low, high): the two-sided `confidence` interval of the `q`-th percentile of `values`, which must
    be in time order (by `scheduled_at`); autocorrelation-aware, one-sided below when the values rise
    (`blocks`, `alpha`: the trend check; module docstring). (NaN, NaN) with fewer than `MIN_VALUES` values.

    >>> values = np.random.default_rng(1).exponential(1.0, 2000)  # independent: tau about 1
    >>> [round(v, 2) for v in percentile_interval(values, 95, 0.9)]
    [2.69, 3.05]
    """
    return _interval(values, q, confidence, iid=False, blocks=blocks, alpha=alpha, ranks_tau=ranks_tau)


def iid_percentile_interval(values: np.ndarray, q: float, confidence: float) -> tuple[float, float]:
    """The same interval as if the values were independent (tau = 1): too narrow on a correlated series."""
    return _interval(values, q, confidence, iid=True)
