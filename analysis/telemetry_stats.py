"""Server, GPU and worker numbers of a time window, from the long telemetry frame (ARCHITECTURE.md).

`TelemetryIndex` sorts the samples once and splits them by normalised metric name, so each step's
window is two binary searches. Several sources of one gauge (several instances) are added for
`running` / `waiting` / `deferred` (the deployment's total) and maxed for peaks. Counters
(`preemptions_total`, the queue-time histogram's `_sum` / `_count`) are increases over the window, from
the last sample before it, resets handled. A `scrape_error` sample is a gap, never a value.

The server queue percentiles from the vLLM histogram come from
`llmload.telemetry.histogram.queue_time_quantile` (imported when needed; NaN if it is not there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.stats import counter_increase

__all__ = ["TelemetryIndex", "histogram_queue_quantiles"]

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

    def _window(self, metric: str, t0: float, t1: float) -> _Series | None:
        s = self._series.get(metric)
        if s is None:
            return None
        a, b = np.searchsorted(s.t, t0, side="left"), np.searchsorted(s.t, t1, side="left")
        if b <= a:
            return None
        return _Series(s.t[a:b], s.value[a:b], s.source[a:b])

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


def histogram_queue_quantiles(telemetry: pd.DataFrame, t0: float, t1: float, qs: tuple[float, ...]
                              ) -> tuple[dict[float, float], dict[float, float], str | None]:
    """Server queue percentiles (qs in percent) from the vLLM histogram and the width of the bucket each
    fell in (inf: beyond the last finite bound, the value is a lower bound); NaN with the reason when
    the histogram cannot be read."""
    nan = {q: math.nan for q in qs}
    try:
        from llmload.telemetry.histogram import queue_time_quantile
    except ImportError:
        return nan, dict(nan), "server queue histogram reader not available"
    values, widths = {}, {}
    for q in qs:
        try:
            value, resolution = queue_time_quantile(telemetry, t0, t1, q / 100.0)
        except Exception as exc:  # a reader failure must not lose the rest of the analysis
            return nan, dict(nan), f"server queue histogram unreadable: {exc}"
        values[q] = float(value) if value is not None else math.nan
        widths[q] = float(resolution) if resolution is not None else math.nan
    return values, widths, None
