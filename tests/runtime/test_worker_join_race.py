"""A worker joining a master can get its spawn message while `Session.setup` still runs: anything in
setup that yields to gevent lets Locust spawn users then. Users must wait for the worker's runtime,
never see it missing (issue 33, item 12: `'NoneType' object has no attribute 'take'` in 4 of 9 joins,
every arrival `cancelled`). The yield is forced, so the race is played out every time. In a subprocess:
importing Locust here would patch the standard library too late; one for the three ways in (each on an
environment of its own, as each join is: a session belongs to its environment), not one each (Locust's
import is most of the 0.9 s of CPU a process took)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import sys
import locust
import gevent
import gevent.pool
from types import SimpleNamespace
from locust.event import Events
from locust.runners import WorkerRunner
from llmload.runtime.locustglue import session as session_mod
from locustfiles.llm import LLMUser

class JoiningWorkerRunner(WorkerRunner):  # only what Session.setup touches on a worker
    def __init__(self):
        self.handlers = {}
        self.greenlet = gevent.pool.Group()  # the worker's master watch runs in it
    def send_message(self, *args, **kwargs):
        pass
    def register_message(self, name, handler, concurrent=False):
        self.handlers[name] = handler

def environment():
    return SimpleNamespace(runner=JoiningWorkerRunner(), events=Events(), parsed_options=None, web_ui=None,
                           host="", user_classes=[LLMUser])

def job():
    return SimpleNamespace(label="s", scheduled_at=0.0, dequeued_at=None)

def join(mode):
    env = environment()
    users = [LLMUser(env) for _ in range(3)]
    waiting = []
    real = None
    if mode == "before-init":  # users running before the session even exists wait for it
        waiting = [gevent.spawn(user.wait_time) for user in users]
        gevent.sleep(0.02)
        assert not any(g.dead for g in waiting), [g.exception for g in waiting]
    else:  # the spawn message arrives while setup yields (the session exists, its worker may not yet)
        real = getattr(session_mod, mode)
        def yields(*args, **kwargs):
            waiting.extend(gevent.spawn(user.wait_time) for user in users)
            gevent.sleep(0.05)  # as an import or a log handler that yields: Locust's users run meanwhile
            return real(*args, **kwargs)
        setattr(session_mod, mode, yields)
    try:
        session_mod.on_init(env)
    finally:
        if real is not None:
            setattr(session_mod, mode, real)
    assert len(waiting) == len(users)
    jobs = [job() for _ in users]
    for j in jobs:
        session_mod.session_of(env).worker.queue.put(j)
    gevent.joinall(waiting, timeout=5)
    assert all(g.successful() for g in waiting), [repr(g.exception) for g in waiting]
    assert sorted(id(u._job) for u in users) == sorted(id(j) for j in jobs)

for mode in sys.argv[1:]:
    try:
        join(mode)
        print(mode, "ok", flush=True)
    except BaseException as exc:
        print(mode, "FAILED", repr(exc), flush=True)
"""

MODES = ["before-init", "install_console_redaction", "quiet_spawn_warning"]


@pytest.fixture(scope="module")
def joins() -> tuple[dict[str, str], str]:
    """Each mode's line of the one subprocess ("ok", or why not), and its stderr."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *MODES], capture_output=True, text=True, timeout=60)
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0] in MODES)
    return said, f"exit {done.returncode}: {done.stdout}{done.stderr[-3000:]}"


@pytest.mark.parametrize("mode", ["install_console_redaction", "quiet_spawn_warning", "before-init"])
def test_users_spawned_while_the_worker_is_set_up_wait_for_it(joins, mode):
    said, output = joins
    assert said.get(mode) == "ok", output
