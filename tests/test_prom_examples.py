"""The live-metrics examples stay in step with the code: the Grafana dashboard queries only metric names the
master serves, and the compose profile `prometheus` scrapes the master's web UI and the server."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from llmload.clock import now
from llmload.config import SLO
from llmload.runtime.locustglue import prom
from llmload.runtime.master.step import Step, StepStatus
from shapes.steps import StepSpec

REPO = Path(__file__).resolve().parents[1]


def served_sample_names() -> set[str]:
    """Every sample name the collector gives with a step running, a worker and a judged step."""
    t = now()
    step = Step(StepSpec(label="r1.00", index=0, phase="ladder", arrival="constant", target_rate=1.0,
                         duration_s=6.0))
    step.set(index=0, status=StepStatus.RUNNING, start_at=t - 2, window_start=t - 1, window_end=t + 5)
    step.sent, step.offsets = {"1": 1}, np.arange(0.0, 6.0, 0.5)  # the rates so far: offered and achieved
    judged = Step(StepSpec(label="r0.50", index=1, phase="ladder", arrival="constant", target_rate=0.5,
                           duration_s=6.0))
    judged.verdict, judged.table_row = "pass", {"verdict": "pass"}
    controller = SimpleNamespace(running=lambda: step, steps=[judged, step],
                                 tally=SimpleNamespace(worker_cpu={"1": 0.1}), config=SimpleNamespace(slo=SLO()))
    session = SimpleNamespace(config=None, controller=controller,
                              env=SimpleNamespace(runner=SimpleNamespace(clients=SimpleNamespace(all=[]))))
    metrics = prom.install(session)
    metrics.add_rows([{"step": "r1.00", "scheduled_at": t - 0.5, "sent_at": t - 0.5, "first_token_at": t - 0.4,
                       "last_token_at": t - 0.1, "output_tokens": 4, "outcome": "ok"}])
    text = prom.exposition(session.metrics_registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_dashboard_queries_only_served_metrics():
    dashboard = json.loads((REPO / "examples" / "grafana" / "llmload.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\bllmload_\w+", e)}
    served = served_sample_names()
    assert used and used <= served, sorted(used - served)
    for key in ("ttft", "tpot", "e2e", "send_lag"):  # every histogram has a panel
        assert f"llmload_{key}_seconds_bucket" in used
    assert {"llmload_requests_total", "llmload_workers", "llmload_worker_cpu_ratio"} <= used


def test_compose_profile_prometheus_scrapes_the_master_and_the_server():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    service = services["prometheus"]
    assert service["profiles"] == ["prometheus"]
    source = next(v.split(":")[0] for v in service["volumes"] if v.endswith("/etc/prometheus/prometheus.yml:ro"))
    config_path = (REPO / source).resolve()
    config = yaml.safe_load(config_path.read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    masters = [n for n, s in services.items() if "--master" in s.get("command", [])]
    assert masters and all(f"{m}:8089" in targets for m in masters)  # the web UI's /metrics (--web)
    assert all("--web" in services[m]["command"] for m in masters)
    assert "vllm:8000" in targets and any("8000" in p for p in services["vllm"]["command"])
    assert all(p.startswith("127.0.0.1:") for p in service["ports"])  # published on loopback only
    if shutil.which("promtool"):
        done = subprocess.run(["promtool", "check", "config", str(config_path)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
