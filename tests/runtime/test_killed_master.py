"""A Locust process (the master) killed under `llmload run` ends the command with exit 3 and one line
naming the cause and what to do (issue 33, item 23: it was exit 3 and silence)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest
from runtime_helpers import base_config, write_config

pytestmark = pytest.mark.timeout(120)


def test_a_killed_master_is_one_line_naming_the_signal_and_the_recovery(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    config = write_config(tmp_path, base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                                     "steps": [{"rate": 2, "duration": "60s"}]}}))
    out = tmp_path / "run"
    launcher = subprocess.Popen([sys.executable, "-m", "llmload.cli", "run", str(config), "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "records").is_dir() and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)  # the run is under way once a worker's record file is open
        children = psutil.Process(launcher.pid).children()
        assert len(children) == 1, children
        children[0].send_signal(signal.SIGKILL)
        code = launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    _, err = launcher.communicate()
    assert code == 3, err
    lines = [ln for ln in err.splitlines() if ln.startswith("llmload: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "killed by SIGKILL" in lines[0] and f"llmload report {out}" in lines[0]
