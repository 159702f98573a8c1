"""`llmload run` starts the Locust child (its imports) while its own checks run, and holds it at a gate
(`llmload.runtime.launcher.gated_child`, issue 20 "launch to first planned request"): the checks' outcomes and output do
not change, and a child that is never released never outlives the launcher.

The target here answers nothing until the test lets it: the launcher's reachability probe hangs, which
is when the test looks at the process tree.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from support import base_config, write_config

pytestmark = pytest.mark.timeout(120)


class HangingTarget:
    """A TCP port that accepts connections and never answers; `drop()` closes them unanswered."""

    def __init__(self) -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)
            self.accepted.set()

    def drop(self) -> None:
        for conn in self.held:
            conn.close()

    def close(self) -> None:
        self.drop()
        self.server.close()


@pytest.fixture
def target():
    hanging = HangingTarget()
    yield hanging
    hanging.close()


def _launch(tmp_path: Path, url: str) -> tuple[subprocess.Popen, Path, Path]:
    config = base_config(url, {"ladder": {"steps": [{"rate": 1, "duration": "2s"}]}})
    run_dir, log = tmp_path / "run", tmp_path / "llmload.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "run", str(write_config(tmp_path, config)),
                                 "--out", str(run_dir)], stdout=out, stderr=subprocess.STDOUT)
    return proc, run_dir, log


def _locust_child(proc: subprocess.Popen, target: HangingTarget) -> psutil.Process:
    """The launcher's Locust child, looked at while the launcher's reachability probe hangs."""
    assert target.accepted.wait(60), "the launcher never probed the target"
    assert proc.poll() is None
    children = [p for p in psutil.Process(proc.pid).children() if "import locust" in " ".join(p.cmdline())]
    assert len(children) == 1, "the Locust child was not started before the launcher's checks ended"
    return children[0]


def _gone(process: psutil.Process, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _during_the_checks(tmp_path, target, act) -> tuple[int, str, psutil.Process, Path]:
    """Launch, wait for the held Locust child, `act(launcher)` while the reachability check hangs, then
    wait for the launcher: its exit code, its output, the child and the run directory."""
    proc, run_dir, log = _launch(tmp_path, target.url)
    try:
        child = _locust_child(proc, target)
        act(proc)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, log.read_text(), child, run_dir


def test_the_locust_child_starts_during_the_checks_and_a_failed_check_ends_it(tmp_path, target):
    # the probe ends unanswered: unreachable
    code, output, child, run_dir = _during_the_checks(tmp_path, target, lambda proc: target.drop())
    assert code == 3, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmload: error: target {target.url} is unreachable"), output
    assert _gone(child), "the held Locust child outlived the failed check"
    assert not run_dir.exists()  # made for the run, removed as before


def test_ctrl_c_during_the_checks_ends_the_held_child(tmp_path, target):
    code, output, child, _ = _during_the_checks(tmp_path, target, lambda proc: proc.send_signal(signal.SIGINT))
    assert code == 130, output
    assert "Traceback" not in output, output
    assert _gone(child), "the held Locust child outlived the interrupted launcher"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_held_child_never_outlives_a_killed_launcher(tmp_path, target, sig):
    _, output, child, _ = _during_the_checks(tmp_path, target, lambda proc: os.kill(proc.pid, sig))
    assert _gone(child), "the held Locust child outlived the killed launcher"
    assert "Traceback" not in output
