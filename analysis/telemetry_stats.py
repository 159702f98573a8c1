"""Server, GPU and worker numbers of a time window, from the long telemetry frame (ARCHITECTURE.md).

`TelemetryIndex` sorts the samples once and splits them by normalised metric name, so each step's
window is two binary searches. Several sources of one gauge (several instances) are added for
`running` / `waiting` / `deferred` (the deployment's total) and maxed for peaks. Counters
(`preemptions_total`, the queue-time histogram's `_sum` / `_count`) are increases over the window, from
the last sample before it, resets handled. A `scrape_error` sample is a gap, never a value.

`energy(t0, t1)`: the GPUs' energy over a window in joules, per GPU source from the energy counter
`gpu_energy_joules` (its increases, a reset counted from 0, linear between samples at the window's
edges: basis `counter`), else the trapezoid of `gpu_power_watts` (linear at the edges: basis `power`),
summed over the GPUs; NaN unless every GPU that reported either has samples at or around both edges
(a sum missing a GPU would understate). Both are exact for a power constant between samples.

The server queue percentiles from the vLLM histogram are `llmload.telemetry.histogram.queue_time_quantile`'s
(its bucket deltas read once per window, imported when needed; NaN if it is not there).

`served_period(step, tel)` is the period a step's server evidence is read over: its requests are
admitted, queued and served from the step's start until its drain ends (an overloaded step admits
arrivals long after its window closed), and histogram observations are made when a request finishes.
So a drained step reads from `start_at` (the baseline: the last sample before it, taken after the
previous step drained) to the first sample at or after `drained_at` (the controller samples once as a
step drains). Warm-up requests are inside that period; undrained steps (soak slices back to back)
keep their measurement window, as their neighbours' requests overlap them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import counter_increase

__all__ = ["TelemetryIndex", "histogram_queue_quantiles", "histogram_queue_ranges", "queue_buckets", "served_period"]

_SUMMED = ("running", "waiting", "deferred", "processing")


@dataclass
class _Series:
    t: np.ndarray
    value: np.ndarray
    source: np.ndarray  # integer codes


class TelemetryIndex:
    """Telemetry split by metric and sorted by time, for cheap window queries."""

    def __init__(self, telemetry: pd.DataFrame | None) -> None:
        empty = pd.DataFrame(columns=["t", "source", "metric", "value"])
        self.frame = telemetry if telemetry is not None else empty
        self._series: dict[str, _Series] = {}
        if telemetry is None or telemetry.empty:
            return
        df = telemetry[telemetry["metric"].astype(str) != "scrape_error"]
        df = df[pd.to_numeric(df["value"], errors="coerce").notna()]
        codes, _ = pd.factorize(df["source"].astype(str))
        t = df["t"].to_numpy(dtype=float)
        value = df["value"].to_numpy(dtype=float)
        metric = df["metric"].astype(str).to_numpy()
        order = np.lexsort((t, metric))
        t, value, metric, codes = t[order], value[order], metric[order], codes[order]
        names, starts = np.unique(metric, return_index=True)
        bounds = list(starts[1:]) + [len(metric)]
        for name, a, b in zip(names, starts, bounds, strict=True):
            self._series[str(name)] = _Series(t[a:b], value[a:b], codes[a:b])

    def has(self, metric: str) -> bool:
        return metric in self._series

    def first_at_or_after(self, metric: str, t: float) -> float:
        """Time of the first sample of `metric` at or after `t` (NaN if none)."""
        s = self._series.get(metric)
        if s is None:
            return math.nan
        i = int(np.searchsorted(s.t, t, side="left"))
        return float(s.t[i]) if i < len(s.t) else math.nan

    def _window(self, metric: str, t0: float, t1: float) -> _Series | None:
        s = self._series.get(metric)
        if s is None:
            return None
        a, b = np.searchsorted(s.t, t0, side="left"), np.searchsorted(s.t, t1, side="left")
        if b <= a:
            return None
        return _Series(s.t[a:b], s.value[a:b], s.source[a:b])

    def samples(self, metric: str, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(times, values, source codes)` of a metric's samples in [t0, t1), sorted by time within each
        source (empty arrays when none)."""
        w = self._window(metric, t0, t1)
        if w is None:
            return np.array([], dtype=float), np.array([], dtype=float), np.array([], dtype=np.int64)
        return w.t, w.value, w.source

    def gauge_mean(self, metric: str, t0: float, t1: float) -> float:
        """Time-average of a gauge over [t0, t1): per-source sample mean, summed over sources."""
        w = self._window(metric, t0, t1)
        if w is None:
            return math.nan
        means = pd.Series(w.value).groupby(w.source).mean()
        return float(means.sum()) if metric in _SUMMED else float(means.mean())

    def peak(self, metric: str, t0: float, t1: float) -> float:
        """Largest sample of a metric over [t0, t1) across sources."""
        w = self._window(metric, t0, t1)
        return math.nan if w is None else float(w.value.max())

    def peak_total(self, metric: str, t0: float, t1: float) -> float:
        """Largest sum over sources at one sample time (one GPU poll stamps every device alike)."""
        w = self._window(metric, t0, t1)
        if w is None:
            return math.nan
        return float(pd.Series(w.value).groupby(w.t).sum().max())

    def counter_delta(self, metric: str, t0: float, t1: float) -> float:
        """Increase of a counter over [t0, t1), summed over sources (baseline: last sample before t0)."""
        s = self._series.get(metric)
        if s is None:
            return math.nan
        total, seen = 0.0, False
        for code in np.unique(s.source):
            mask = s.source == code
            t, v = s.t[mask], s.value[mask]
            a = max(int(np.searchsorted(t, t0, side="left")) - 1, 0)
            b = int(np.searchsorted(t, t1, side="left"))
            inc = counter_increase(v[a:b])
            if not math.isnan(inc):
                total, seen = total + inc, True
        return total if seen else math.nan

    def energy(self, t0: float, t1: float) -> tuple[float, str | None]:
        """`(joules, basis)` of every GPU over [t0, t1] (module docstring); `(NaN, None)` when no GPU
        reported energy or power, or one does not cover the window."""
        counter, power = self._series.get("gpu_energy_joules"), self._series.get("gpu_power_watts")
        sources: set[int] = set()
        for s in (counter, power):
            if s is not None:
                sources.update(int(c) for c in np.unique(s.source))
        if not sources or not t1 > t0:
            return math.nan, None
        total, bases = 0.0, set()
        for code in sorted(sources):
            joules = _counter_energy(counter, code, t0, t1)
            basis = "counter"
            if math.isnan(joules):
                joules, basis = _power_energy(power, code, t0, t1), "power"
            if math.isnan(joules):
                return math.nan, None
            total += joules
            bases.add(basis)
        return total, "+".join(sorted(bases))

    def subwindow_means(self, metric: str, edges: np.ndarray) -> np.ndarray:
        """Per sub-window [edges[i], edges[i+1]) the gauge's time-average (summed over sources)."""
        k = len(edges) - 1
        w = self._window(metric, float(edges[0]), float(edges[-1]))
        if w is None:
            return np.full(k, np.nan)
        bins = np.searchsorted(edges, w.t, side="right") - 1
        means = pd.Series(w.value).groupby([bins, w.source]).mean()
        agg = means.groupby(level=0).sum() if metric in _SUMMED else means.groupby(level=0).mean()
        out = np.full(k, np.nan)
        idx = agg.index.to_numpy()
        ok = (idx >= 0) & (idx < k)
        out[idx[ok]] = agg.to_numpy()[ok]
        return out

    def histogram_mean(self, t0: float, t1: float) -> float:
        """Mean server queue time over the window from the histogram's `_sum` and `_count` increases."""
        total = self.counter_delta("queue_time_seconds_sum", t0, t1)
        count = self.counter_delta("queue_time_seconds_count", t0, t1)
        if math.isnan(total) or math.isnan(count) or count <= 0:
            return math.nan
        return total / count


def _covering(s: _Series | None, code: int, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray] | None:
    """One source's `(times, values)` when they have samples at or before t0 and at or after t1."""
    if s is None:
        return None
    mask = s.source == code
    t, v = s.t[mask], s.value[mask]
    if not len(t) or t[0] > t0 or t[-1] < t1:
        return None
    return t, v


def _counter_energy(s: _Series | None, code: int, t0: float, t1: float) -> float:
    """Joules one GPU's energy counter rose over [t0, t1]: its increases (after a reset, the new value)
    summed, linear between samples at the edges."""
    got = _covering(s, code, t0, t1)
    if got is None:
        return math.nan
    t, v = got
    steps = np.diff(v)
    rises = np.where(steps >= 0, steps, v[1:])
    cumulative = np.concatenate(([0.0], np.cumsum(rises)))
    return float(np.interp(t1, t, cumulative) - np.interp(t0, t, cumulative))


def _power_energy(s: _Series | None, code: int, t0: float, t1: float) -> float:
    """Joules of one GPU's power samples over [t0, t1]: the trapezoid, linear between samples at the edges."""
    got = _covering(s, code, t0, t1)
    if got is None:
        return math.nan
    t, v = got
    inside = (t > t0) & (t < t1)
    x = np.concatenate(([t0], t[inside], [t1]))
    y = np.concatenate(([np.interp(t0, t, v)], v[inside], [np.interp(t1, t, v)]))
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def served_period(step: dict, tel: TelemetryIndex, metric: str = "queue_time_seconds_count"
                  ) -> tuple[float, float]:
    """`(t0, t1)` over which a step's server evidence is read (module docstring): `t1` is a sample
    time, so read counters over `[t0, t1]` inclusive."""
    ws, we = _f(step.get("window_start")), _f(step.get("window_end"))
    if step.get("drain") is False:
        return ws, we
    t0 = _f(step.get("start_at"))
    t0 = ws if math.isnan(t0) else t0
    drained = _f(step.get("drained_at"))
    drained = we if math.isnan(drained) else drained
    t1 = tel.first_at_or_after(metric, drained)
    return t0, drained if math.isnan(t1) else t1


def queue_buckets(telemetry: pd.DataFrame, t0: float, t1: float) -> tuple[list[float], list[float]] | None:
    """The queue-time histogram's cumulative bucket counts observed over `[t0, t1]` (`(bounds, counts)`),
    read once for a step's percentiles and ranges; None when the reader fails (the percentiles say why)."""
    from llmload.telemetry.histogram import histogram_buckets_between

    try:
        return histogram_buckets_between(telemetry, "queue_time_seconds", t0, t1)
    except Exception:  # histogram_queue_quantiles reads again and names the failure
        return None


def histogram_queue_ranges(telemetry: pd.DataFrame, t0: float, t1: float, qs: tuple[float, ...], *,
                           buckets: tuple[list[float], list[float]] | None = None
                           ) -> dict[float, list[float] | None]:
    """Per percentile (in percent) the `[low, high]` bucket of the queue-time histogram it lies in over
    `[t0, t1]` (high `inf` past the last finite bound); None where nothing was observed. `buckets`: that
    histogram's `queue_buckets`, when read already."""
    from llmload.telemetry.histogram import histogram_bucket_range, histogram_buckets_between

    bounds, counts = buckets if buckets is not None else histogram_buckets_between(
        telemetry, "queue_time_seconds", t0, t1)
    out: dict[float, list[float] | None] = {}
    for q in qs:
        found = histogram_bucket_range(bounds, counts, q / 100.0)
        out[q] = None if found is None else [float(found[0]), float(found[1])]
    return out


def histogram_queue_quantiles(telemetry: pd.DataFrame, t0: float, t1: float, qs: tuple[float, ...], *,
                              buckets: tuple[list[float], list[float]] | None = None
                              ) -> tuple[dict[float, float], dict[float, float], str | None]:
    """Server queue percentiles (qs in percent) from the vLLM histogram and the width of the bucket each
    fell in (inf: beyond the last finite bound, the value is a lower bound); NaN with the reason when
    the histogram cannot be read. The buckets are read once for every percentile (`buckets`: already
    read, `queue_buckets`)."""
    nan = {q: math.nan for q in qs}
    try:
        from llmload.telemetry.histogram import histogram_buckets_between, histogram_quantile
    except ImportError:
        return nan, dict(nan), "server queue histogram reader not available"
    values, widths = {}, {}
    try:
        bounds, counts = buckets if buckets is not None else histogram_buckets_between(
            telemetry, "queue_time_seconds", t0, t1)
        for q in qs:
            value, resolution = histogram_quantile(bounds, counts, q / 100.0)
            values[q] = float(value) if value is not None else math.nan
            widths[q] = float(resolution) if resolution is not None else math.nan
    except Exception as exc:  # a reader failure must not lose the rest of the analysis
        return nan, dict(nan), f"server queue histogram unreadable: {exc}"
    return values, widths, None
