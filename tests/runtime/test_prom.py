"""Live Prometheus metrics (`llmload.runtime.locustglue.prom`): the collector's samples from shipped summaries,
read back with prometheus_client's own text parser, and the `--metrics-port` flag's path to Locust."""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from types import SimpleNamespace

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import free_port

from llmload.config import SLO
from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue import prom
from llmload.runtime.master.step import Step, StepStatus
from shapes.steps import StepBounds, StepSpec

T0 = 1_000_000.0


def _row(sched: float, *, ttft: float = 0.1, e2e: float = 1.0, tokens: int = 11, outcome: str = "ok",
         wait: float = 0.002, capped: bool = False) -> dict:
    sent = sched + wait
    return {"step": "r1.00", "scheduled_at": sched, "sent_at": sent, "first_token_at": sent + ttft,
            "last_token_at": sent + e2e, "output_tokens": tokens, "outcome": outcome, "capped": capped,
            "token_times": b""}


def _samples(registry) -> dict:
    """{(sample name, frozenset(labels)): value} of the registry's exposition, parsed by the client library."""
    text = prom.exposition(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counters_and_histograms_follow_the_shipped_summaries():
    slo = SLO.model_validate({"ttft_p95": "250ms"})
    session = SimpleNamespace(config=SimpleNamespace(slo=slo), controller=None, env=None)
    metrics = prom.install(session)
    metrics.add_rows([_row(T0, ttft=0.1, e2e=1.1), _row(T0 + 1, ttft=0.3, e2e=0.5, tokens=1),
                      _row(T0 + 2, outcome="timeout"), _row(T0 + 3, outcome="quality_fail", ttft=0.2, e2e=0.7,
                                                            tokens=6),
                      _row(T0 + 4, outcome="rejected", wait=0.5, capped=True)])
    s = _samples(session.metrics_registry)
    ok = ("llmload_requests_total", frozenset({("outcome", "ok")}))
    assert s[ok] == 2 and s[("llmload_requests_total", frozenset({("outcome", "timeout")}))] == 1
    assert s[("llmload_good_requests_total", frozenset())] == 1  # the second ok is over the TTFT threshold
    # latencies of completed requests (ok and quality_fail): 3; TPOT only with 2+ tokens: 2
    assert s[("llmload_ttft_seconds_count", frozenset())] == 3
    assert s[("llmload_ttft_seconds_sum", frozenset())] == pytest.approx(0.6)
    assert s[("llmload_tpot_seconds_count", frozenset())] == 2
    assert s[("llmload_tpot_seconds_sum", frozenset())] == pytest.approx(0.1 + 0.1)  # (1.1-0.1)/10, (0.7-0.2)/5
    assert s[("llmload_e2e_seconds_bucket", frozenset({("le", "1.0")}))] == 2
    assert s[("llmload_e2e_seconds_bucket", frozenset({("le", "+Inf")}))] == 3
    assert s[("llmload_ttft_seconds_bucket", frozenset({("le", "0.1")}))] == 1  # le: a value on a bound is in it
    # send lag: every sent arrival not held at the client cap
    assert s[("llmload_send_lag_seconds_count", frozenset())] == 4
    assert s[("llmload_send_lag_seconds_sum", frozenset())] == pytest.approx(4 * 0.002)
    buckets = [v for (name, _), v in s.items() if name == "llmload_ttft_seconds_bucket"]
    assert sorted(buckets) == buckets or len(buckets) == len(prom.LATENCY_BUCKETS_S) + 1


class _RunningStep(Step):
    """A running step whose rates so far are given (they depend on the wall clock)."""

    __slots__ = ()

    def running_rates(self, t: float) -> tuple[float | None, float | None]:
        return 2.0, 1.75


def test_running_step_gauges_workers_and_cpu():
    from llmload.clock import now

    t = now()
    step = _RunningStep(StepSpec(label="r2.00", index=1, phase="ladder", arrival="constant", target_rate=2.0,
                                 duration_s=14.0))
    step.set(index=1, status=StepStatus.RUNNING, start_at=t - 5, window_start=t - 4, window_end=t + 10)
    # shipped as the tally folds them in (`StepRecords`: the window's good requests counted on arrival)
    step.rows.add([_row(t - 3.5), _row(t - 2.5), _row(t - 1.5, outcome="timeout"), _row(t - 4.5)],  # last: warm-up
                  bounds=StepBounds(t - 5, t - 4, t + 10, t + 40), slo=SLO())
    judged = Step(StepSpec(label="r1.00", index=0, phase="ladder", arrival="constant", target_rate=1.0,
                           duration_s=14.0))
    judged.verdict, judged.table_row = "pass", {"verdict": "pass"}
    controller = SimpleNamespace(
        running=lambda: step, steps=[judged, step], tally=SimpleNamespace(worker_cpu={"1": 0.25, "2": 0.5}),
        config=SimpleNamespace(slo=SLO()))
    clients = SimpleNamespace(all=[SimpleNamespace(state="ready"), SimpleNamespace(state="running"),
                                   SimpleNamespace(state="missing")])
    session = SimpleNamespace(config=None, controller=controller, env=SimpleNamespace(runner=SimpleNamespace(
        clients=clients)))
    s = _samples(prom.install(session).session.metrics_registry)
    step_label = frozenset({("step", "r2.00")})
    assert s[("llmload_workers", frozenset())] == 2
    assert s[("llmload_worker_cpu_ratio", frozenset({("worker", "2")}))] == 0.5
    assert s[("llmload_step_running", step_label)] == 1
    assert s[("llmload_step_target_requests_per_second", step_label)] == 2.0
    assert s[("llmload_step_offered_requests_per_second", step_label)] == 2.0
    assert s[("llmload_step_achieved_requests_per_second", step_label)] == 1.75
    goodput = s[("llmload_step_goodput_requests_per_second", step_label)]
    assert math.isclose(goodput, 2 / 4, rel_tol=0.05)  # 2 good in the window's first ~4 s
    assert s[("llmload_steps_judged", frozenset({("verdict", "pass")}))] == 1


def test_serve_answers_metrics_in_text_format():
    session = SimpleNamespace(config=None, controller=None, env=None)
    metrics = prom.install(session)
    metrics.add_rows([_row(T0)])
    port = free_port()
    server = prom.serve(session.metrics_registry, "127.0.0.1", port)
    def fetch(path: str) -> tuple[str, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.headers["Content-Type"], resp.read().decode()

    def rebound() -> tuple[int, str, str | None]:  # a page of another site, its name pointed at 127.0.0.1
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Host": f"evil.example:{port}", "Origin": "http://evil.example"})
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, resp.read().decode(), resp.headers["Access-Control-Allow-Origin"]
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers["Access-Control-Allow-Origin"]

    try:  # the requests from a real thread, while this one's gevent loop serves them
        content_type, body = gevent.get_hub().threadpool.spawn(fetch, "/metrics").get(timeout=10)
        status, refused, cors = gevent.get_hub().threadpool.spawn(rebound).get(timeout=10)
    finally:
        server.stop()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert 'llmload_requests_total{outcome="ok"} 1.0' in body
    # the standalone --metrics-port has the web UI's door: another name for this address is refused
    assert status == 403 and "evil.example" in refused and "llmload_requests_total" not in refused
    assert cors is None


def test_metrics_port_reaches_the_master_only():
    cmd = locust_command("run.yaml", None, master=True, metrics_port=9646, metrics_host="0.0.0.0")
    assert cmd[cmd.index("--llmload-metrics-port") + 1] == "9646"
    assert cmd[cmd.index("--llmload-metrics-host") + 1] == "0.0.0.0"
    assert "--llmload-metrics-port" not in locust_command("run.yaml", None, worker=True, metrics_port=9646)
    assert "--llmload-metrics-port" not in locust_command("run.yaml", None)
