"""Soak runs analysed in time slices (issue 10): drift across slices, memory growth, error bursts.

The steps of phase `soak` are the slices. For each series across slices (p95 TTFT, TPOT, E2E, error
rate, server waiting, KV usage peak, GPU memory peak) a one-sided Mann-Kendall test for an increasing
trend at `alpha`; a series is **drifting** when p < alpha and its Theil-Sen rise across the soak is at
least a minimum size (`DRIFT_MIN`: relative to the series' median for latencies and memory, absolute
for ratios and queue lengths), so a statistically clear rise too small to matter is not flagged.
**Memory growth** is drift of GPU memory or KV usage. An **error burst** is a slice whose error count
(every non-ok outcome of a sent request) is improbably high against the soak's overall error rate:
binomial P(X >= x) under alpha / number of slices (Bonferroni), with at least 3 errors.

**At any length** (issue 46): a soak reports at most `MAX_SLICES` slices, so an 8-hour soak of 1-minute
slices is a table of 48 rows and a plot of 48 points, not 480. When the plan ran more slices, consecutive
ones are merged into at most `MAX_SLICES` reported slices of near-equal size (`slice_groups`), and each
merged slice is computed from its own records exactly as one slice of that length would be
(`merged_slice_row`: the same `step_metrics` and `judge` on the union of its plan slices' records, read
from disk a merged slice at a time), so its p95s are true p95s, not a mean of the plan slices' p95s.
The trend tests run on the reported slices; the error bursts on the plan's slices (a burst in one minute
is not diluted into ten), each reported slice flagging the bursts it holds. Memory: a merged slice's
records at a time; the plan's slices themselves were computed a step at a time by `analysis.pipeline`.
docs/METRICS.md "Soak: drift across time slices" has the definitions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import binomial_sf, mann_kendall, sen_slope
from shapes.phases import phases_where

__all__ = ["DRIFT_MIN", "MAX_SLICES", "SLICE_COLUMNS", "merged_slice_row", "merged_step", "slice_groups",
           "soak_slices"]

#: the most slices a soak reports (table rows, plot points, trend-test points): more are merged. 48: an
#: 8-hour soak of 10-minute slices (the default `slice`) is reported slice by slice
MAX_SLICES = 48

#: metric -> (kind, minimum rise across the soak) for a significant trend to count as drift
DRIFT_MIN = {
    "ttft_p95_s": ("relative", 0.10), "tpot_p95_s": ("relative", 0.10), "e2e_p95_s": ("relative", 0.10),
    "error_rate": ("absolute", 0.01), "waiting_mean": ("absolute", 1.0), "kv_usage_peak": ("absolute", 0.05),
    "gpu_memory_peak_bytes": ("relative", 0.01),
}
SLICE_COLUMNS = ("label", "elapsed", "slices", "window_start", "window_end", "arrivals", "errors", "error_rate", "ttft_p95_s",
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


def slice_groups(labels: list[str], most: int = MAX_SLICES) -> list[list[str]]:
    """The plan's slices (in order) as the slices reported: each alone when there are at most `most`, else
    consecutive runs of near-equal size (sizes differ by at most one), at most `most` of them."""
    if len(labels) <= most:
        return [[label] for label in labels]
    per = math.ceil(len(labels) / most)
    return [list(part) for part in np.array_split(np.array(labels, dtype=object), math.ceil(len(labels) / per))]


def merged_step(plan_steps: list[dict]) -> dict:
    """One plan step standing for consecutive soak slices run back to back: their label range
    (`soak-000..059`), the first one's start and window start, the last one's window end and drain,
    their planned arrivals summed, per worker the clock entry with the largest error."""
    first, last = plan_steps[0], plan_steps[-1]
    if len(plan_steps) == 1:
        return dict(first)
    label = f"{first['label']}..{str(last['label']).rsplit('-', 1)[-1]}"
    statuses = {s.get("status") for s in plan_steps}
    planned = [s.get("planned_arrivals") for s in plan_steps]
    total = None if any(p is None for p in planned) else sum(int(p) for p in planned if p is not None)
    clocks: dict[str, dict] = {}
    for step in plan_steps:
        for worker, entry in (step.get("clock") or {}).items():
            if not isinstance(entry, dict):
                continue
            held = clocks.get(worker)
            if held is None or float(entry.get("error_s") or 0.0) > float(held.get("error_s") or 0.0):
                clocks[worker] = entry
    return {**first, "label": label, "window_end": last.get("window_end"), "drain": last.get("drain"),
            "drain_deadline": last.get("drain_deadline"), "drained_at": last.get("drained_at"),
            "status": "partial" if "partial" in statuses else first.get("status"),
            "planned_arrivals": total,
            "duration_s": sum(float(s.get("duration_s") or 0.0) for s in plan_steps),
            "cancelled": any(bool(s.get("cancelled")) for s in plan_steps),
            "lost_workers": sorted({w for s in plan_steps for w in (s.get("lost_workers") or [])}),
            "clock": clocks or first.get("clock")}


def merged_slice_row(labels: list[str], plan_steps: list[dict], read: Callable[[np.ndarray], tuple[pd.DataFrame, Any]],
                     groups: dict[str, np.ndarray], windows: dict[str, tuple[float, float]], slo: Any,
                     client: Any, tel: Any) -> dict:
    """The judged row of the plan slices `labels` merged into one: their records read together
    (`read(positions) -> (records, event gaps)`, `RecordSource.rows_and_gaps`), derived with each
    request's own slice window (back to back, their union is the merged window), then the step figures and
    the verdict of `merged_step`, as for any step."""
    from analysis.requests import derive_requests
    from analysis.steps import judged_step_row

    by_label = {str(s["label"]): s for s in plan_steps}
    empty = np.array([], dtype=np.int64)
    pos = np.concatenate([groups.get(label, empty) for label in labels])
    pos = np.sort(pos) if pos.size > 1 and (np.diff(pos) < 0).any() else pos
    records, gaps = read(pos)
    requests = derive_requests(records, windows, slo)
    del records
    return judged_step_row(requests, merged_step([by_label[label] for label in labels]), slo, client, tel, gaps,
                           np.arange(len(requests)))


def _elapsed(seconds: float) -> str:
    if seconds != seconds:
        return ""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _with_errors(rows: pd.DataFrame) -> pd.DataFrame:
    errors = rows["outcomes"].map(_errors).astype(int)
    sent = rows["sent"].astype(float)
    return rows.assign(errors=errors, error_rate=(errors / sent.where(sent > 0)).astype(float))


def soak_slices(steps: pd.DataFrame, *, alpha: float = 0.05, merge: Callable[[list[str]], dict] | None = None,
                most: int = MAX_SLICES) -> tuple[pd.DataFrame | None, dict | None]:
    """(one row per reported soak slice with an `error_burst` flag,
    {slices, slice_s, plan_slices, plan_slice_s, merged, alpha, trends, drifting, memory_growth, error_bursts}).

    `merge(labels) -> judged step row` computes a merged slice (`merged_slice_row`); without it (no
    records at hand) every plan slice is reported."""
    if steps.empty:
        return None, None
    soak = steps[(steps["phase"].isin(phases_where(slices=True))) & (steps["verdict"] != "not_run")]
    if soak.empty:
        return None, None
    plan = _with_errors(soak.reset_index(drop=True))
    sent = plan["sent"].astype(float)
    total_sent, total_errors = float(sent.sum()), int(plan["errors"].sum())
    rate = total_errors / total_sent if total_sent else 0.0
    bonferroni = alpha / len(plan)
    p_burst = np.array([binomial_sf(int(x), int(n), rate) if n > 0 else 1.0
                        for x, n in zip(plan["errors"], sent.fillna(0).astype(int), strict=True)])
    burst = (p_burst < bonferroni) & (plan["errors"].to_numpy() >= 3)
    labels = plan["label"].astype(str).tolist()
    groups = slice_groups(labels, most) if merge is not None else [[label] for label in labels]
    if merge is None or all(len(g) == 1 for g in groups):
        slices = plan
    else:
        from analysis.steps import typed_table

        slices = _with_errors(typed_table([merge(g) for g in groups]))
    at = {label: i for i, label in enumerate(labels)}
    members = [[at[label] for label in g] for g in groups]
    start = float(plan["window_start"].min())
    slices = slices.assign(elapsed=[_elapsed(float(w) - start) for w in slices["window_start"]],
                           slices=[len(m) for m in members])
    slices = slices[list(SLICE_COLUMNS)].reset_index(drop=True)
    slices = slices.assign(error_burst_p=[float(p_burst[m].min()) for m in members],
                           error_burst=[bool(burst[m].any()) for m in members])
    slice_s = float((slices["window_end"] - slices["window_start"]).median())
    trends = [_trend(m, slices[m].to_numpy(dtype=float), slice_s, alpha) for m in DRIFT_MIN]
    drifting = [t["metric"] for t in trends if t["drifting"]]
    result = {
        "slices": len(slices), "slice_s": slice_s, "plan_slices": len(plan),
        "plan_slice_s": float((plan["window_end"] - plan["window_start"]).median()),
        "merged": max(len(g) for g in groups), "alpha": alpha, "trends": trends, "drifting": drifting,
        "memory_growth": any(m in drifting for m in ("gpu_memory_peak_bytes", "kv_usage_peak")),
        "error_bursts": [label for label, hit in zip(labels, burst, strict=True) if hit],
    }
    return slices, result
