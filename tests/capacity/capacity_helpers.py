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


def sim_target(urls: list[str], **extra) -> dict:
    """A `target:` section for sims at `urls` (one: `url`, several: `urls`)."""
    target = {"api": "openai-chat", "model": "sim-model", "server": "vllm", **extra}
    if len(urls) == 1:
        target["url"] = urls[0]
    else:
        target["urls"] = urls
    return target


def run_config(tmp_path: Path, name: str, config: dict, *, timeout_s: float = 150) -> tuple[Path, int, str]:
    """`llmload run CONFIG --out DIR` as a user types it; returns (run dir, exit code, output tail)."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(cfg), "--out", str(out)],
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
