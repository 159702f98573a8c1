"""Pure reads of the long telemetry frame: counter deltas over a window, GPU memory peaks.

A window `[t0, t1]` uses, for each series, the last value at or before `t0` and the last at or before
`t1` (series written only on change stay exact this way). A series first seen after `t0` on a source
that was already answering started from zero; one whose source had no answer by `t0` is left out
(unknown baseline). A value that went down is a counter reset (server restart): its delta is the later
value, as Prometheus `increase()` treats resets.
"""

from __future__ import annotations

import pandas as pd

__all__ = [
    "counter_delta",
    "gpu_memory_peak",
    "gpu_memory_peak_per_step",
    "series_deltas",
]

_KEYS = ["source", "labels"]


def _answered_by(telemetry: pd.DataFrame, t0: float) -> set[str]:
    """Sources with at least one successful sample at or before `t0`."""
    early = telemetry[(telemetry["t"] <= t0)
                      & ~((telemetry["metric"] == "scrape_error") & (telemetry["value"] > 0))]
    return set(early["source"].unique())


def series_deltas(telemetry: pd.DataFrame, metric: str, t0: float, t1: float, *,
                  source: str | None = None) -> pd.DataFrame:
    """One row per (source, labels) of `metric`: `start`, `end` and `delta` over `[t0, t1]`."""
    rows = telemetry[(telemetry["metric"] == metric) & (telemetry["t"] <= t1)]
    if source is not None:
        rows = rows[rows["source"] == source]
    if rows.empty:
        return pd.DataFrame(columns=[*_KEYS, "start", "end", "delta"])
    rows = rows.sort_values("t", kind="stable")
    end = rows.groupby(_KEYS, sort=True)["value"].last()
    start = rows[rows["t"] <= t0].groupby(_KEYS, sort=True)["value"].last().reindex(end.index)
    answered = _answered_by(telemetry, t0)
    fresh = start.isna() & end.index.get_level_values("source").isin(answered)
    start = start.mask(fresh, 0.0)
    out = pd.DataFrame({"start": start, "end": end}).dropna(subset=["start"])
    delta = out["end"] - out["start"]
    out = out.assign(delta=delta.mask(delta < 0, out["end"]))
    return out.reset_index()


def counter_delta(telemetry: pd.DataFrame, metric: str, t0: float, t1: float, *,
                  source: str | None = None) -> float | None:
    """Increase of a counter (e.g. `preemptions_total`) over `[t0, t1]`, summed over series; None if unknown."""
    deltas = series_deltas(telemetry, metric, t0, t1, source=source)
    return None if deltas.empty else float(deltas["delta"].sum())


def _gpu_used(telemetry: pd.DataFrame) -> pd.DataFrame:
    return telemetry[(telemetry["metric"] == "gpu_memory_used_bytes")
                     & telemetry["source"].str.startswith("gpu:")]


def _peak(used: pd.DataFrame) -> float | None:
    """Largest total over GPUs at one sample time (one NVML or DCGM poll stamps all GPUs alike)."""
    if used.empty:
        return None
    return float(used.groupby("t")["value"].sum().max())


def gpu_memory_peak(telemetry: pd.DataFrame, t0: float | None = None, t1: float | None = None) -> float | None:
    """Peak GPU memory in bytes, summed over GPUs, between `t0` and `t1` (inclusive); None without GPU data."""
    used = _gpu_used(telemetry)
    if t0 is not None:
        used = used[used["t"] >= t0]
    if t1 is not None:
        used = used[used["t"] <= t1]
    return _peak(used)


def gpu_memory_peak_per_step(telemetry: pd.DataFrame) -> pd.DataFrame:
    """`step, gpu_memory_peak_bytes`: per step label the samples carry (samples outside steps left out)."""
    used = _gpu_used(telemetry).dropna(subset=["step"])
    if used.empty:
        return pd.DataFrame({"step": pd.Series(dtype="object"),
                             "gpu_memory_peak_bytes": pd.Series(dtype="float64")})
    totals = used.groupby(["step", "t"], sort=False)["value"].sum()
    peaks = totals.groupby(level="step", sort=False).max()
    return pd.DataFrame({"step": peaks.index.astype(object), "gpu_memory_peak_bytes": peaks.to_numpy()})
