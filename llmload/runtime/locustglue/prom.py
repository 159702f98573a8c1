"""Live metrics for Prometheus: the master's view of a run while it is live, as `/metrics` text.

A custom collector (`LiveMetrics`) on a registry of its own: cumulative counters and histograms fed
with the per-request summaries the workers ship (`add_rows`, from `Session._on_results`), and gauges
read from the master's live state at scrape time (the running step's rates from its `Step`, the worker
count, the workers' CPU). Served on the web UI's Flask app (`/metrics`, with `--web`) or, headless, by a
small gevent WSGI server on `--metrics-port` (`serve`, 127.0.0.1 unless `--metrics-host` says otherwise).

Names follow Prometheus conventions (`llmload_` first, base units: seconds, ratios, `_total` for
counters); their meanings are in docs/METRICS.md "Live metrics". Latencies are METRICS.md's (via
`llmload.latency`) over the requests whose answer streamed to its end (`ok` or `quality_fail`, the
analysis' latency sample); send lag is `sent_at - scheduled_at` of arrivals not held at the client cap.
Counters count every shipped summary once, for the life of the process (a new run in the web UI goes
on counting: Prometheus takes differences); the step gauges describe the running step only.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from llmload.clocks import REAL_CLOCK
from llmload.runtime.locustglue.seams import worker_count
from llmload.runtime.master.live_series import meets_slo, request_values
from llmload.runtime.master.step import Step

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS_S", "TPOT_BUCKETS_S", "LiveMetrics", "add_route", "exposition", "install",
           "serve"]

#: the text format's content type: 0.0.4, the format `generate_latest` writes for our names (all plain
#: ASCII). prometheus_client 0.26's CONTENT_TYPE_LATEST says `version=1.0.0` (its UTF-8 names' format);
#: 0.0.4 is what every Prometheus reads (tests/runtime/test_prom_scrape.py scrapes it with Debian's)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: upper bounds (seconds) of the TTFT, E2E and send lag histograms
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
                     5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0)
#: upper bounds (seconds) of the TPOT histogram (per output token)
TPOT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
                  0.15, 0.2, 0.3, 0.5, 1.0)
#: outcomes whose answer streamed to its end: the latency sample (`analysis.requests.FINISHED`)
FINISHED = ("ok", "quality_fail")


class _Histogram:
    """Cumulative bucket counts and a sum (a Prometheus histogram without its own registry)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf only)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: a value equal to a bound is in it
        self.sum += value

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        cumulative, running = [], 0
        for bound, count in zip((*map(_le, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=self.sum)


def _le(bound: float) -> str:
    return repr(float(bound))


class LiveMetrics:
    """The Prometheus collector of this master (see the module docstring). Thread-safe."""

    def __init__(self, session: Any = None) -> None:
        self.session = session
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.good = 0
        self.histograms = {"ttft": _Histogram(LATENCY_BUCKETS_S), "tpot": _Histogram(TPOT_BUCKETS_S),
                           "e2e": _Histogram(LATENCY_BUCKETS_S), "send_lag": _Histogram(LATENCY_BUCKETS_S)}

    # ------------------------------------------------------------------ fed with shipped summaries

    def add_rows(self, rows: Iterable[dict]) -> None:
        """Per-request summaries as shipped (one per arrival, once)."""
        slo = getattr(getattr(self.session, "config", None), "slo", None)
        with self._lock:
            for row in rows:
                outcome = str(row.get("outcome"))
                self.outcomes[outcome] += 1
                sent, sched = row.get("sent_at"), row.get("scheduled_at")
                if sent is not None and sched is not None and not row.get("capped"):
                    self.histograms["send_lag"].observe(max(0.0, float(sent) - float(sched)))
                values = request_values(row)  # `llmload.latency`'s definitions, in plain Python (per row)
                if outcome in FINISHED:
                    for key in ("ttft", "tpot", "e2e"):
                        value = values[key]
                        if value is not None:
                            self.histograms[key].observe(float(value))
                if meets_slo(row, values, slo):
                    self.good += 1

    # ------------------------------------------------------------------ the collector

    def describe(self) -> list:
        return []  # no fixed description: the registry does not call collect() at registration

    def collect(self) -> Iterable:
        with self._lock:
            requests = CounterMetricFamily("llmload_requests", "Finished arrivals by outcome (one per record).",
                                           labels=["outcome"])
            for outcome, count in sorted(self.outcomes.items()):
                requests.add_metric([outcome], count)
            yield requests
            yield CounterMetricFamily("llmload_good_requests", "Requests ok and meeting every per-request SLO "
                                      "threshold (rate() is goodput by finish time).", value=self.good)
            docs = {"ttft": "Time to first token of completed requests, seconds.",
                    "tpot": "Time per output token (E2E - TTFT) / (output tokens - 1), seconds.",
                    "e2e": "End-to-end latency of completed requests, seconds.",
                    "send_lag": "sent_at - scheduled_at of arrivals not held at the client cap, seconds."}
            for key, hist in self.histograms.items():
                yield hist.family(f"llmload_{key}_seconds", docs[key])
        yield from self._gauges()

    def _gauges(self) -> Iterable:
        session = self.session
        controller = getattr(session, "controller", None)
        runner = getattr(getattr(session, "env", None), "runner", None)
        if runner is not None:
            yield GaugeMetricFamily("llmload_workers", "Workers connected and not missing.",
                                    value=worker_count(runner))
        if controller is None:
            return
        cpu = GaugeMetricFamily("llmload_worker_cpu_ratio", "A worker's CPU while sending, fraction of one core.",
                                labels=["worker"])
        for worker, value in sorted(dict(controller.tally.worker_cpu).items()):
            cpu.add_metric([worker], value)
        yield cpu
        step = controller.running()
        running = GaugeMetricFamily("llmload_step_running", "1 while a step runs (label: the step).",
                                    labels=["step"])
        rates = {key: GaugeMetricFamily(f"llmload_step_{key}_requests_per_second", doc, labels=["step"])
                 for key, doc in (("target", "The running step's target arrival rate."),
                                  ("offered", "The running step's planned arrivals of its window so far / elapsed."),
                                  ("achieved", "The running step's arrivals sent in its window so far / elapsed."),
                                  ("goodput", "The running step's good requests of its window so far / elapsed."))}
        if step is not None:
            label = step.label
            running.add_metric([label], 1)
            offered, achieved = step.running_rates(REAL_CLOCK.now())
            values = {"target": step.target_rate, "offered": offered, "achieved": achieved,
                      "goodput": _goodput(controller, step)}
            for key, value in values.items():
                if value is not None:
                    rates[key].add_metric([label], float(value))
        yield running
        yield from rates.values()
        done = GaugeMetricFamily("llmload_steps_judged", "Steps judged so far in this run, by verdict.",
                                 labels=["verdict"])
        for verdict, count in sorted(Counter(str(s.table_row["verdict"]) for s in controller.steps
                                             if s.table_row is not None).items()):
            done.add_metric([verdict], count)
        yield done


def _goodput(controller: Any, step: Step) -> float | None:
    """Good requests scheduled in the running step's window so far / elapsed window (by arrival, as the
    step's goodput; the requests still in flight fill in as they finish)."""
    ws = step.window_start
    if ws is None:
        return None
    t = REAL_CLOCK.now()
    t = min(t, step.window_end or t)
    if t <= ws:
        return None
    # folded in as the summaries arrived (`StepRecords.good`: the window's good requests so far; an arrival
    # is shipped only after it was scheduled, so none of them is after `t`)
    return step.rows.good / (t - ws)


# ---------------------------------------------------------------------- serving


def install(session: Any) -> LiveMetrics:
    """The session's collector on a registry of its own (`session.metrics_registry`)."""
    metrics = LiveMetrics(session)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    session.metrics_registry = registry
    return metrics


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's samples in Prometheus text format."""
    return generate_latest(registry)


def add_route(app: Any, registry: CollectorRegistry, auth: Any = None) -> None:
    """`/metrics` on the web UI's Flask app (behind the UI's auth when it has one)."""
    from flask import Response

    def _metrics():
        return Response(exposition(registry), mimetype="text/plain", content_type=CONTENT_TYPE)

    view = auth(_metrics) if auth is not None else _metrics
    app.add_url_rule("/metrics", "llmload_metrics", view)


def serve(registry: CollectorRegistry, host: str, port: int) -> Any:
    """Serve `/metrics` on `host:port` in this gevent process; returns the started server. Behind the web
    UI's door (`webdoor.OwnOriginOnly`): a `Host` that is not this address is refused (DNS rebinding) and
    no other origin may read it, as on the web UI's own `/metrics`."""
    from gevent.pywsgi import WSGIServer

    from llmload.runtime.locustglue.webdoor import OwnOriginOnly

    def app(environ: dict, start_response: Any) -> list[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics\n"]
        body = exposition(registry)
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    server = WSGIServer((host, port), OwnOriginOnly(app, bound=host), log=None, error_log=None)
    server.start()
    return server
