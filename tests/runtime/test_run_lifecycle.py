"""`RunLifecycle` without Locust: a whole run (pre-flight skipped, the steps, finalisation) on fake
workers in virtual time (`virtual_time`), stopped on each path. For each `StopReason`: which steps are
`partial` or `not_run`, where the window is cut, what is cancelled, that the run is finalised once, and
the exit code. Then `Session` as an adapter: each Locust event and stop signal becomes its one call."""

from __future__ import annotations

import json
import os
import signal
from types import SimpleNamespace

import gevent
import pytest
from virtual_time import FakeHost, FakeLink, VirtualClock, WorkerPlan

import llmload.rundir.finalise as finish
import llmload.runtime.master.preflight as preflight
from llmload.config import parse_config
from llmload.runtime.master.controller import LEAD_S
from llmload.runtime.master.lifecycle import RunLifecycle, RunOptions, StopReason
from llmload.runtime.master.states import ControllerState, RunState, RunStop

T0 = 1_000.0
#: the fake finalisation's exit code (the verdict of the steps that ran: fail)
VERDICT_CODE = 1
#: 20 s into the second of three 60-s steps (each drains 1 s after its arrivals end)
STOP_AT = T0 + LEAD_S + 61.0 + LEAD_S + 20.0


class Run:
    """One lifecycle over fake workers in virtual time, with a fake finalisation."""

    def __init__(self, tmp_path, monkeypatch, *, web: bool = False, remote_users: bool = False,
                 steps: int = 3) -> None:
        self.clock = VirtualClock(T0)
        self.link = FakeLink(self.clock, [WorkerPlan(tail_s=1.0)])
        self.host = FakeHost(self.link, web=web, remote_users=remote_users)
        self.life = RunLifecycle(self.host, clock=self.clock.now, sleep=self.clock.sleep)
        self.host.life = self.life
        self.link.controller = lambda: self.life.controller
        self.finalised: list[dict] = []
        self.run_dir = tmp_path / "run"

        def finalise_run(run_dir, config, *, report=True, outcome=None, finished=None, closing=None):  # noqa: ARG001
            self.finalised.append(json.loads((run_dir / "plan.json").read_text()))
            (run_dir / "summary.json").write_text("{}")
            return VERDICT_CODE

        monkeypatch.setattr(finish, "finalise_run", finalise_run)
        monkeypatch.setattr(preflight, "start_telemetry", lambda config, run_dir: None)
        self.life.config = parse_config({
            "target": {"url": "http://127.0.0.1:9"},
            "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                 "steps": [{"rate": r, "duration": "60s"} for r in range(1, steps + 1)]}}})

    def start(self) -> None:
        self.life.start(RunOptions(config_path=str(self.run_dir.parent / "llmload.yaml"), run_dir=str(self.run_dir),
                                   skip_preflight=True, report=False))

    def until(self, t: float) -> None:
        self.clock.sleep(t - self.clock.now())

    def settle(self) -> None:
        """Wait (in virtual time) until the run's greenlet and any stop under way have ended."""
        self.clock.sleep(0.5)  # a stop's greenlet starts
        while self.life.running or not self.life.settled:
            self.clock.sleep(0.5)

    @property
    def plan(self) -> dict:
        return json.loads((self.run_dir / "plan.json").read_text())


@pytest.fixture
def run(tmp_path, monkeypatch):
    made: list[Run] = []

    def make(**kwargs) -> Run:
        made.append(Run(tmp_path, monkeypatch, **kwargs))
        return made[-1]

    yield make
    for r in made:
        if r.life.greenlet is not None:
            r.life.greenlet.kill()


def _assert_cut_at_stop(plan: dict, stop_at: float) -> None:
    first, second, third = plan["steps"]
    assert first["status"] == "run"
    assert second["status"] == "partial" and second["window_end"] == stop_at
    assert second["planned_window_end"] == second["start_at"] + 60
    assert third["status"] == "not_run" and third.get("start_at") is None
    assert plan["stopped"] is True


def test_a_run_that_is_not_stopped_runs_every_step_and_finalises_once(run):
    r = run()
    r.start()
    assert r.life.state is RunState.PREFLIGHT
    r.settle()
    assert [s["status"] for s in r.plan["steps"]] == ["run", "run", "run"]
    assert len(r.finalised) == 1 and "stopped" not in r.plan
    assert r.life.state is RunState.DONE and r.life.exit_code == r.host.exit_code == VERDICT_CODE
    assert r.life.stopped_by is None
    r.life.stop(StopReason.USERS_STOPPED)  # Locust's test_stop after a run that ended by itself
    assert len(r.finalised) == 1


def test_the_web_uis_stop_freezes_the_controller_before_the_users_stop(run):
    r = run()
    r.start()
    r.until(STOP_AT)
    r.life.stop(StopReason.WEB_STOP)  # Locust's test_stopping: before its users are stopped
    assert r.life.state is RunState.STOPPING and r.life.controller.state is ControllerState.STOPPED
    r.until(STOP_AT + 1.0)  # Locust stops its users
    r.life.stop(StopReason.USERS_STOPPED)  # then test_stop
    r.settle()
    _assert_cut_at_stop(r.plan, STOP_AT)
    assert [label for _, label in r.link.cancels()] == ["r2.00"]
    assert len(r.finalised) == 1 and r.finalised[0]["stopped"] is True
    assert r.life.state is RunState.DONE and r.host.exit_code == VERDICT_CODE  # the verdict of what ran
    assert r.life.stopped_by == RunStop(StopReason.WEB_STOP) and r.host.calls == []


def test_users_stopped_without_an_announced_stop_stops_the_controller_and_finalises_once(run):
    r = run(remote_users=True)
    r.start()
    r.until(STOP_AT)
    r.life.stop(StopReason.USERS_STOPPED)
    r.settle()
    _assert_cut_at_stop(r.plan, STOP_AT)
    # a master waits a second for its remote users' cancellations before the plan ends
    assert r.plan["ended_at"] == STOP_AT + 1.0
    assert len(r.finalised) == 1 and r.life.state is RunState.DONE and r.host.exit_code == VERDICT_CODE
    assert r.life.stopped_by == RunStop(StopReason.USERS_STOPPED)


def test_quitting_mid_run_stops_the_users_and_waits_for_the_finalisation(run):
    r = run()
    r.start()
    r.until(STOP_AT)
    r.life.stop(StopReason.QUITTING)  # returns once the run directory is finalised
    assert len(r.finalised) == 1 and r.life.state is RunState.DONE
    assert r.host.calls == [("stop_users",)]
    _assert_cut_at_stop(r.plan, STOP_AT)
    assert r.host.exit_code == VERDICT_CODE


def test_quitting_in_preflight_ends_the_run_greenlet_without_finalising(run, monkeypatch):
    r = run()
    monkeypatch.setattr(r.host, "plan_shape", lambda config: gevent.sleep(3600))  # hangs in pre-flight
    r.start()
    gevent.sleep(0)
    r.life.stop(StopReason.QUITTING)
    assert not r.life.running and r.life.controller is None and r.finalised == []
    assert r.host.calls == []


@pytest.mark.parametrize("web", [False, True])
def test_a_signal_mid_run_cancels_finalises_once_and_exits_with_128_plus_its_number(run, capsys, web):
    r = run(web=web)
    r.start()
    r.until(STOP_AT)
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGINT)
    assert r.life.controller.stopped_at == STOP_AT  # noted at once: workers dying of it are not lost
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGINT)  # a second Ctrl-C only says finalisation goes on
    r.settle()
    _assert_cut_at_stop(r.plan, STOP_AT)
    assert len(r.finalised) == 1
    assert r.life.exit_code == r.host.exit_code == 128 + signal.SIGINT
    # a web UI is closed (Locust's main greenlet then returns); headless, the shape's tick ends Locust
    assert r.host.calls == ([("close_web_ui",)] if web else [])
    out = capsys.readouterr().out
    assert out.count("SIGINT again: still finishing the run directory") == 1
    assert r.life.state is RunState.DONE and r.life.stopped_by == RunStop(StopReason.SIGNAL, signo=signal.SIGINT)


def test_a_signal_mid_run_is_the_runs_stopping_state_until_it_is_finalised(run):
    """One source of truth: the signal moves the run to STOPPING (with its number in `stopped_by`), the
    run is not settled until its finalisation ends, then DONE; a later QUITTING is noted beside it."""
    r = run()
    r.start()
    r.until(STOP_AT)
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGTERM)
    assert r.life.state is RunState.STOPPING and not r.life.settled
    assert r.life.stopped_by == RunStop(StopReason.SIGNAL, signo=signal.SIGTERM)
    r.life.stop(StopReason.QUITTING)  # Locust's own shutdown beside ours: waits for the finalisation
    assert r.life.state is RunState.DONE and r.life.settled and len(r.finalised) == 1
    assert r.life.stopped_by == RunStop(StopReason.SIGNAL, signo=signal.SIGTERM, quitting=True)
    r.settle()
    assert r.host.exit_code == 128 + signal.SIGTERM and r.host.calls == []


def test_a_signal_in_preflight_ends_the_run_done_without_finalising(run, monkeypatch):
    """Stopped in pre-flight, the run is DONE (settled: nothing waits for it) with nothing finalised."""
    r = run()
    monkeypatch.setattr(r.host, "plan_shape", lambda config: gevent.sleep(3600))  # hangs in pre-flight
    r.start()
    gevent.sleep(0)
    assert r.life.state is RunState.PREFLIGHT and not r.life.settled
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGINT)
    r.settle()
    assert r.life.state is RunState.DONE and r.life.settled and r.finalised == []
    assert r.life.controller is None and r.host.exit_code == 128 + signal.SIGINT and r.host.calls == []


def test_quitting_after_the_run_ended_is_noted_without_a_stop_reason_of_the_run(run):
    """Once the run is over, only Locust's quitting is noted (a web UI's Stop then is no stop of the run);
    a new run starts with no stop noted."""
    r = run(web=True)
    r.start()
    r.settle()
    r.life.stop(StopReason.WEB_STOP)
    assert r.life.stopped_by is None
    r.life.stop(StopReason.QUITTING)
    assert r.life.stopped_by == RunStop(StopReason.QUITTING, quitting=True)
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGINT)  # after the run: its own exit code, the UI is Locust's
    r.settle()
    assert r.host.exit_code == VERDICT_CODE and r.host.calls == []
    r.life.new_run()
    r.start()
    assert r.life.state is RunState.PREFLIGHT and r.life.stopped_by is None


def test_a_signal_before_any_run_ends_the_process_with_128_plus_its_number(run):
    r = run()
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGTERM)
    r.settle()
    assert r.host.calls == [("exit", 128 + signal.SIGTERM)] and r.life.state is RunState.DONE
    assert r.finalised == []


def test_a_signal_after_a_web_run_finished_leaves_with_the_runs_own_exit_code(run):
    r = run(web=True)
    r.start()
    r.settle()
    assert r.life.exit_code == VERDICT_CODE
    r.host.exit_code = None
    r.life.stop(StopReason.SIGNAL, signo=signal.SIGINT)
    r.settle()
    assert r.host.exit_code == VERDICT_CODE and r.host.calls == [("close_web_ui",)]
    assert len(r.finalised) == 1


def test_a_failing_greenlet_ends_the_run_with_one_line_and_exit_3(run, capsys):
    r = run()

    def boom():
        raise RuntimeError("boom")

    gevent.joinall([r.life.watch(gevent.spawn(boom), "the run")])
    gevent.sleep(0)
    assert r.life.state is RunState.FAILED and r.life.exit_code == r.host.exit_code == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == "llmload: error: the run failed: RuntimeError: boom"
    assert r.host.calls == [("quit_soon",)]


# ---------------------------------------------------------------------- Session, the Locust adapter


class _Hook:
    """Locust's `EventHook`: `add_listener`, `fire`."""

    def __init__(self) -> None:
        self.listeners: list = []

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)

    def fire(self, **kwargs) -> None:
        for listener in self.listeners:
            listener(**kwargs)


class _Recorder:
    """Stands in for the session's `RunLifecycle`: records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.config = self.controller = self.greenlet = None
        self.running = False

    def start(self, options) -> None:
        self.calls.append(("start", options.run_dir))

    def stop(self, reason, *, signo=None) -> None:
        self.calls.append(("stop", reason, signo))


def _session():
    from llmload.runtime.locustglue.session import Session

    events = SimpleNamespace(test_start=_Hook(), test_stopping=_Hook(), test_stop=_Hook(), quitting=_Hook())
    env = SimpleNamespace(runner=None, parsed_options=SimpleNamespace(llmload_run_dir="/tmp/x"), events=events,
                          web_ui=None, process_exit_code=None, host="")
    session = Session(env)
    session.life = _Recorder()
    session.listen(events)
    return session, events


@pytest.mark.parametrize("event, reason", [("test_stopping", StopReason.WEB_STOP),
                                           ("test_stop", StopReason.USERS_STOPPED),
                                           ("quitting", StopReason.QUITTING)])
def test_each_locust_stop_event_is_one_stop_with_its_reason(event, reason):
    session, events = _session()
    getattr(events, event).fire()
    assert session.life.calls == [("stop", reason, None)]


def test_locusts_test_start_starts_the_run_with_the_command_lines_options(monkeypatch):
    session, events = _session()
    session.file_config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}}})
    session.config = session.file_config
    monkeypatch.setattr(session, "install_stop_signals", lambda: [])
    events.test_start.fire()
    assert session.life.calls == [("start", "/tmp/x")]


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_is_one_stop_with_its_number(signo):
    session, _ = _session()
    handles = session.install_stop_signals()
    try:
        os.kill(os.getpid(), signo)
        for _ in range(1000):  # gevent's signal watcher runs on the loop's next turn
            if session.life.calls:
                break
            gevent.sleep(0.01)
    finally:
        for handle in handles:
            handle.cancel()
    assert session.life.calls == [("stop", StopReason.SIGNAL, signo)]
