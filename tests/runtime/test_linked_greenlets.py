"""A greenlet of ours that fails ends its step at once, and the run, with one clear line: never a step left
waiting for its drain deadline.

The step controller and a real `WorkerRuntime` talk through a local runner (no Locust); a pool of
user greenlets takes the queued arrivals and a fake sender answers each at once. The worker's
scheduler greenlet raises after queueing a few arrivals.
"""

from __future__ import annotations

import json

import gevent

from llmload.clock import now
from llmload.config import parse_config
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.states import ControllerState
from llmload.runtime.wire.messages import CANCEL, DRAINED, RESULTS, STEP, DrainedMessage, ResultsMessage
from llmload.runtime.worker import scheduler as worker_mod
from llmload.runtime.worker.scheduler import WorkerRuntime
from shapes.plan import build_plan

DRAIN_TIMEOUT_S = 20.0


class FakeSender:
    def send(self, record, job, user=None) -> None:
        t = now()
        record.sent_at, record.first_token_at, record.last_token_at = t, t + 0.001, t + 0.002
        record.output_tokens, record.token_times, record.outcome, record.http_status = 2, [t + 0.001, t + 0.002], "ok", 200


class LocalRunner:
    """Locust's local runner, reduced to the messages between the controller and one worker."""

    def __init__(self) -> None:
        self.controller: StepController | None = None
        self.worker = WorkerRuntime(self.to_master, build_sender=lambda *a, **k: FakeSender())
        self.users = [gevent.spawn(self._user) for _ in range(4)]

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        if msg_type == STEP:
            self.worker.on_step(data)
        elif msg_type == CANCEL:
            self.worker.on_cancel(data)

    def to_master(self, msg_type: str, data: dict) -> None:
        if msg_type == RESULTS:
            self.controller.on_results(ResultsMessage.from_dict(data))
        elif msg_type == DRAINED:
            self.controller.on_drained(DrainedMessage.from_dict(data))

    def _user(self) -> None:
        while True:
            self.worker.run(self.worker.take())


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records" / "worker-0.jsonl").read_text().splitlines()]


def test_a_failing_scheduler_ends_the_step_at_once_and_the_run_with_one_line(tmp_path, monkeypatch):
    put = worker_mod.WorkerRuntime._put
    calls = []

    def put_then_fail(self, state, job):
        calls.append(job)
        if len(calls) == 4:
            raise RuntimeError("scheduler broke")
        put(self, state, job)

    monkeypatch.setattr(worker_mod.WorkerRuntime, "_put", put_then_fail)
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"ladder": {"arrival": "constant", "warmup": "0s",
                                                "drain_timeout": f"{DRAIN_TIMEOUT_S:g}s",
                                                "steps": [{"rate": 10, "duration": "2s"},
                                                          {"rate": 20, "duration": "2s"}]}}})
    runner, lines = LocalRunner(), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append)
    runner.controller = controller
    started = now()
    try:
        controller.run()
    finally:
        runner.worker.close()
        gevent.killall(runner.users)
    took = now() - started

    # the step ended when the scheduler died (~0.3 s into its 2 s of arrivals), not at its drain deadline
    assert took < 3.0, took
    assert controller.state is ControllerState.FAILED and controller.done.is_set()
    errors = [line for line in lines if line.startswith("llmload: error:")]
    assert errors == ["llmload: error: worker 0: the scheduler of step r10.00 failed (RuntimeError: scheduler broke); "
                      "ending the run"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    first, second = plan["steps"]
    assert first["status"] == "run" and first["cancelled"] is False
    assert first["error"] == plan["error"] == "worker 0: the scheduler of step r10.00 failed (RuntimeError: scheduler broke)"
    assert second["status"] == "not_run"  # the run ended: no later step started
    # every planned arrival of the step is on disk: those queued were sent, the rest failed by the generator
    records = _records(tmp_path)
    assert len(records) == first["planned_arrivals"] == 20
    assert sorted(r["request_id"] for r in records) == sorted({r["request_id"] for r in records})
    assert sum(r["outcome"] == "ok" for r in records) == 3
    unsent = [r for r in records if r["outcome"] != "ok"]
    assert {r["outcome"] for r in unsent} == {"client_error"}
    assert all("scheduler of step r10.00 failed" in r["error"] for r in unsent)


def test_a_failing_judging_greenlet_ends_the_run(tmp_path, monkeypatch):
    """A `drain=False` step (a soak slice) is drained and judged in a background greenlet: when that
    fails, the run ends with one line instead of going on with the step unjudged."""
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"soak": {"rate": 5, "duration": "1.2s", "slice": "0.4s",
                                              "drain_timeout": "5s"}}})
    runner, lines = LocalRunner(), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append)
    runner.controller = controller
    from llmload.runtime.master import step_run as steps_run

    def broken_judge(self, lost, *, threaded=False):
        if threaded:
            raise ValueError("tail broke")
        return original(self, lost, threaded=threaded)

    original = steps_run.StepRun.judge
    monkeypatch.setattr(steps_run.StepRun, "judge", broken_judge)
    try:
        controller.run()
    finally:
        runner.worker.close()
        gevent.killall(runner.users)
    assert controller.state is ControllerState.FAILED
    assert [line for line in lines if line.startswith("llmload: error:")] == [
        "llmload: error: draining and judging step soak-000 failed (ValueError: tail broke); ending the run"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["error"].startswith("draining and judging step soak-000 failed")
    assert controller.done.is_set() and plan["ended_at"] is not None


def test_the_session_ends_the_run_when_its_greenlet_fails(capsys):
    from types import SimpleNamespace

    from llmload.runtime.locustglue.session import Session
    from llmload.runtime.master.states import RunState

    env = SimpleNamespace(runner=None, parsed_options=None, process_exit_code=None)
    session = Session(env)

    def boom():
        raise RuntimeError("boom")

    greenlet = session.life.watch(gevent.spawn(boom), "the run")
    gevent.joinall([greenlet])
    gevent.sleep(0)
    assert session.state is RunState.FAILED and session.exit_code == 3 and env.process_exit_code == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == "llmload: error: the run failed: RuntimeError: boom"


def test_a_run_ended_by_a_failed_greenlet_exits_3_whatever_the_verdict(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from llmload.rundir import finalise as finish
    from llmload.runtime.locustglue.session import Session
    from llmload.runtime.master.states import RunState

    monkeypatch.setattr(finish, "finalise_run", lambda *a, **k: 0)  # the steps that ran passed
    env = SimpleNamespace(runner=None, parsed_options=None, process_exit_code=None)
    session = Session(env)
    session.config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                                   "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}}})
    session.run_dir = tmp_path
    life = session.life
    life._to(RunState.PREFLIGHT)
    session.controller = SimpleNamespace(error="worker 0: the scheduler of step r1.00 failed (RuntimeError: x)")
    life._to(RunState.RUNNING)
    life.finalise()
    assert session.state is RunState.DONE and session.exit_code == env.process_exit_code == 3
    session.controller.error = None
    life._to(RunState.PREFLIGHT)
    life._to(RunState.RUNNING)
    life.finalise()
    assert session.exit_code == 0
