"""Helpers for the runtime tests: write a run config, run Locust on it as a subprocess, read the run."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
from support import base_config, write_config  # noqa: F401  (re-exported for the runtime tests)

from llmload.runtime.launcher.run import locust_command


def run_locust(config_path: Path, run_dir: Path, *, processes: int = 0, timeout_s: float = 120,
               env: dict | None = None, extra: list[str] | None = None,
               report: bool = True, locustfile: Path | None = None) -> subprocess.CompletedProcess:
    """Run Locust headless on `config_path` into `run_dir`; returns the finished process. `report=False`:
    no report.html (`--llmload-no-report`), for a test that reads none of it: matplotlib's import and the
    plots are ~1.5 s of a short run's ~4 s of CPU. `locustfile`: the user's own, as `llmload run --locustfile`.

    Its output is also kept beside the run directory (`<run_dir>.log`) for a failing test to show.
    """
    cmd = locust_command(config_path, run_dir, processes=processes, locustfile=locustfile,
                         report=report) + (extra or [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})
    Path(f"{run_dir}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    return done


def wait_step_running(run_dir: Path, *, after_s: float, timeout_s: float = 90.0,
                      proc: subprocess.Popen | None = None) -> None:
    """Wait until the first step of the run in `run_dir` started `after_s` seconds ago (plan.json's
    `start_at`); with `proc`, fail at once if that process ended first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc is None or proc.poll() is None, "the run ended before its first step"
        try:
            start = json.loads((run_dir / "plan.json").read_text())["steps"][0]["start_at"]
        except (OSError, ValueError, KeyError, IndexError):
            start = None
        if start is not None and time.time() >= start + after_s:
            return
        time.sleep(0.1)
    raise AssertionError("the first step did not start")


def records(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "records.parquet")


def plan(run_dir: Path) -> dict:
    return json.loads((run_dir / "plan.json").read_text())


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def start_web_run(sim_url: str, tmp_path: Path, steps: list[dict], *, autoquit_s: int | None = None,
                  autostart: bool = True, stderr: int | None = subprocess.DEVNULL,
                  **sections: dict) -> tuple[subprocess.Popen, str, Path]:
    """Start a constant-rate ladder with Locust's web UI on a free port (autostarted unless told not to:
    then the test presses Start); returns (process, UI base URL, run directory). `sections` replace
    config sections (e.g. `slo=`). The caller stops the process."""
    from support import free_port

    config = base_config(sim_url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                              "steps": steps}}, client={"max_concurrency": 16})
    config.update(sections)
    run_dir, port = tmp_path / "run", free_port()
    cmd = locust_command(write_config(tmp_path, config), run_dir, web=True) + ["--web-port", str(port)]
    if autostart:
        cmd.append("--autostart")
    if autoquit_s is not None:
        cmd += ["--autoquit", str(autoquit_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    return proc, f"http://127.0.0.1:{port}", run_dir
