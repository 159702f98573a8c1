"""A hand-made `Analysis`-shaped object (docs/ARCHITECTURE.md "Analysis") for report tests.

Built from the pinned field and column names only, so the report is tested without depending on how
the analysis computes them. Steps: three ladder rates (r2.00 fails on TTFT), one unrun rate whose
(wrong) numbers the report must blank, a burst and a uniform phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

import numpy as np
import pandas as pd

from llmload.config import SLO

SECRET = "sk-test-SECRET-1234567890"


@dataclass
class FakeAnalysis:
    steps: pd.DataFrame
    summary: dict
    worksheet: pd.DataFrame
    requests: pd.DataFrame
    split: pd.DataFrame
    burst: pd.DataFrame | None
    timeline: pd.DataFrame
    slices: pd.DataFrame | None
    instances: pd.DataFrame | None
    decision: dict
    warnings: list
    slo: SLO


def _step(label, index, phase, rate, status, verdict, ttft95, failing=(), t0=1000.0):
    ws = t0 + index * 40.0
    return {"label": label, "index": index, "phase": phase, "status": status, "target_rate": rate,
            "concurrency": None, "window_start": ws, "window_end": ws + 30.0, "window_s": 30.0,
            "arrivals": rate * 30, "sent": rate * 30, "completed": rate * 30, "ok": rate * 30,
            "offered_rate": rate, "achieved_rate": rate * 0.995,
            "completion_throughput": rate * 0.99, "goodput": rate * (0.97 if verdict == "pass" else 0.5),
            "slo_attainment": 0.97 if verdict == "pass" else 0.5,
            "ttft_p50_s": ttft95 / 2, "ttft_p95_s": ttft95, "ttft_p99_s": ttft95 * 1.3,
            "tpot_p50_s": 0.02, "tpot_p95_s": 0.03, "tpot_p99_s": 0.04,
            "e2e_p50_s": 1.5, "e2e_p95_s": 2.0 + ttft95, "e2e_p99_s": 2.5 + ttft95,
            "client_wait_p95_s": 0.001, "server_queue_p95_s": ttft95 * 0.6, "send_lag_p99_s": 0.002,
            "outcomes": {"ok": int(rate * 30)}, "output_mismatch_ratio": 0.0,
            "verdict": verdict, "failing": list(failing)}


def make_analysis(*, not_run_numbers: bool = True) -> FakeAnalysis:
    rows = [_step("r0.50", 0, "ladder", 0.5, "run", "pass", 0.3),
            _step("r1.00", 1, "ladder", 1.0, "run", "pass", 0.6),
            _step("r2.00", 2, "ladder", 2.0, "run", "fail", 1.8, failing=["ttft_p95", "queue_growth"]),
            _step("r4.00", 3, "ladder", 4.0, "not_run", "pass", 9.0),
            _step("burst", 4, "burst", 1.0, "run", "fail", 1.2, failing=["ttft_p95"]),
            _step("uniform", 5, "uniform", 1.0, "run", "pass", 0.5)]
    steps = pd.DataFrame(rows)
    rng = np.random.default_rng(1)
    req_rows = []
    for row in rows[:3] + rows[4:]:
        n = int(row["target_rate"] * 30)
        ttft = rng.lognormal(np.log(row["ttft_p95_s"] / 2), 0.4, n)
        for i in range(n):
            req_rows.append({"request_id": f"{row['label']}-{i}", "step": row["label"], "outcome": "ok",
                             "ttft_s": ttft[i], "e2e_s": ttft[i] + 1.5, "output_tokens": 64,
                             "cached_tokens": 0, "in_window": True, "good": ttft[i] < 1.0})
    requests = pd.DataFrame(req_rows)
    t = np.arange(1000.0, 1240.0)
    timeline = pd.DataFrame({"t": t, "step": "", "arrivals": rng.poisson(1.0, len(t)),
                             "sent": 1, "completed": 1, "in_flight": rng.uniform(0, 5, len(t)),
                             "ttft_p95_s": rng.uniform(0.2, 2, len(t)), "running": 4.0,
                             "waiting": np.linspace(0, 8, len(t)), "kv_usage": np.linspace(0.1, 0.7, len(t)),
                             "gpu_memory_used_bytes": np.nan})
    split = pd.DataFrame([{"step": s, "component": c, "mean_s": v, "p50_s": v, "p95_s": v * 2,
                           "share": 0.25, "basis": "vllm queue histogram"}
                          for s in ("r0.50", "r1.00", "r2.00")
                          for c, v in (("client_wait", 0.001), ("server_queue", 0.2), ("prefill", 0.1),
                                       ("decode", 1.4))])
    burst = pd.DataFrame([{"metric": "ttft_p95_s", "burst": 1.2, "uniform": 0.5, "difference": 0.7,
                           "ratio": 2.4},
                          {"metric": "goodput", "burst": 0.6, "uniform": 0.97, "difference": -0.37,
                           "ratio": 0.62}]).assign(burst_step="burst", uniform_step="uniform",
                                                   burst_verdict="fail", uniform_verdict="pass")
    worksheet = pd.DataFrame([{"step": r["label"], "target_rate": r["target_rate"],
                               "offered_rate": r["offered_rate"], "ttft_p95_ms": r["ttft_p95_s"] * 1000,
                               "verdict": r["verdict"]} for r in rows])
    if not not_run_numbers:
        worksheet.loc[3, ["offered_rate", "ttft_p95_ms", "verdict"]] = None
    slo = SLO.model_validate({"ttft_p95": "1s", "tpot_p95": "80ms", "queue_growth": "forbid"})
    decision = {"thresholds": {"ttft_p95": "1s", "tpot_p95": "80ms"},
                "goodput_at_each_rate": [{"rate": 0.5, "goodput": 0.485}, {"rate": 1.0, "goodput": 0.97}],
                "last_passing_rate": 1.0, "failing_dimension": "ttft_p95", "owner": "capacity team",
                "retest_triggers": ["model revision changes", "max-num-seqs changes"]}
    summary = {"verdict": "fail", "last_passing_rate": 1.0, "steps": [],
               "knee": {"rate": 1.52, "low": 1.31, "high": 1.74, "confidence": 0.9, "binding": "ttft_p95",
                        "targets": {"ttft_p95": {"rate": 1.52, "low": 1.31, "high": 1.74}},
                        "headroom": {"tpot_p95": 0.41}, "basis": "realised_offered_rate", "steps_used": 4},
               "search": {"stopped": "budget", "steps": 2, "extensions": 0, "elapsed_s": 300.0}}
    return FakeAnalysis(steps=steps, summary=summary, worksheet=worksheet, requests=requests, split=split,
                        burst=burst, timeline=timeline, slices=None, instances=None, decision=decision,
                        warnings=[], slo=slo)


def make_manifest() -> dict:
    return {"run_id": "test-run", "model": "sim-model",
            "conditions": {"gpus": 2, "instances": 1, "cost_per_hour": 4.0, "owner": "capacity team"},
            "config": {"target": {"url": "http://127.0.0.1:9", "model": "sim-model",
                                  "api_key_env": "OPENAI_API_KEY",
                                  "headers": {"Authorization": f"Bearer {SECRET}"}},
                       "requests": {"shared_prefix": {"ratio": 0.3}},
                       "slo": {"ttft_p95": 1.0}},
            "versions": {"llmload": "0.1.0"}, "seeds": {"requests": 1}, "api_key": SECRET,
            "fingerprint": "abc123"}




def write_run_dir(root, *, steps: list[tuple], gpus: int, cost_per_hour: float | None,
                  slo: dict, window_s: float = 100.0, output_tokens: int = 64, tpot_s: float = 0.02,
                  client: dict | None = None, requests: dict | None = None, workers: int | None = None) -> None:
    """A tiny real run directory: records.parquet (via merge_records from JSONL), plan.json, manifest.json.

    `steps` holds (label, rate, ttft_s[, phase]): arrivals every 1/rate seconds over the window, every
    request ok with `output_tokens` tokens `tpot_s` apart after a TTFT of `ttft_s`, sent 1 ms after its
    scheduled time. `client`, `requests` and `workers` go into the manifest as the run's config.
    """
    import json
    from pathlib import Path

    from llmload.records import Record, RecordWriter, merge_records

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    plan_steps = []
    start = 1000.0
    with RecordWriter(root / "records" / "worker-0.jsonl") as writer:
        for index, (label, rate, ttft_s, *phase) in enumerate(steps):
            n = int(round(rate * window_s))
            for i in range(n):
                scheduled = start + i / rate
                sent = scheduled + 0.001
                times = [sent + ttft_s + k * tpot_s for k in range(output_tokens)]
                writer.write(Record(request_id=f"{label}-{i}", step=label, worker="0", scheduled_at=scheduled,
                                    outcome="ok", sent_at=sent, first_token_at=times[0], last_token_at=times[-1],
                                    closed_at=times[-1] + 0.001, input_tokens=100, output_tokens=output_tokens,
                                    planned_output_tokens=output_tokens, http_status=200, token_times=times,
                                    dequeued_at=sent))
            plan_steps.append({"label": label, "index": index, "phase": phase[0] if phase else "ladder",
                               "target_rate": rate,
                               "arrival": "constant", "concurrency": None, "start_at": start,
                               "window_start": start, "window_end": start + window_s,
                               "drain_deadline": start + window_s + 30, "drained_at": start + window_s + 5,
                               "planned_arrivals": n, "status": "run"})
            start += window_s + 10.0
    merge_records(sorted((root / "records").glob("*.jsonl")), root / "records.parquet")
    plan = {"kind": "ladder", "started_at": 1000.0, "ended_at": start, "workers": 1, "seed": 1,
            "steps": plan_steps}
    (root / "plan.json").write_text(json.dumps(plan))
    manifest = {"run_id": root.name, "conditions": {"gpus": gpus, "instances": gpus,
                                                    "cost_per_hour": cost_per_hour, "owner": "ops"},
                "config": {"target": {"url": "http://127.0.0.1:9", "model": "sim-model"}, "slo": slo},
                "fingerprint": {"model": "sim-model", "gpus": gpus}}
    for key, value in (("client", client), ("requests", requests)):
        if value is not None:
            manifest["config"][key] = value
    if workers is not None:
        manifest["workers"] = workers
    (root / "manifest.json").write_text(json.dumps(manifest))


class Page(HTMLParser):
    """Collects ids, plot figures with an <svg> inside, and the rows of every table by id."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.plots: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.resources: list[str] = []
        self._figure: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("src", "href"):
            if attrs.get(key) and not attrs[key].startswith("#"):
                self.resources.append(attrs[key])
        if tag == "figure" and "plot" in (attrs.get("class") or "").split():
            self._figure = attrs.get("id")
        elif tag == "svg" and self._figure:
            self.plots.append(self._figure)
            self._figure = None
        elif tag == "table" and attrs.get("id"):
            self._table = attrs["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
