"""The tests' forked sims (tests/simfork.py) against an exec'd `python -m llmload.cli sim`: the same banner
on the same log, the same exit on SIGTERM and SIGINT, and the `subprocess.Popen` answers (poll, wait's
timeout, a death by SIGKILL, no signal after the exit) that tests killing a sim rely on."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from simfork import start_forked_sim
from support import REPO, start_sim


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "execd"])
def test_sigterm_ends_the_sim_with_0_and_its_banner_is_in_the_log(tmp_path, forked):
    sim = start_sim(tmp_path, flavor="ollama", forked=forked)
    assert sim.proc.poll() is None and sim.proc.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=0.05)
    sim.proc.terminate()
    assert sim.proc.wait(timeout=10) == 0 and sim.proc.returncode == 0
    assert sim.log.read_text() == f"llmload sim (ollama) listening on {sim.url} (loopback only)\n"


def test_sigint_ends_a_forked_sim_with_0(tmp_path):
    """The forkserver ignores SIGINT; its fork must not (the sim's own handler stops it, as an exec'd one)."""
    sim = start_sim(tmp_path, flavor="llamacpp")
    sim.proc.send_signal(signal.SIGINT)
    assert sim.proc.wait(timeout=10) == 0


def test_a_killed_forked_sim_reads_minus_9_and_takes_no_signal_after(tmp_path):
    sim = start_sim(tmp_path, flavor="vllm")
    pid = sim.proc.pid
    sim.proc.kill()
    assert sim.proc.wait(timeout=10) == -signal.SIGKILL
    sim.proc.terminate()  # exited: nothing is sent (the PID may be another process's by now)
    sim.proc.kill()
    assert sim.proc.poll() == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_forked_sims_error_is_one_line_on_its_log_and_exit_2(tmp_path):
    log = tmp_path / "sim.log"
    proc = start_forked_sim(["sim", "--port", "0", "--config", str(tmp_path / "missing.yaml")], log=log,
                            env=dict(os.environ), cwd=REPO)
    assert proc.wait(timeout=10) == 2
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmload: error: ") and "missing.yaml" in lines[0], lines
