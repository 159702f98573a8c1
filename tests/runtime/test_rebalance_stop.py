"""A worker joining mid-run makes Locust rebalance: it stops users on the other workers, and without
more it kills them, so a request in flight was recorded `cancelled` ("the test stopped while the request
was in flight") though the test went on (seen in tests/runtime/test_netns.py's late joiner). `LLMUser.stop`
lets a user stopped while its runner still runs finish the request in flight first
(`seams.finish_then_stop`); a stop of the test still kills it. Played with Locust's own runner and
`stop_users`, the path a rebalance takes. In a subprocess: importing Locust here would patch the
standard library too late."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import sys, time
import locust
import gevent
from locust import constant
from locust.env import Environment
from locustfiles.llm import LLMUser

in_flight, finished = [], []

class Busy(LLMUser):
    wait_time = constant(600)  # one request each, then wait (a waiting user is killed at once)

    def busy(self):
        in_flight.append(id(self))
        gevent.sleep(2.0)  # the request in flight
        finished.append(id(self))

Busy.tasks = [Busy.busy]  # only this task (Locust's class set-up would keep LLMUser's beside a @task)

def wait_for(condition, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        gevent.sleep(0.02)

env = Environment(user_classes=[Busy])
runner = env.create_local_runner()
runner.start(2, spawn_rate=100)
wait_for(lambda: len(in_flight) == 2 and runner.state == "running", 30)
assert runner.state == "running" and len(in_flight) == 2 and not finished, (runner.state, in_flight, finished)
if sys.argv[1] == "rebalance":
    runner.stop_users({"Busy": 1})  # what a rebalance does to this worker's users
    wait_for(lambda: len(finished) == 2, 30)
else:
    runner.stop()  # the test's stop
    gevent.sleep(2.5)  # past the requests' end: a killed user never finishes its request
print(len(finished))
runner.quit()
"""

@pytest.mark.parametrize("how,finished", [("rebalance", 2), ("stop", 0)])
def test_a_rebalance_lets_the_request_in_flight_finish_and_a_stop_does_not(how, finished):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, how], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == str(finished), done.stdout + done.stderr[-2000:]
