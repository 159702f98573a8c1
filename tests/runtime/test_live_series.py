"""The web UI's live series: per-second percentiles and rates from shipped summaries, server samples,
and the one Locust request event per request that keeps Locust's RPS truthful."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.config import SLO
from llmload.runtime.master.live_series import LiveSeries, request_values

T0 = 1_000_000.0


def _row(sched: float, *, wait: float = 0.0, ttft: float = 0.1, e2e: float = 1.0, tokens: int = 11,
         outcome: str = "ok") -> dict:
    sent = sched + wait
    return {"step": "r1.00", "scheduled_at": sched, "sent_at": sent, "first_token_at": sent + ttft,
            "last_token_at": sent + e2e, "output_tokens": tokens, "outcome": outcome, "token_times": b""}


def test_request_values_follow_metrics_md():
    v = request_values(_row(T0, wait=0.05, ttft=0.2, e2e=1.2, tokens=11))
    assert v["ttft"] == pytest.approx(0.2) and v["e2e"] == pytest.approx(1.2)
    assert v["tpot"] == pytest.approx(0.1)  # (1.2 - 0.2) / (11 - 1)
    assert v["client_wait"] == pytest.approx(0.05) and v["user_ttft"] == pytest.approx(0.25)
    assert request_values(_row(T0, tokens=1))["tpot"] is None  # a 1-token answer has no TPOT, never 0


def test_per_second_percentiles_rates_and_goodput():
    slo = SLO.model_validate({"ttft_p95": "300ms"})
    live = LiveSeries(slo)
    ttfts = [0.1, 0.2, 0.3, 0.4, 0.5]
    rows = [_row(T0 + 0.1 * i, ttft=t) for i, t in enumerate(ttfts)]  # second 0: 3 of 5 meet 300 ms
    rows += [_row(T0 + 1.5, ttft=0.05, tokens=1), _row(T0 + 1.6, outcome="timeout")]  # second 1
    live.add_rows(rows)
    live.add_planned("r1.00", T0, np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.5, 1.6, 2.5]))
    s = live.series(until=T0 + 2.9)
    assert s["t0"] == int(T0) and s["t"] == [0, 1, 2]
    assert s["ttft_p50_ms"][0] == pytest.approx(300.0)
    assert s["ttft_p95_ms"][0] == pytest.approx(np.percentile(ttfts, 95) * 1000)
    assert s["ttft_p95_ms"][1] == pytest.approx(50.0)  # the timeout is not a latency sample
    assert s["tpot_p50_ms"][0] == pytest.approx(70.0)  # (1 s - TTFT) / 10: 90..50 ms
    assert s["tpot_p50_ms"][1] is None  # 1-token: no TPOT
    assert s["offered"] == [5, 2, 1] and s["achieved"] == [5, 2, 0]
    assert s["goodput"] == [3, 1, 0]  # ok and TTFT <= 300 ms; the timeout is not good


def test_a_late_result_updates_its_second():
    live = LiveSeries()
    live.add_rows([_row(T0, ttft=0.1)])
    assert live.series()["ttft_p95_ms"] == [pytest.approx(100.0)]
    live.add_rows([_row(T0 + 0.5, ttft=0.5)])  # finished later, sent in the same second
    assert live.series()["ttft_p95_ms"][0] == pytest.approx(np.percentile([0.1, 0.5], 95) * 1000)


def test_server_samples_sum_servers_and_gpus_and_skip_scrape_errors():
    live = LiveSeries()
    live.add_server(T0 + 1, {"server:http://a": {"running": 3, "waiting": 2, "kv_usage": 0.4, "t": T0 + 1},
                             "server:http://b": {"running": 1, "waiting": 0, "kv_usage": 0.7, "t": T0 + 1},
                             "server:http://c": {"running": 9, "scrape_error": 1.0},
                             "gpu:0": {"gpu_memory_used_bytes": 2**30}, "gpu:1": {"gpu_memory_used_bytes": 2**30}})
    live.add_server(T0 + 1, {"server:http://a": {"running": 5}})  # the same sample again: ignored
    server = live.series()["server"]
    assert server["t"] == [0] and server["running"] == [4.0] and server["waiting"] == [2.0]
    assert server["kv_usage"] == [0.7] and server["gpu_memory_used_bytes"] == [2.0 * 2**30]


def test_history_is_bounded_and_reset_forgets():
    live = LiveSeries(keep_s=10)
    live.add_rows([_row(T0 + i) for i in range(30)])
    s = live.series()
    assert len(s["t"]) <= 12 and s["t0"] >= int(T0) + 18
    live.reset()
    assert live.series()["t"] == []


_FIRE_SCRIPT = """
import json
import locust
from locust.env import Environment
from llmload.records import Record
from locustfiles.llm import LLMUser

T0 = 1_000_000.0
env = Environment(user_classes=[LLMUser])
fired = []
env.events.request.add_listener(lambda **kw: fired.append(
    [kw["name"], kw["exception"] is None, kw["response_time"], kw["response_length"]]))
user = LLMUser(env)
user._fire_events(Record(request_id="a", step="r1.00", worker="0", scheduled_at=T0, outcome="ok", sent_at=T0,
                         first_token_at=T0 + 0.1, last_token_at=T0 + 1.1, output_tokens=11))
user._fire_events(Record(request_id="b", step="r1.00", worker="0", scheduled_at=T0, outcome="rejected",
                         sent_at=T0, closed_at=T0 + 0.01, http_status=503))
print(json.dumps(fired))
"""


def test_each_request_fires_exactly_one_locust_request_event():
    """TTFT and TPOT used to be fired as two more request entries: Locust's RPS was 3x the truth.
    (In a subprocess: importing Locust monkey-patches the interpreter.)"""
    import json
    import os
    import subprocess
    import sys

    from support import REPO

    done = subprocess.run([sys.executable, "-c", _FIRE_SCRIPT], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    fired = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(name, ok) for name, ok, *_ in fired] == [("E2E", True), ("E2E", False)]
    assert fired[0][2] == pytest.approx(1100.0) and fired[0][3] == 11


def _session(tmp_path, *, finished: bool = False, outcome: dict | None = None):
    """A stand-in for `Session` with a controller one step into a two-step ladder."""
    from types import SimpleNamespace

    from gevent.event import Event

    from llmload.clock import now
    from llmload.config import Config

    config = Config.model_validate({
        "target": {"url": "http://127.0.0.1:8000"}, "slo": {"ttft_p95": "500ms", "tpot_p50": "40ms"},
        "shape": {"ladder": {"steps": [{"rate": 1, "duration": "10s"}, {"rate": 2, "duration": "10s"}]}},
        "client": {"max_concurrency": 8}})
    from llmload.runtime.master.step import Step, StepStatus
    from shapes.steps import StepSpec

    t = now()
    first, second = (Step(StepSpec(label=f"r{rate}.00", index=i, phase="ladder", arrival="constant",
                                   target_rate=float(rate), duration_s=10.0)) for i, rate in enumerate((1, 2)))
    first.set(index=0, status=StepStatus.RUN, start_at=t - 20, window_start=t - 20, window_end=t - 10,
              drained_at=t - 9)
    first.verdict, first.table_row = "pass", {"label": "r1.00", "verdict": "pass", "offered_rate": 1.0}
    second.set(index=1, status=StepStatus.RUNNING, start_at=t - 5, window_start=t - 5, window_end=t + 5)
    second.rows.add([_row(t - 4.5), _row(t - 4.0)])
    second.offsets = np.arange(0, 10, 0.5)
    controller = SimpleNamespace(steps=[first, second], running=lambda: second, done=Event(), now=now,
                                 tally=SimpleNamespace(step_waiting=lambda step: 0.0))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return SimpleNamespace(config=config, controller=controller, finished=finished, outcome=outcome or {},
                           greenlet=None, run_dir=run_dir, exit_code=None, overrides={"rates": [1.0, 2.0]},
                           env=SimpleNamespace(runner=None)), t


def test_live_state_of_a_running_step(tmp_path):
    from llmload.runtime.locustglue.webui import live_state

    session, t = _session(tmp_path)
    live = LiveSeries(session.config.slo)
    live.add_rows([_row(t - 19.5)])
    state = live_state(session, live)
    assert state["state"] == "running" and state["result"] is None and state["pool"] == 8
    current = state["current"]
    assert current["label"] == "r2.00" and (current["index"], current["count"]) == (2, 2)
    assert current["in_flight"] == 11 - 2  # arrivals due in the first ~5 s (0, 0.5, .. 5.0) minus the 2 finished
    assert state["slo"] == {"ttft": [{"p": 95.0, "ms": 500.0}], "tpot": [{"p": 50.0, "ms": 40.0}]}
    first = state["steps"][0]
    assert first["verdict"] == "pass" and first["start"] == pytest.approx(t - 20 - state["series"]["t0"], abs=0.01)
    assert [s["verdict"] for s in state["steps"]] == ["pass", "running"]


def test_live_state_after_the_run_links_the_report(tmp_path):
    from llmload.runtime.locustglue.webui import live_state

    session, _ = _session(tmp_path, finished=True, outcome={"verdict": "pass", "sentences": ["Last passing ..."]})
    state = live_state(session, LiveSeries())
    assert state["state"] == "finished" and state["result"]["report_url"] is None  # no report.html yet
    (session.run_dir / "report.html").write_text("<html></html>")
    result = live_state(session, LiveSeries())["result"]
    assert result["report_url"] == "./llmload/report" and result["verdict"] == "pass"
    assert result["sentences"] == ["Last passing ..."]


def test_the_web_routes_never_serve_a_secret(tmp_path):
    """The tab's JSON (live state, step rows) goes through the same redaction as records and logs: a key
    that reached an answer sentence or a label is served as `<redacted>`."""
    from types import SimpleNamespace

    import gevent
    from flask import Flask

    from llmload.redaction import clear_secrets, register_secret
    from llmload.runtime.locustglue.webui import install_web_ui

    secret = "sk-live-\"quoted\\key"  # JSON escapes it: redacting the dumped text would miss it
    session, _ = _session(tmp_path, finished=True, outcome={"verdict": "fail", "sentences": [f"401 for {secret}"]})
    from dataclasses import replace

    first = session.controller.steps[0]
    first.spec = replace(first.spec, label=f"r1-{secret}")
    first.table_row["label"] = first.spec.label
    session.file_config = None
    app = Flask("test")
    web_ui = SimpleNamespace(app=app, template_args={}, auth_required_if_enabled=lambda f: f,
                             update_template_args=lambda: None)
    spawned = []
    real_spawn = gevent.spawn
    gevent.spawn = lambda *a, **k: spawned.append(a)  # the sampler greenlet is not needed here
    try:
        install_web_ui(SimpleNamespace(web_ui=web_ui, host=None), session)
    finally:
        gevent.spawn = real_spawn
    register_secret(secret)
    try:
        client = app.test_client()
        for path in ("/llmload/live.json", "/llmload/steps.json"):
            body = client.get(path).get_data(as_text=True)
            assert "<redacted>" in body and "sk-live" not in body, path
    finally:
        clear_secrets()
