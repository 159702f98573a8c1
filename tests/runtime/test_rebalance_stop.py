"""A worker joining mid-run makes Locust rebalance: it stops users on the other workers, and without
more it kills them, so a request in flight was recorded `cancelled` ("the test stopped while the request
was in flight") though the test went on (seen in tests/runtime/test_netns.py's late joiner). `LLMUser.stop`
lets a user stopped while its runner still runs finish the request in flight first
(`seams.finish_then_stop`); a stop of the test still kills it. Played with Locust's own runner and
`stop_users`, the path a rebalance takes. In a subprocess: importing Locust here would patch the
standard library too late; one for both, each on an environment and runner of its own, one after the other
(Locust's import was most of the 0.9 s of CPU a process took)."""

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

for how in sys.argv[1:]:
    in_flight.clear()
    finished.clear()
    env = Environment(user_classes=[Busy])
    runner = env.create_local_runner()
    runner.start(2, spawn_rate=100)
    wait_for(lambda: len(in_flight) == 2 and runner.state == "running", 30)
    assert runner.state == "running" and len(in_flight) == 2 and not finished, (runner.state, in_flight, finished)
    if how == "rebalance":
        runner.stop_users({"Busy": 1})  # what a rebalance does to this worker's users
        wait_for(lambda: len(finished) == 2, 30)
    else:
        runner.stop()  # the test's stop
        gevent.sleep(2.5)  # past the requests' end: a killed user never finishes its request
    print(how, len(finished), flush=True)
    runner.quit()
"""


@pytest.fixture(scope="module")
def finishes() -> tuple[dict[str, str], str]:
    """How many of the two requests in flight finished, by how the users were stopped; and the output."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, "rebalance", "stop"], capture_output=True, text=True,
                          timeout=90, cwd=ROOT)
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("rebalance ", "stop ")))
    return said, f"exit {done.returncode}: {done.stdout}{done.stderr[-2000:]}"


@pytest.mark.parametrize("how,finished", [("rebalance", 2), ("stop", 0)])
def test_a_rebalance_lets_the_request_in_flight_finish_and_a_stop_does_not(finishes, how, finished):
    said, output = finishes
    assert said.get(how) == str(finished), output
