"""Start `llmload sim` as a child process (the demo, calibrate and tests use it) and stop it by PID.

The sim is started with `--port 0` and the URL is read from the one line it prints when listening, so
there is no race for a port between choosing it and binding it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from llmload.errors import ServerError

__all__ = ["SimProcess", "start_sim_process", "stop_process"]

_LISTENING = re.compile(r"listening on (http://\S+)")


@dataclass
class SimProcess:
    """A running sim: its process, base URL, ground-truth log and output log."""

    proc: subprocess.Popen
    url: str
    ground_truth: Path
    log: Path

    def stop(self) -> None:
        stop_process(self.proc)


def start_sim_process(folder: Path, *, flavor: str = "vllm", settings: dict | None = None, seed: int = 0,
                      timeout_s: float = 20.0, port: int = 0, reuse_port: bool = False) -> SimProcess:
    """Start the sim with `settings` (sim YAML keys) writing `sim.yaml`, `sim.log` and
    `sim-ground-truth.jsonl` into `folder`; wait until it listens. Raises ServerError if it does not.
    `port` 0 picks a free one; `reuse_port` lets several sims share one port (`llmload sim --reuse-port`)."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "llmload.cli", "sim", "--flavor", flavor, "--port", str(port), "--seed", str(seed),
           "--ground-truth", str(folder / "sim-ground-truth.jsonl")] + (["--reuse-port"] if reuse_port else [])
    if settings is not None:
        (folder / "sim.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
        cmd += ["--config", str(folder / "sim.yaml")]
    log_path = folder / "sim.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _LISTENING.search(log_path.read_text(encoding="utf-8", errors="replace"))
        if found:
            return SimProcess(proc, found.group(1), folder / "sim-ground-truth.jsonl", log_path)
        if proc.poll() is not None:
            raise ServerError(f"the sim exited with {proc.returncode} before listening: see {log_path}")
        time.sleep(0.05)
    stop_process(proc)
    raise ServerError(f"the sim did not start within {timeout_s:g}s: see {log_path}")


def stop_process(proc: subprocess.Popen, *, timeout_s: float = 5.0) -> None:
    """Terminate a child by PID, then kill it if it does not exit within `timeout_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
