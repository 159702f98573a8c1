"""Issue 33 item 1, end to end: `llmload run` against a server whose every 2nd answer is one endless
`data: xxxx...` line. The run finishes with every request recorded (the endless ones `malformed`) and,
stopped by a signal mid-step, still answers it and writes its files. Ground truth: the server's log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from support import base_config, ended_whole

from hostile.hostile_server import hostile_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _config(url: str, duration: str) -> dict:
    config = base_config(url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                          "steps": [{"rate": 4, "duration": duration}]}})
    config["target"].update(timeout="30s", idle_timeout="10s")
    return config


def _start(tmp_path: Path, config: dict) -> tuple[subprocess.Popen, Path, Path]:
    import yaml

    path, run_dir, log = tmp_path / "run.yaml", tmp_path / "run", tmp_path / "llmload.log"
    path.write_text(yaml.safe_dump(config))
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "run", str(path), "--out", str(run_dir),
                                 "--no-report"],
                                stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    return proc, run_dir, log


def _wait(proc: subprocess.Popen, timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_run_against_endless_lines_records_every_request(tmp_path, capfd) -> None:
    """The command's entry in this process (the signal test below runs it in its own)."""
    import yaml

    from llmload.cli import main

    path, run_dir = tmp_path / "run.yaml", tmp_path / "run"
    with hostile_server("endless_line", every=2) as server:
        path.write_text(yaml.safe_dump(_config(server.url, "4s")))
        code = main(["run", str(path), "--out", str(run_dir), "--no-report"])
    said = capfd.readouterr()
    output = said.out + said.err
    assert "Traceback" not in output, output[-3000:]
    assert ended_whole(code, run_dir, codes=(0, 1)), output[-3000:]  # a verdict, not a crash
    assert (run_dir / "summary.json").exists() and (run_dir / "records.parquet").exists(), output[-3000:]
    df = pd.read_parquet(run_dir / "records.parquet")
    sent = {r.request_id: r.index for r in server.requests(method="POST") if r.request_id in set(df["request_id"])}
    assert len(sent) == len(df) >= 12  # 16 planned; each one the server received is a record
    outcomes = df.set_index("request_id")["outcome"]
    assert set(outcomes) <= {"ok", "malformed"}, outcomes.value_counts()
    assert (outcomes == "malformed").sum() >= 4
    assert all("longer than" in e for e in df.loc[df["outcome"] == "malformed", "error"])


def test_a_signal_mid_step_is_answered_while_lines_never_end(tmp_path) -> None:
    with hostile_server("endless_line", every=2) as server:
        proc, run_dir, log = _start(tmp_path, _config(server.url, "30s"))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(server.requests(method="POST")) < 8:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        code = _wait(proc, 60)
    output = log.read_text(errors="replace")
    assert code == 128 + signal.SIGINT, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert (run_dir / "summary.json").exists() and (run_dir / "records.parquet").exists(), output[-3000:]
    df = pd.read_parquet(run_dir / "records.parquet")
    assert (df["outcome"] == "malformed").sum() >= 2
