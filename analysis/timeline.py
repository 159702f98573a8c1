"""The run as a time series in fixed bins (1 s, widened for very long runs), for the report's plots.

Columns: `t` (bin start, wall seconds), `step` (the plan step running then: from its `start_at` to
its drain end), `arrivals` (scheduled), `sent`, `completed` (ok requests finishing), `in_flight`
(time-average of sent-and-not-finished inside the bin), `ttft_p95_s` (of requests sent in the bin),
and from telemetry `running`, `waiting` (summed over sources), `kv_usage` (highest source),
`gpu_memory_used_bytes` (summed over GPUs); NaN where unknown.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import time_average

__all__ = ["MAX_BINS", "timeline"]

MAX_BINS = 100_000

_TEL = {"running": "sum", "waiting": "sum", "kv_usage": "max", "gpu_memory_used_bytes": "sum"}


def _step_of(bins: np.ndarray, plan_steps: list[dict]) -> np.ndarray:
    out = np.full(bins.size, None, dtype=object)
    for step in plan_steps:
        if step.get("status") == "not_run":
            continue
        start = step.get("start_at", step.get("window_start"))
        end = next((step[k] for k in ("drained_at", "drain_deadline", "window_end") if step.get(k)), None)
        if start is None or end is None:
            continue
        out[(bins >= float(start)) & (bins < float(end))] = step["label"]
    return out


def _telemetry_bins(telemetry: pd.DataFrame | None, edges: np.ndarray) -> dict[str, np.ndarray]:
    k = edges.size - 1
    out = {name: np.full(k, np.nan) for name in _TEL}
    if telemetry is None or telemetry.empty:
        return out
    tel = telemetry[telemetry["metric"].isin(list(_TEL))]
    if tel.empty:
        return out
    t = tel["t"].to_numpy(dtype=float)
    b = np.searchsorted(edges, t, side="right") - 1
    keep = (b >= 0) & (b < k)
    frame = pd.DataFrame({"bin": b[keep], "metric": tel["metric"].astype(str).to_numpy()[keep],
                          "source": tel["source"].astype(str).to_numpy()[keep],
                          "value": pd.to_numeric(tel["value"], errors="coerce").to_numpy(dtype=float)[keep]})
    per_source = frame.groupby(["metric", "bin", "source"])["value"].mean()
    for name, how in _TEL.items():
        if name not in per_source.index.get_level_values(0):
            continue
        agg = per_source.loc[name].groupby(level=0).agg(how)
        out[name][agg.index.to_numpy()] = agg.to_numpy()
    return out


def timeline(requests: pd.DataFrame, plan_steps: list[dict], telemetry: pd.DataFrame | None = None,
             *, bin_s: float = 1.0) -> pd.DataFrame:
    """The binned time series of a run (empty frame when there are no requests)."""
    columns = ["t", "step", "arrivals", "sent", "completed", "in_flight", "ttft_p95_s", *_TEL]
    if requests.empty:
        return pd.DataFrame(columns=columns)
    sched = requests["scheduled_at"].to_numpy(dtype=float)
    sent = requests["sent_at"].to_numpy(dtype=float)
    end = requests["end_at"].to_numpy(dtype=float)
    t0 = math.floor(np.nanmin(sched))
    t1 = float(np.nanmax(np.concatenate([sched, end[~np.isnan(end)]])))
    span = max(t1 - t0, bin_s)
    bin_s = max(bin_s, span / MAX_BINS)
    edges = t0 + bin_s * np.arange(int(math.ceil(span / bin_s)) + 2)
    k = edges.size - 1

    def count(times: np.ndarray) -> np.ndarray:
        times = times[~np.isnan(times)]
        return np.bincount(np.searchsorted(edges, times, side="right") - 1, minlength=k)[:k]

    ok = requests["outcome"].astype(str).to_numpy() == "ok"
    is_sent = ~np.isnan(sent)
    in_flight = time_average(sent[is_sent], np.fmax(end[is_sent], sent[is_sent]), edges)
    fin = requests["finished"].to_numpy(dtype=bool) & is_sent
    ttft_bins = np.searchsorted(edges, sent[fin], side="right") - 1
    ttft = pd.Series(requests["ttft_s"].to_numpy(dtype=float)[fin]).groupby(ttft_bins).quantile(0.95)
    ttft_p95 = np.full(k, np.nan)
    ttft_p95[ttft.index.to_numpy()] = ttft.to_numpy()
    tel = _telemetry_bins(telemetry, edges)
    return pd.DataFrame({
        "t": edges[:-1], "step": _step_of(edges[:-1], plan_steps), "arrivals": count(sched),
        "sent": count(sent), "completed": count(np.where(ok, end, np.nan)), "in_flight": in_flight,
        "ttft_p95_s": ttft_p95, **tel,
    })
