"""The Locust child dies with its launcher (issue 44 item 3): `follow_parent` sends it SIGTERM when `llmload
run` dies (even by SIGKILL), and a child whose stop cannot finish (here: SIGTERM ignored, as a run whose
finalisation hangs) is ended, with its process group, a grace period later: never an orphan holding the
master port. Real processes, real `prctl`, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

#: the launcher: starts the child in its own session (as `llmload run` does) and prints its PID
LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True,
                         env={**os.environ, "LLMLOAD_LAUNCHED": str(os.getpid())})
print(child.pid, flush=True)
child.wait()
"""
#: the child: follows its launcher, then ignores SIGTERM and forks a worker of its own (its process group)
CHILD = """
import os, signal, time
from llmload.runtime.launcher.stop_signals import follow_parent
follow_parent(grace_s=1.0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() != 0:
    print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(60)
def test_a_child_that_ignores_sigterm_still_dies_with_its_launcher():
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, CHILD], stdout=subprocess.PIPE, text=True)
    # the launcher's PID line and the child's "ready" share the pipe: on a loaded machine the child may
    # print first (the launcher not yet scheduled after its Popen returned)
    lines = sorted(launcher.stdout.readline().strip() for _ in range(2))
    assert lines[1] == "ready", lines
    child_pid = int(lines[0])
    time.sleep(0.2)  # the forked worker may still be starting
    group = [psutil.Process(child_pid), *psutil.Process(child_pid).children()]
    assert len(group) == 2
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 20
    alive = group
    while alive and time.monotonic() < deadline:
        alive = [p for p in group if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    for proc in alive:
        proc.kill()
    assert not alive, [(p.pid, p.ppid()) for p in alive]
