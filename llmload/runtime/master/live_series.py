"""The web UI's live time series: per-second client percentiles and rates, and server samples.

Fed on the master with the per-request summaries the workers ship (`add_rows`), the planned arrival
offsets of each step as it starts (`add_planned`: `listen` to the step controller's `step_started`) and
the telemetry collector's latest values (`add_server`);
`series()` gives the chart data. Binning follows the report's timeline (`analysis.timeline`):

- TTFT and TPOT p50/p95 (METRICS.md: TTFT = first token - sent, TPOT = (E2E - TTFT) / (output
  tokens - 1) for 2+ tokens) of the `ok` requests, by the second they were sent;
- offered: planned arrivals per second (`scheduled_at`); achieved: requests sent per second
  (`sent_at`); goodput: `ok` requests meeting every per-request SLO threshold, by `scheduled_at`.

A request counts once it has finished (its summary is shipped then), so the last seconds fill in as
the requests in flight end. Only the last `keep_s` seconds are kept (memory stays bounded in a soak), and
a second's latencies are kept as values (8 bytes each) only for `FREEZE_S` after it: then it keeps just
its p50 and p95, so 30 minutes at 10,000 req/s hold two minutes of values, not 36 million (a request
that finishes over `FREEZE_S` after it was sent still counts to the rates, not to those percentiles).
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import defaultdict, deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from llmload.config import SLO

__all__ = ["FREEZE_S", "KEEP_S", "LiveSeries", "meets_slo", "request_values"]

#: seconds of history kept for the charts
KEEP_S = 1800
#: seconds after which a second's latencies are reduced to its p50 and p95
FREEZE_S = 120
#: float slack when comparing a value to its threshold (as `analysis.requests.TOLERANCE_S`)
TOLERANCE_S = 1e-9


def request_values(row: dict) -> dict[str, float | None]:
    """Per-request latencies in seconds of one shipped summary (None where undefined)."""
    sched, sent = row.get("scheduled_at"), row.get("sent_at")
    first, last = row.get("first_token_at"), row.get("last_token_at")
    tokens = row.get("output_tokens") or 0
    ttft = first - sent if first is not None and sent is not None else None
    e2e = last - sent if last is not None and sent is not None else None
    tpot = (e2e - ttft) / (tokens - 1) if tokens >= 2 and e2e is not None and ttft is not None else None
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e,
            "user_ttft": first - sched if first is not None and sched is not None else None,
            "user_e2e": last - sched if last is not None and sched is not None else None,
            "client_wait": sent - sched if sent is not None and sched is not None else None,
            **_answer_values(row, sched, sent)}


def _answer_values(row: dict, sched: float | None, sent: float | None) -> dict[str, float | None]:
    """TTFA and user TTFA (time to the first answer token), None where unknown."""
    answer = row.get("first_answer_at")
    return {"ttfa": answer - sent if answer is not None and sent is not None else None,
            "user_ttfa": answer - sched if answer is not None and sched is not None else None}


def meets_slo(row: dict, values: dict, slo: SLO | None) -> bool:
    """`ok` and every per-request threshold met (a value that is undefined is not judged; ITL and the
    server queue are step-level only)."""
    if row.get("outcome") != "ok":
        return False
    for t in slo.thresholds if slo is not None else ():
        value = values.get(t.metric)
        if value is not None and value > t.value_s + TOLERANCE_S:
            return False
    return True


class LiveSeries:
    """Per-second chart data of the current run (see the module docstring). Thread-safe."""

    def __init__(self, slo: SLO | None = None, *, keep_s: int = KEEP_S) -> None:
        self.slo = slo
        self.keep_s = keep_s
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._ttft: dict[int, array] = defaultdict(lambda: array("d"))
        self._tpot: dict[int, array] = defaultdict(lambda: array("d"))
        #: seconds before this one keep only their percentiles (`FREEZE_S`)
        self._frozen_before: int | None = None
        self._sent: dict[int, int] = defaultdict(int)
        self._good: dict[int, int] = defaultdict(int)
        self._offered: dict[int, int] = defaultdict(int)
        self._pct: dict[tuple[str, int], tuple[float, float]] = {}
        self._server: deque[tuple[float, dict[str, float]]] = deque()
        self._planned: set[str] = set()
        #: the first second kept (whole seconds, wall clock), None before any data
        self.t0: int | None = None
        self.last_t: float | None = None

    def reset(self, slo: SLO | None = None) -> None:
        """A new run: forget everything (the SLO may have changed in the start form)."""
        with self._lock:
            self.slo = slo
            self._reset()

    def _touch(self, t: float) -> int:
        second = int(math.floor(t))
        self.t0 = second if self.t0 is None else min(self.t0, second)
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        return second

    def add_rows(self, rows: Iterable[dict]) -> None:
        """Per-request summaries as shipped (`token_times` is not read)."""
        with self._lock:
            for row in rows:
                values = request_values(row)
                sent, sched = row.get("sent_at"), row.get("scheduled_at")
                if sent is not None:
                    s = self._touch(sent)
                    self._sent[s] += 1
                    if row.get("outcome") == "ok" and (self._frozen_before is None or s >= self._frozen_before):
                        for key, bins in (("ttft", self._ttft), ("tpot", self._tpot)):
                            value = values[key]
                            if value is not None:
                                bins[s].append(value)
                                self._pct.pop((key, s), None)
                if sched is not None and meets_slo(row, values, self.slo):
                    self._good[self._touch(sched)] += 1
            self._trim()

    def listen(self, events: Any) -> LiveSeries:
        """Take each step's planned arrivals as it starts (`StepEvents.step_started` of a run's controller)."""
        events.step_started.add_listener(self.on_step_started)
        return self

    def on_step_started(self, step: Any) -> None:
        if step.offsets is not None and step.start_at is not None:
            self.add_planned(step.label, float(step.start_at), step.offsets)

    def add_planned(self, label: str, start_at: float, offsets: Any) -> None:
        """A step's planned arrivals (offsets in seconds from `start_at`), counted once per label."""
        with self._lock:
            if label in self._planned:
                return
            self._planned.add(label)
            times = start_at + np.asarray(offsets, dtype=float)
            if times.size:
                self._touch(float(times.min()))
                seconds, counts = np.unique(np.floor(times).astype(np.int64), return_counts=True)
                for second, count in zip(seconds.tolist(), counts.tolist(), strict=True):
                    self._offered[second] += count

    def add_server(self, t: float, latest: dict[str, dict[str, float]]) -> None:
        """One sample of the collector's latest values (`TelemetryCollector.latest()`): server running and
        waiting summed over servers, KV usage the highest, GPU memory used summed over GPUs."""
        servers = [v for source, v in latest.items() if source.startswith("server:") and not v.get("scrape_error")]
        gpus = [v for source, v in latest.items() if source.startswith("gpu:")]
        sample: dict[str, float] = {}
        for key in ("running", "waiting"):
            values = [v[key] for v in servers if key in v]
            if values:
                sample[key] = float(sum(values))
        kv = [v["kv_usage"] for v in servers if "kv_usage" in v]
        if kv:
            sample["kv_usage"] = float(max(kv))
        memory = [v["gpu_memory_used_bytes"] for v in gpus if "gpu_memory_used_bytes" in v]
        if memory:
            sample["gpu_memory_used_bytes"] = float(sum(memory))
        if not sample:
            return
        with self._lock:
            if self._server and self._server[-1][0] >= t:
                return
            self._touch(t)
            self._server.append((t, sample))
            self._trim()

    def _freeze(self) -> None:
        """Seconds over `FREEZE_S` old keep their p50 and p95 only."""
        if self.last_t is None:
            return
        before = int(math.floor(self.last_t)) - FREEZE_S
        if self._frozen_before is not None and before <= self._frozen_before:
            return
        for key, bins in (("ttft", self._ttft), ("tpot", self._tpot)):
            for second in [s for s in bins if s < before]:
                self._percentiles(key, bins, second)
                del bins[second]
        self._frozen_before = before

    def _trim(self) -> None:
        if self.last_t is None or self.t0 is None:
            return
        self._freeze()
        start = int(math.floor(self.last_t)) - self.keep_s
        if self.t0 >= start:
            return
        for bins in (self._ttft, self._tpot, self._sent, self._good, self._offered):
            for second in [s for s in bins if s < start]:
                del bins[second]
        self._pct = {k: v for k, v in self._pct.items() if k[1] >= start}
        while self._server and self._server[0][0] < start:
            self._server.popleft()
        self.t0 = start

    def _percentiles(self, key: str, bins: dict[int, array], second: int) -> tuple[float, float] | None:
        cached = self._pct.get((key, second))
        if cached is not None and second not in bins:  # a frozen second
            return cached
        values = bins.get(second)
        if not values:
            return None
        if cached is None:
            p50, p95 = np.percentile(np.asarray(values), [50, 95]).tolist()
            cached = self._pct[(key, second)] = (p50, p95)
        return cached

    def series(self, *, until: float | None = None) -> dict:
        """Chart data: per-second arrays from `t0` (seconds, wall clock) to `until` (default: the latest
        data), times relative to `t0`; latencies in ms, rates in req/s, None where there is no value."""
        with self._lock:
            if self.t0 is None:
                return {"t0": None, "t": [], "server": {"t": []}}
            t0 = self.t0
            end = int(math.floor(until if until is not None else (self.last_t or t0)))
            seconds = range(t0, max(end, t0) + 1)
            out: dict[str, Any] = {"t0": t0, "t": [s - t0 for s in seconds]}
            for key, bins in (("ttft", self._ttft), ("tpot", self._tpot)):
                pairs = [self._percentiles(key, bins, s) for s in seconds]
                out[f"{key}_p50_ms"] = [None if p is None else round(p[0] * 1000, 1) for p in pairs]
                out[f"{key}_p95_ms"] = [None if p is None else round(p[1] * 1000, 1) for p in pairs]
            for key, counts in (("offered", self._offered), ("achieved", self._sent), ("goodput", self._good)):
                out[key] = [counts.get(s, 0) for s in seconds]
            server: dict[str, list] = {"t": [round(t - t0, 2) for t, _ in self._server]}
            for key in ("running", "waiting", "kv_usage", "gpu_memory_used_bytes"):
                server[key] = [sample.get(key) for _, sample in self._server]
            out["server"] = server
            return out
