"""The typed step on the master (`llmload.runtime.master.step`): typed plan.json fields, the declared events and
their order, and plan.json written from the steps the same byte for byte as when a step was a dict."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import gevent
import numpy as np
import pytest

from llmload.clock import now
from llmload.config import parse_config
from llmload.records import Record
from llmload.rundir.plan_file import PlanFile
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.live_series import LiveSeries
from llmload.runtime.master.step import EventHook, Step, StepEvents, StepStatus
from llmload.runtime.wire.messages import CANCEL, STEP, DrainedMessage, ResultsMessage, pack_record
from shapes.plan import build_plan
from shapes.steps import StepSpec

RUNTIME = Path(__file__).resolve().parents[2] / "llmload" / "runtime"


def _spec(rate: float = 2.0, index: int = 0) -> StepSpec:
    return StepSpec(label=f"r{rate:.2f}", index=index, phase="ladder", arrival="constant", target_rate=rate,
                    duration_s=2.0)


def test_a_misspelt_field_raises_instead_of_reading_none(tmp_path):
    step = Step(_spec())
    assert step.window_end is None and step.status is StepStatus.NOT_RUN
    with pytest.raises(AttributeError):
        step.window_ends  # noqa: B018 (the read is the test)
    with pytest.raises(AttributeError):
        step.live_verdcit = "pass"
    with pytest.raises(AttributeError, match="drainedat"):
        step.set(start_at=1.0, drainedat=2.0)
    assert step.start_at is None  # nothing set when one name is wrong
    plan = PlanFile(tmp_path, kind="ladder", workers=1, seed=1, started_at=0.0)
    plan.add(step)
    with pytest.raises(AttributeError):
        plan.update(step, windowend=3.0)
    with pytest.raises(AttributeError):
        step.written("stauts")


def test_status_is_an_enum_written_as_its_value_and_an_unexpected_change_is_logged(tmp_path, caplog):
    plan = PlanFile(tmp_path, kind="ladder", workers=1, seed=1, started_at=0.0)
    step = plan.add(Step(_spec()))
    plan.update(step, status=StepStatus.RUNNING)
    plan.update(step, status=StepStatus.PARTIAL)
    assert step.status is StepStatus.PARTIAL
    assert json.loads((tmp_path / "plan.json").read_text())["steps"][0]["status"] == "partial"
    assert not caplog.records
    with pytest.raises(ValueError):
        step.status = "finished"
    step.status = StepStatus.RUN  # a bug of ours: logged, and written (plan.json says what happened)
    assert step.status is StepStatus.RUN
    assert "no status transition partial -> run" in caplog.text


def test_listeners_fire_in_the_order_added_and_one_that_raises_does_not_stop_the_others():
    hook, seen = EventHook(), []
    hook.add_listener(lambda step: seen.append(("a", step)))

    def broken(step):
        raise RuntimeError("a view failed")

    hook.add_listener(broken)
    last = hook.add_listener(lambda step: seen.append(("b", step)))
    hook.fire(step=1)
    assert seen == [("a", 1), ("b", 1)]
    hook.remove_listener(last)
    hook.fire(step=2)
    assert seen[-1] == ("a", 2)
    events = StepEvents()
    assert {name for name in vars(events)} == {"step_started", "step_window_ended", "step_judged",
                                               "step_finished", "search_finished"}
    assert all(isinstance(hook, EventHook) for hook in vars(events).values())


def test_the_live_series_takes_planned_arrivals_when_a_step_starts():
    events, live = StepEvents(), LiveSeries()
    live.listen(events)
    step = Step(_spec())
    step.set(start_at=100.0)
    step.offsets = np.array([0.0, 0.5, 1.0, 1.5])
    events.step_started.fire(step=step)
    assert live.series(until=101.0)["offered"] == [2, 2]


def test_step_run_does_not_import_the_controller():
    """The controller <-> steps_run cycle (type hints) is gone: a step gets what it needs in a context."""
    tree = ast.parse((RUNTIME / "master" / "step_run.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "llmload.runtime.master.controller" not in imported


class FakeRunner:
    """One local worker: drains a step 0.1 s after its arrivals with one record; `hang` never drains
    before a cancel (drained 50 ms after it)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.controller: StepController | None = None

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        controller = self.controller
        if msg_type == CANCEL:
            gevent.spawn_later(0.05, controller.on_drained,
                              DrainedMessage(label=data["label"], worker="0", put=0, finished=0))
        if msg_type != STEP or self.hang:
            return
        step = data["step"]
        end = data["start_at"] + step["warmup_s"] + step["duration_s"]

        def drain() -> None:
            gevent.sleep(max(0.0, end - now()) + 0.1)
            t = now()
            record = Record(request_id=step["label"], step=step["label"], worker="0", scheduled_at=t - 0.1,
                            outcome="ok", sent_at=t - 0.1, first_token_at=t - 0.05, last_token_at=t,
                            output_tokens=2, token_times=[t - 0.05, t])
            controller.on_results(ResultsMessage(worker="0", rows=[pack_record(record)], sent={step["label"]: 3}))
            controller.on_drained(DrainedMessage(label=step["label"], worker="0", put=1, finished=1))

        gevent.spawn(drain)


def _controller(tmp_path, steps: list[dict], runner: FakeRunner, **ladder) -> tuple[StepController, list[str]]:
    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": {"ladder": {
        "arrival": "constant", "warmup": "0s", "drain_timeout": "5s", "steps": steps, **ladder}}})
    lines: list[str] = []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append)
    runner.controller = controller
    return controller, lines


def test_the_controller_fires_each_steps_events_in_order_and_the_table_listens(tmp_path):
    controller, lines = _controller(tmp_path, [{"rate": 20, "duration": "0.2s"}, {"rate": 40, "duration": "0.2s"}],
                                    FakeRunner())
    seen: list[tuple] = []
    for name in ("step_started", "step_window_ended", "step_judged", "step_finished"):
        def listener(step: Step, name: str = name) -> None:
            seen.append((name, step.label, step.status.value, step.verdict, len(step.rows)))

        getattr(controller.events, name).add_listener(listener)
    controller.run()
    assert seen == [("step_started", "r20.00", "running", None, 0),
                    ("step_window_ended", "r20.00", "run", None, 1),
                    ("step_judged", "r20.00", "run", "insufficient", 1),
                    ("step_finished", "r20.00", "run", "insufficient", 0),  # its summaries dropped
                    ("step_started", "r40.00", "running", None, 0),
                    ("step_window_ended", "r40.00", "run", None, 1),
                    ("step_judged", "r40.00", "run", "insufficient", 1),
                    ("step_finished", "r40.00", "run", "insufficient", 0)]
    assert [line.split()[0] for line in lines if line.startswith("r")] == ["r20.00", "r40.00"]  # the table
    assert [s.table_row["label"] for s in controller.steps] == ["r20.00", "r40.00"]
    assert controller.running() is None
    assert controller.steps[0].sent == {}  # forgotten once judged


#: the keys of a plan.json step, in the order written before steps were typed (a dict updated in place)
PLANNED = ["label", "index", "phase", "target_rate", "arrival", "concurrency", "start_at", "window_start",
           "window_end", "drain_deadline", "drained_at", "planned_arrivals", "status", "burstiness", "warmup_s",
           "duration_s", "drain_timeout_s", "drain", "requests", "trace", "seed", "failed_in_source"]


def test_plan_json_keeps_its_keys_and_values_when_a_run_is_stopped_inside_a_step(tmp_path):
    """A stopped step: `planned_window_end` comes between `workers` and `cancelled` (the cut at the stop
    is the first write after the launch); the step not run keeps the planned keys only."""
    controller, _ = _controller(tmp_path, [{"rate": 20, "duration": "3s"}, {"rate": 40, "duration": "1s"}],
                                FakeRunner(hang=True))

    def stop() -> None:
        gevent.sleep(0.4)
        controller.mark_stopping()
        controller.stop()

    gevent.spawn(stop)
    controller.run()
    data = json.loads((tmp_path / "plan.json").read_text())
    assert list(data) == ["kind", "started_at", "ended_at", "workers", "seed", "steps", "stopped"]
    first, second = data["steps"]
    assert list(first) == [*PLANNED, "workers", "planned_window_end", "cancelled", "lost_workers", "live_verdict",
                           "live_failing"]
    assert list(second) == PLANNED
    assert (first["status"], first["cancelled"], first["lost_workers"], first["live_verdict"]) == (
        "partial", True, [], "insufficient")
    assert first["planned_window_end"] == pytest.approx(first["start_at"] + 3.0)
    assert first["window_start"] < first["window_end"] < first["planned_window_end"]
    assert second["status"] == "not_run" and second["start_at"] is None
    text = (tmp_path / "plan.json").read_text()
    assert text == json.dumps(data, indent=1)  # written as before: indent 1, no sorting


def test_a_recovered_plan_keeps_the_steps_it_read(tmp_path):
    """`recover_run` rewrites a dead master's plan.json through `PlanFile` with the step dicts it read."""
    from llmload.rundir.recover import recover_run

    steps = [{"label": "r1.00", "status": "running", "drained_at": None}, {"label": "r2.00", "status": "not_run"}]
    (tmp_path / "plan.json").write_text(json.dumps({"kind": "ladder", "started_at": 1.0, "ended_at": None,
                                                    "workers": 1, "seed": 1, "steps": steps}))
    recover_run(tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["steps"] == [{"label": "r1.00", "status": "partial", "drained_at": 1.0},
                             {"label": "r2.00", "status": "not_run"}]
