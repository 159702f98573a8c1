"""Quantiles of a server histogram over a window, from the deltas of its cumulative buckets.

`histogram_quantile` follows Prometheus `histogram_quantile`: find the bucket holding rank `q * count`,
interpolate linearly inside it (lower bound 0 for the first bucket), and if the rank falls in `+Inf`
return the highest finite bound. The bucket's width is returned with the value: the estimate is only as
good as that resolution, and `inf` says it is a lower bound.

    >>> histogram_quantile([0.1, 0.5, float("inf")], [2, 4, 4], 0.5)
    (0.1, 0.1)
"""

from __future__ import annotations

import bisect
import math

import pandas as pd

from llmload.telemetry.exposition import parse_labels
from llmload.telemetry.series import counter_delta, series_deltas

__all__ = [
    "histogram_bucket_range",
    "histogram_buckets_between",
    "histogram_quantile",
    "histogram_quantile_between",
    "histogram_summary",
    "queue_time_quantile",
]


def histogram_quantile(bounds: list[float], counts: list[float], q: float) -> tuple[float | None, float]:
    """Quantile `q` of cumulative bucket `counts` at upper `bounds` (sorted, last `inf`).

    Returns `(value, resolution)`; `(None, nan)` when there are no observations or no `+Inf` bucket.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not bounds or bounds[-1] != math.inf or len(bounds) != len(counts):
        return None, math.nan
    cumulative: list[float] = []
    for c in counts:  # Prometheus forces monotonic buckets (scrapes are not atomic)
        cumulative.append(max(c, cumulative[-1]) if cumulative else c)
    total = cumulative[-1]
    if total <= 0:
        return None, math.nan
    rank = q * total
    b = bisect.bisect_left(cumulative, rank)
    if b >= len(bounds) - 1:  # in +Inf: the highest finite bound, a lower bound of the truth
        return (bounds[-2] if len(bounds) > 1 else None), math.inf
    end = bounds[b]
    if b == 0 and end <= 0:
        return end, 0.0
    start = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else cumulative[b - 1]
    in_bucket = cumulative[b] - below
    if in_bucket <= 0:
        return start, end - start
    return start + (end - start) * (rank - below) / in_bucket, end - start


def histogram_bucket_range(bounds: list[float], counts: list[float], q: float) -> tuple[float, float] | None:
    """The bucket `[low, high]` that quantile `q` of cumulative bucket `counts` lies in: all a histogram
    says about it (`high` is `inf` past the last finite bound); None without observations.

        >>> histogram_bucket_range([0.3, 0.5, float("inf")], [9, 10, 10], 0.95)
        (0.3, 0.5)
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not bounds or bounds[-1] != math.inf or len(bounds) != len(counts):
        return None
    cumulative: list[float] = []
    for c in counts:
        cumulative.append(max(c, cumulative[-1]) if cumulative else c)
    if cumulative[-1] <= 0:
        return None
    b = bisect.bisect_left(cumulative, q * cumulative[-1])
    b = min(b, len(bounds) - 1)
    low = 0.0 if b == 0 else bounds[b - 1]
    return (min(low, bounds[b]), bounds[b])


def histogram_buckets_between(telemetry: pd.DataFrame, metric: str, t0: float, t1: float, *,
                              source: str | None = None) -> tuple[list[float], list[float]]:
    """Cumulative bucket counts of histogram `metric` (base name) observed during `[t0, t1]`.

    Series with the same bound are summed across sources and other labels (model, engine).
    """
    deltas = series_deltas(telemetry, f"{metric}_bucket", t0, t1, source=source)
    if deltas.empty:
        return [], []
    le = deltas["labels"].map(lambda text: parse_labels(text).get("le"))
    deltas = deltas.assign(le=pd.to_numeric(le.str.replace("+Inf", "inf", regex=False), errors="coerce"))
    per_bound = deltas.dropna(subset=["le"]).groupby("le", sort=True)["delta"].sum()
    return [float(b) for b in per_bound.index], [float(c) for c in per_bound.to_numpy()]


def histogram_quantile_between(telemetry: pd.DataFrame, metric: str, t0: float, t1: float, q: float, *,
                               source: str | None = None) -> tuple[float | None, float]:
    """Quantile `q` of any histogram (normalised `ttft_seconds` or raw `vllm:e2e_request_latency_seconds`)
    over the observations made during `[t0, t1]`; `(value, bucket resolution)`."""
    bounds, counts = histogram_buckets_between(telemetry, metric, t0, t1, source=source)
    return histogram_quantile(bounds, counts, q)


def queue_time_quantile(telemetry: pd.DataFrame, t0: float, t1: float, q: float,
                        source: str | None = None) -> tuple[float | None, float]:
    """Server queue time quantile over `[t0, t1]` from the `queue_time_seconds` histogram deltas."""
    return histogram_quantile_between(telemetry, "queue_time_seconds", t0, t1, q, source=source)


def histogram_summary(telemetry: pd.DataFrame, metric: str, t0: float, t1: float, *,
                      quantiles: tuple[float, ...] = (0.5, 0.95, 0.99), source: str | None = None) -> dict:
    """`count`, exact `mean` (from `_sum`/`_count` deltas) and `p50`, `p50_resolution`, ... over `[t0, t1]`.

    Values are in the histogram's unit (seconds for the time histograms); None where nothing was observed.
    """
    count = counter_delta(telemetry, f"{metric}_count", t0, t1, source=source)
    total = counter_delta(telemetry, f"{metric}_sum", t0, t1, source=source)
    out: dict = {"count": count, "mean": total / count if count and total is not None else None}
    bounds, counts = histogram_buckets_between(telemetry, metric, t0, t1, source=source)
    for q in quantiles:
        value, resolution = histogram_quantile(bounds, counts, q)
        out[f"p{q * 100:g}"], out[f"p{q * 100:g}_resolution"] = value, resolution
    return out
