"""Soak runs analysed in time slices (issue 10): drift across slices, memory growth, error bursts.

The steps of phase `soak` are the slices. For each series across slices (p95 TTFT, TPOT, E2E, error
rate, server waiting, KV usage peak, GPU memory peak) a one-sided Mann-Kendall test for an increasing
trend at `alpha`; a series is **drifting** when p < alpha and its Theil-Sen rise across the soak is at
least a minimum size (`DRIFT_MIN`: relative to the series' median for latencies and memory, absolute
for ratios and queue lengths), so a statistically clear rise too small to matter is not flagged.
**Memory growth** is drift of GPU memory or KV usage. An **error burst** is a slice whose error count
(every non-ok outcome of a sent request) is improbably high against the soak's overall error rate:
binomial P(X >= x) under alpha / number of slices (Bonferroni), with at least 3 errors.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import binomial_sf, mann_kendall, sen_slope
from shapes.phases import phases_where

__all__ = ["DRIFT_MIN", "SLICE_COLUMNS", "soak_slices"]

#: metric -> (kind, minimum rise across the soak) for a significant trend to count as drift
DRIFT_MIN = {
    "ttft_p95_s": ("relative", 0.10), "tpot_p95_s": ("relative", 0.10), "e2e_p95_s": ("relative", 0.10),
    "error_rate": ("absolute", 0.01), "waiting_mean": ("absolute", 1.0), "kv_usage_peak": ("absolute", 0.05),
    "gpu_memory_peak_bytes": ("relative", 0.01),
}
SLICE_COLUMNS = ("label", "window_start", "window_end", "arrivals", "errors", "error_rate", "ttft_p95_s",
                 "tpot_p95_s", "e2e_p95_s", "waiting_mean", "kv_usage_peak", "gpu_memory_peak_bytes",
                 "verdict")


def _errors(outcomes: dict | None) -> int:
    if not outcomes:
        return 0
    return int(sum(v for k, v in outcomes.items() if k not in ("ok", "not_sent")))


def _trend(metric: str, series: np.ndarray, slice_s: float, alpha: float) -> dict:
    _s, p = mann_kendall(series)
    slope = sen_slope(series)
    n = int((~np.isnan(series)).sum())
    rise = slope * (n - 1) if n >= 2 else math.nan
    kind, minimum = DRIFT_MIN[metric]
    if kind == "relative":
        median = float(np.nanmedian(series)) if n else math.nan
        size = rise / abs(median) if median else (math.inf if rise and rise > 0 else 0.0)
    else:
        size = rise
    drifting = bool(n >= 3 and p < alpha and not math.isnan(size) and size >= minimum)
    return {"metric": metric, "p": p, "slope_per_slice": slope,
            "slope_per_hour": slope * 3600.0 / slice_s if slice_s > 0 else math.nan,
            "rise": rise, "drifting": drifting}


def soak_slices(steps: pd.DataFrame, *, alpha: float = 0.05) -> tuple[pd.DataFrame | None, dict | None]:
    """(one row per soak slice with an `error_burst` flag,
    {slices, slice_s, alpha, trends, drifting, memory_growth, error_bursts})."""
    if steps.empty:
        return None, None
    soak = steps[(steps["phase"].isin(phases_where(slices=True))) & (steps["verdict"] != "not_run")]
    if soak.empty:
        return None, None
    errors = soak["outcomes"].map(_errors).astype(int)
    sent = soak["sent"].astype(float)
    slices = soak.assign(errors=errors, error_rate=(errors / sent.where(sent > 0)).astype(float))
    slices = slices[list(SLICE_COLUMNS)].reset_index(drop=True)
    total_sent, total_errors = float(sent.sum()), int(errors.sum())
    rate = total_errors / total_sent if total_sent else 0.0
    bonferroni = alpha / len(slices)
    p_burst = [binomial_sf(int(x), int(n), rate) if n > 0 else 1.0
               for x, n in zip(slices["errors"], sent.fillna(0).astype(int), strict=True)]
    slices = slices.assign(error_burst_p=p_burst,
                           error_burst=[(p < bonferroni and x >= 3)
                                        for p, x in zip(p_burst, slices["errors"], strict=True)])
    slice_s = float((slices["window_end"] - slices["window_start"]).median())
    trends = [_trend(m, slices[m].to_numpy(dtype=float), slice_s, alpha) for m in DRIFT_MIN]
    drifting = [t["metric"] for t in trends if t["drifting"]]
    result = {
        "slices": len(slices), "slice_s": slice_s, "alpha": alpha, "trends": trends, "drifting": drifting,
        "memory_growth": any(m in drifting for m in ("gpu_memory_peak_bytes", "kv_usage_peak")),
        "error_bursts": slices.loc[slices["error_burst"], "label"].astype(str).tolist(),
    }
    return slices, result
