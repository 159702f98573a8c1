"""A real Prometheus server (Debian's `prometheus`) scrapes a live run's `/metrics` every second, on the
web UI and on `--llmload-metrics-port`; what it stored must agree with the run's records.

The run keeps its web UI up a few seconds after it ends (`--autoquit`), so the last scrapes see every
record: the scraped counters and histogram counts equal the records' at the end, not just bound them.
Without the binary the test skips locally and fails under CI=true (.ci/run installs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from runtime_helpers import records
from support import REPO, free_port, start_sim, stop_process, wait_http, write_config

from llmload.runtime.launcher.run import locust_command

pytestmark = [pytest.mark.slow]

PROMETHEUS = "prometheus"


def _require_prometheus() -> str:
    import sys

    sys.path.insert(0, str(REPO / "tests" / "real_engine"))
    from engine_gate import in_ci

    path = shutil.which(PROMETHEUS)
    if path is None:
        reason = "no prometheus binary (Debian: apt-get install -y prometheus; .ci/run installs it)"
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return path


def _query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        data = json.loads(resp.read())
    assert data["status"] == "success", data
    return data["data"]["result"]


def _by_job(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["job"]: float(r["value"][1]) for r in result}


def test_prometheus_scrapes_a_live_run_and_agrees_with_its_records(tmp_path: Path):
    binary = _require_prometheus()
    sim = start_sim(tmp_path)
    web_port, metrics_port, prom_port = free_port(), free_port(), free_port()
    config = {"target": {"url": sim.url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                           "output_tokens": {"dist": "fixed", "value": 4}},
              "shape": {"ladder": {"arrival": "poisson", "warmup": "0s", "drain_timeout": "10s",
                                   "steps": [{"rate": 6, "duration": "4s"}, {"rate": 10, "duration": "4s"}]}},
              "slo": {"min_samples": 5, "ttft_p95": "2s"}, "client": {"max_concurrency": 32},
              "telemetry": {"gpu": "off"}}
    prom_config = tmp_path / "prometheus.yml"
    prom_config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 900ms}\n"
        "scrape_configs:\n"
        f"  - {{job_name: web, static_configs: [{{targets: ['127.0.0.1:{web_port}']}}]}}\n"
        f"  - {{job_name: port, static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]}}\n")
    base = f"http://127.0.0.1:{prom_port}"
    with open(tmp_path / "prometheus.log", "wb") as log:
        prometheus = subprocess.Popen([binary, f"--config.file={prom_config}",
                                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{prom_port}"],
                                      stdout=log, stderr=subprocess.STDOUT)
    run_dir, locust = tmp_path / "run", None
    try:
        wait_http(f"{base}/-/ready", timeout_s=30, proc=prometheus)
        # no report.html: the test reads the records and Prometheus, not the report (~0.5 s of CPU saved)
        cmd = locust_command(write_config(tmp_path, config), run_dir, web=True, metrics_port=metrics_port,
                             report=False) + [
            "--web-port", str(web_port), "--autostart", "--autoquit", "6"]
        locust = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        locust.wait(timeout=120)
        time.sleep(1.5)  # the last scrape is stored (the targets are gone now: later scrapes fail)
        recs = records(run_dir)
        finished = recs[recs["outcome"].isin(["ok", "quality_fail"])]

        def last(expr: str) -> dict[str, float]:
            return _by_job(_query(base, f"max_over_time({expr}[10m])"))

        ok = int((recs["outcome"] == "ok").sum())
        assert ok > 20
        assert last('llmload_requests_total{outcome="ok"}') == {"web": ok, "port": ok}
        total = _by_job(_query(base, "sum by (job) (max_over_time(llmload_requests_total[10m]))"))
        assert total == {"web": len(recs), "port": len(recs)}
        ttft = (finished["first_token_at"] - finished["sent_at"]).dropna()
        assert last("llmload_ttft_seconds_count") == {"web": len(ttft), "port": len(ttft)}
        for job, value in last("llmload_ttft_seconds_sum").items():
            assert value == pytest.approx(float(ttft.sum()), rel=1e-6), job
        e2e_under_1s = int(((finished["last_token_at"] - finished["sent_at"]) <= 1.0).sum())
        assert last('llmload_e2e_seconds_bucket{le="1.0"}') == {"web": e2e_under_1s, "port": e2e_under_1s}
        # while it ran: a step of the plan was the running step (the first scrapes may come after the first
        # step: Prometheus starts scraping a new target within an interval), one worker (the local runner)
        steps = {r["metric"]["step"] for r in _query(base, 'max_over_time(llmload_step_running{job="port"}[10m])')}
        assert steps and steps <= set(recs["step"].unique())
        assert set(last("llmload_workers").values()) == {1.0}
        achieved = _query(base, 'max_over_time(llmload_step_achieved_requests_per_second{job="port"}[10m])')
        assert achieved and all(float(r["value"][1]) > 0 for r in achieved)
    finally:
        if locust is not None:
            stop_process(locust)
        stop_process(prometheus)
        stop_process(sim.proc)


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path, capfd, monkeypatch):
    """The command's entry in this process (the port is the launcher's check, before the Locust child runs)."""
    import socket

    from support import base_config

    from llmload.cli import main

    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        # no server at the target: the ports are checked before it is contacted (a pre-flight refusal
        # instead of the port's line fails this test too)
        config = base_config("http://127.0.0.1:9", {"ladder": {"arrival": "constant", "warmup": "0s",
                                                              "steps": [{"rate": 2, "duration": "2s"}]}})
        monkeypatch.chdir(tmp_path)
        capfd.readouterr()
        code = main(["run", str(write_config(tmp_path, config)), "--out", str(tmp_path / "run"),
                     "--metrics-port", str(port)])
        said = capfd.readouterr()
    finally:
        holder.close()
    assert code == 2, said.out + said.err
    errors = [line for line in said.err.splitlines() if line.startswith("llmload: error:")]
    assert errors == [f"llmload: error: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: "
                      "Address already in use"], said.err
    assert "Traceback" not in said.err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
