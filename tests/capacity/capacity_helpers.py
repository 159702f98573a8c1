"""Helpers for the capacity-planning tests (issue 10): run the real `llmload run` on a config, read the run.

Numbers the tests check are recomputed here from `records.parquet` and `plan.json` by METRICS.md's
definitions, never taken from the analysis under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from support import REPO

#: one sequence at a time, ~30 ms per step: a request of 8 output tokens takes ~0.25 s, so one
#: instance serves ~4 req/s; constant arrivals make the outcome deterministic: at 1.5 req/s nothing
#: queues anywhere; at 6 req/s one instance falls behind (queue grows, E2E p95 over 1.5 s) while two
#: instances, 3 req/s each by round robin, still never queue
SIM = {"max_num_seqs": 1, "step_base_s": "30ms"}
RATES = (1.5, 6.0)
E2E_SLO_S = 1.5
COST_PER_HOUR = {1: 2.5, 2: 5.0}


def sim_target(urls: list[str], **extra) -> dict:
    """A `target:` section for sims at `urls` (one: `url`, several: `urls`)."""
    target = {"api": "openai-chat", "model": "sim-model", "server": "vllm", **extra}
    if len(urls) == 1:
        target["url"] = urls[0]
    else:
        target["urls"] = urls
    return target


def run_config(tmp_path: Path, name: str, config: dict, *, timeout_s: float = 150,
               report: bool = True) -> tuple[Path, int, str]:
    """`llmload run CONFIG --out DIR` as a user types it (`--no-report` unless `report`); returns (run dir,
    exit code, output tail)."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(cfg), "--out", str(out),
                           *([] if report else ["--no-report"])],
                          capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return out, done.returncode, (done.stdout + done.stderr)[-3000:]


def read_json(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / name).read_text(encoding="utf-8"))


def window_requests(run_dir: Path) -> tuple[pd.DataFrame, dict[str, tuple[float, float]]]:
    """Records with `in_window` (by scheduled_at, METRICS.md) and each step's window."""
    records = pd.read_parquet(run_dir / "records.parquet")
    windows = {s["label"]: (s["window_start"], s["window_end"]) for s in read_json(run_dir, "plan.json")["steps"]
               if s["status"] != "not_run"}
    start = records["step"].map(lambda s: windows.get(s, (float("nan"),) * 2)[0])
    end = records["step"].map(lambda s: windows.get(s, (float("nan"),) * 2)[1])
    return records.assign(in_window=(records["scheduled_at"] >= start) & (records["scheduled_at"] < end)), windows


def good_mask(records: pd.DataFrame, *, ttft_s: float | None = None, e2e_s: float | None = None) -> pd.Series:
    """ok requests meeting every given per-request threshold (TTFT = first - sent, E2E = last - sent)."""
    good = records["outcome"] == "ok"
    if ttft_s is not None:
        good &= (records["first_token_at"] - records["sent_at"]) <= ttft_s
    if e2e_s is not None:
        good &= (records["last_token_at"] - records["sent_at"]) <= e2e_s
    return good


def ladder_config(urls: list[str], *, step_s: float = 6, **target) -> dict:
    gpus = len(urls)
    return {"target": sim_target(urls, **target),
            "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                         "output_tokens": {"dist": "fixed", "value": 8}},
            "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "15s",
                                 "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in RATES]}},
            "slo": {"min_samples": 5, "e2e_p95": f"{E2E_SLO_S}s"},
            # the generator limit these tests need: at 6 req/s constant (167 ms apart) with a 1.5 s E2E
            # target, a lag under 100 ms changes neither which deployment falls behind nor a verdict
            "client": {"max_send_lag_p99": "100ms"},
            "telemetry": {"gpu": "off"},
            # max_num_seqs stated, as for a real vLLM: its /metrics does not publish it (issue 18)
            "conditions": {"gpus": gpus, "instances": gpus, "cost_per_hour": COST_PER_HOUR[gpus],
                           "owner": "capacity team", "max_num_seqs": SIM["max_num_seqs"]}}


def html_table(page: str, table_id: str) -> list[dict[str, str]]:
    """The rows of `<table id=table_id>` in a report page as {header: cell text}."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.inside, self.cell, self.headers, self.rows = False, None, [], []

        def handle_starttag(self, tag, attrs):
            if tag == "table" and dict(attrs).get("id") == table_id:
                self.inside = True
            elif self.inside and tag == "tr":
                self.rows.append([])
            elif self.inside and tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "table":
                self.inside = False
            elif self.inside and tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    reader = Reader()
    reader.feed(page)
    headers, *rows = reader.rows
    return [dict(zip(headers, row, strict=True)) for row in rows]
