"""The telemetry collector on the Locust master: one polling thread per source, samples to disk as they come.

Sources: each `target.urls` endpoint (`server:<url>`, plus `slots:` for llama.cpp, `ollama_ps:` for
Ollama), and the GPU (`gpu: auto|nvml` NVML here, `dcgm:<url>` a DCGM exporter or `llmload gpu-agent`).
Each sample is stamped with `llmload.clock.now()` (midpoint of the poll) and the step set by
`set_step`, and appended to `run_dir/telemetry.jsonl`; `finalise_telemetry` makes the Parquet file.
A virtual run (`llmload.runtime.virtual.telemetry`) hands its own pollers (the simulated server's pages)
and its clock: the same samples, files and recent samples, stamped in virtual time, no GPU.
A failed poll records `scrape_error=1` and polling goes on. Plain threads and urllib work both as OS
threads and as greenlets under gevent's monkey-patching.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from llmload.clock import now
from llmload.config import Config
from llmload.errors import ConfigError, TelemetryError
from llmload.telemetry.credentials import request_headers
from llmload.telemetry.exposition import format_labels
from llmload.telemetry.gpu import DcgmPoller, NvmlSampler
from llmload.telemetry.sink import Point, TelemetrySink
from llmload.telemetry.sources import EndpointSource, error_label

__all__ = ["JUDGED_METRICS", "LIVE_METRICS", "RecentSamples", "TelemetryCollector", "dcgm_url", "metrics_urls"]

log = logging.getLogger("llmload.telemetry")

#: what `latest()` reports per source (summed over labels), for the live table and web UI
LIVE_METRICS = frozenset({
    "running", "waiting", "kv_usage", "deferred", "processing", "preemptions_total",
    "gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_utilization", "ollama_size_vram_bytes",
    "ollama_loaded_models", "slots_total", "slots_processing", "scrape_error",
})

#: what the live judging of a step reads (`analysis.judge_step`), kept in memory by `RecentSamples`
JUDGED_METRICS = frozenset({
    "running", "waiting", "deferred", "kv_usage", "preemptions_total", "gpu_memory_used_bytes",
    "queue_time_seconds_bucket", "queue_time_seconds_count", "queue_time_seconds_sum", "worker_cpu",
})


class RecentSamples:
    """The samples the live judge needs, in memory, since the last judged step (see `trim`).

    Every poll is kept whole (no skipped repeats), so a counter's baseline before a window is at most
    one interval old; `trim` drops what judged steps no longer need but keeps each key's last batch.
    """

    def __init__(self) -> None:
        self._batches: list[tuple[float, str | None, str, list[Point]]] = []
        self._lock = threading.Lock()

    def add(self, t: float, step: str | None, key: str, points: list[Point]) -> None:
        kept = [p for p in points if p.metric in JUDGED_METRICS]
        if kept:
            with self._lock:
                self._batches.append((t, step, key, kept))

    def rows(self) -> list[dict]:
        """Telemetry rows (the `telemetry.parquet` columns) of every kept sample."""
        with self._lock:
            batches = list(self._batches)
        return [{"t": t, "source": p.source, "metric": p.metric, "value": float(p.value), "step": step,
                 "labels": p.labels} for t, step, _key, points in batches for p in points]

    def gauge_mean(self, metric: str, t0: float, t1: float) -> float | None:
        """Per-source sample mean of a gauge over [t0, t1), summed over sources; None without samples."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        with self._lock:
            batches = list(self._batches)
        for t, _step, _key, points in batches:
            if t0 <= t < t1:
                for p in points:
                    if p.metric == metric:
                        acc = sums[p.source]
                        acc[0] += p.value
                        acc[1] += 1
        return sum(total / n for total, n in sums.values()) if sums else None

    def trim(self, before: float) -> None:
        """Drop batches older than `before`, except the last one of each key (a counter's baseline)."""
        with self._lock:
            last_old: dict[str, int] = {}
            for i, (t, _step, key, _points) in enumerate(self._batches):
                if t < before:
                    last_old[key] = i
            keep = set(last_old.values())
            self._batches = [b for i, b in enumerate(self._batches) if b[0] >= before or i in keep]


def metrics_urls(config: Config) -> list[tuple[str, str | None]]:
    """`(base url, metrics url or None)` per endpoint from `telemetry.metrics_url`."""
    setting = config.telemetry.metrics_url.strip()
    endpoints = config.target.endpoints
    if setting.lower() in ("off", "none", ""):
        return []
    if setting == "auto":
        return [(u, f"{u}/metrics") for u in endpoints]
    if "{url}" in setting:
        return [(u, setting.replace("{url}", u)) for u in endpoints]
    if len(endpoints) > 1:
        raise ConfigError("an explicit URL needs a single target.url; use auto or a template with {url}",
                          key="telemetry.metrics_url")
    return [(endpoints[0], setting)]


def dcgm_url(setting: str) -> str:
    """`dcgm:http://host:9400` -> `http://host:9400/metrics` (a path given is kept)."""
    url = setting[len("dcgm:"):].strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f'expected dcgm:http://host:port, got "{setting}"', key="telemetry.gpu")
    return url if url.split("//", 1)[1].count("/") else f"{url.rstrip('/')}/metrics"


class Poller(Protocol):
    """What the collector polls: a `source` name and `poll()`, that source's points now."""

    source: str

    def poll(self) -> list[Point]: ...


class _NvmlSource:
    """Adapts the NVML sampler to the poller interface (opened when the collector opens)."""

    def __init__(self, sampler: NvmlSampler) -> None:
        self.sampler, self.source = sampler, "nvml"

    def poll(self) -> list[Point]:
        return self.sampler.poll()


class TelemetryCollector:
    """Polls every source each `telemetry.interval` until `stop()`; see the module docstring."""

    def __init__(self, config: Config, run_dir: str | Path, *, nvml: object = None,
                 clock: Callable[[], float] = now, pollers: list[Poller] | None = None) -> None:
        """`clock`: what stamps a sample; `pollers`: the sources to poll instead of the config's
        endpoints and GPU (a virtual run's simulated server)."""
        self.config = config
        self.run_dir = Path(run_dir)
        self._clock = clock
        self.interval_s = float(config.telemetry.interval)
        # the full timeout even when it exceeds the interval: an overloaded server answers /metrics
        # late exactly when it matters; the loop skips the ticks a slow poll missed
        timeout_s = float(config.telemetry.timeout)
        headers = request_headers(config)
        self._pollers: list = [
            EndpointSource(base, flavor=config.target.server, metrics_url=url, timeout_s=timeout_s,
                           headers=headers)
            for base, url in metrics_urls(config)]
        gpu = config.telemetry.gpu
        # `auto` with `conditions.gpus: 0` (a CPU server, the demo's sim): no GPU to look for, nothing to say
        no_gpu = gpu == "auto" and config.conditions.gpus == 0
        self.nvml: NvmlSampler | None = NvmlSampler(nvml) if gpu in ("auto", "nvml") and not no_gpu else None
        if gpu.startswith("dcgm:"):
            self._pollers.append(DcgmPoller(dcgm_url(gpu), timeout_s=timeout_s))
        if pollers is not None:
            self._pollers, self.nvml = list(pollers), None
        self._sink: TelemetrySink | None = None
        self._step: str | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._active: list = []
        self._latest: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        #: this run's recent samples for the live judge and table (the master reads no file back)
        self.recent = RecentSamples()

    @property
    def path(self) -> Path:
        return self.run_dir / "telemetry.jsonl"

    def _open(self) -> list:
        """Open the JSONL file and NVML once; the pollers to run."""
        if self._sink is None:
            self._sink = TelemetrySink(self.path)
            self._active = list(self._pollers)
            if self.nvml is not None and self.nvml.open():
                self._active.append(_NvmlSource(self.nvml))
        return self._active

    def start(self) -> None:
        """Open the JSONL file and start one polling thread per source (returns at once)."""
        if self._threads:
            return
        for poller in self._open():
            thread = threading.Thread(target=self._loop, args=(poller,), daemon=True,
                                      name=f"llmload-telemetry {poller.source}")
            self._threads.append(thread)
            thread.start()

    def sample_now(self) -> list[Point]:
        """Poll every source once, now, in this thread (a sample at a step boundary; tests without threads)."""
        points: list[Point] = []
        for poller in self._open():
            points.extend(self.poll_once(poller))
        return points

    def set_step(self, label: str | None) -> None:
        """Samples taken from now on carry this step label (None between steps)."""
        self._step = label

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop polling, wait for the threads, close the file. Safe to call twice."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()
        if self.nvml is not None:
            self.nvml.close()
        if self._sink is not None:
            self._sink.close()

    def latest(self) -> dict[str, dict[str, float]]:
        """Most recent values per source: `{"server:http://..": {"running": 3, "waiting": 0, "t": ..}}`."""
        with self._lock:
            return {source: dict(values) for source, values in self._latest.items()}

    def poll_once(self, poller: Poller) -> list[Point]:
        """Poll one source, write its points and return them."""
        t_start, step = self._clock(), self._step
        try:
            points = poller.poll()
        except TelemetryError as exc:
            points = [Point(poller.source, "scrape_error", 1.0, error_label(exc))]
        except Exception as exc:  # a bug in a parser must not stop the run: record the gap and say so once
            key = f"{poller.source}:{type(exc).__name__}"
            if key not in self._warned:
                self._warned.add(key)
                log.warning("telemetry: polling %s failed: %s: %s", poller.source, type(exc).__name__, exc)
            points = [Point(poller.source, "scrape_error", 1.0, format_labels({"error": "internal"}))]
        t = (t_start + self._clock()) / 2
        if self._sink is not None:
            for source in {p.source for p in points if p.metric == "scrape_error" and p.value > 0}:
                self._sink.forget(source)
            self._sink.write(t, step, points)
        self.recent.add(t, step, poller.source, points)
        self._remember(t, points)
        return points

    def _remember(self, t: float, points: list[Point]) -> None:
        fresh: dict[str, dict[str, float]] = defaultdict(dict)
        for p in points:
            if p.metric in LIVE_METRICS:
                values = fresh[p.source]
                values[p.metric] = values.get(p.metric, 0.0) + p.value
        with self._lock:
            for source, values in fresh.items():
                kept = self._latest.setdefault(source, {})
                if values.get("scrape_error", 0.0) > 0:
                    kept["scrape_error"] = values["scrape_error"]
                else:
                    kept.update(values)
                    kept["t"] = t

    def _loop(self, poller: Poller) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.poll_once(poller)
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # a slow poll: skip the missed ticks rather than bunch them
                next_at, delay = time.monotonic(), 0.0
            if self._stop.wait(delay):
                break

