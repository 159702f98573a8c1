"""`shape.ladder.stop_after_failures`: after N failing ladder steps the rest of the ladder is `not_run`
with a reason, and the boundary search still runs. The controller runs without Locust or workers: each
step's verdict is scripted."""

from __future__ import annotations

import pytest

from llmload.config import parse_config
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.step import StepStatus
from shapes.plan import build_plan


class ScriptedController(StepController):
    """Steps are not sent: each one gets the next scripted verdict; the search is only noted."""

    def __init__(self, *args, verdicts: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.verdicts = iter(verdicts)
        self.ran: list[str] = []
        self.searched = False

    def run_step(self, step, *, start_at=None):
        self.ran.append(step.label)
        self.plan.update(step, status=StepStatus.RUNNING)
        self.plan.update(step, status=StepStatus.RUN)
        return next(self.verdicts), [], {}

    def _refine(self) -> None:
        self.searched = True


class NoWorkers:
    def send_message(self, *args, **kwargs) -> None:
        raise AssertionError("no message is sent in this test")


def run_ladder(tmp_path, verdicts: list[str], **ladder) -> tuple[ScriptedController, list[str]]:
    from llmload.runtime.locustglue.seams import WorkerLink

    steps = [{"rate": r, "duration": "1s"} for r in (1, 2, 3, 4, 5)]
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"ladder": {"steps": steps, "refine": {"resolution": 0.5}, **ladder}}})
    lines: list[str] = []
    controller = ScriptedController(config, tmp_path, WorkerLink(NoWorkers()), build_plan(config),
                                    out=lines.append, verdicts=verdicts)
    controller.run()
    return controller, lines


def test_by_default_one_failing_step_ends_the_ladder_and_the_search_still_runs(tmp_path):
    controller, lines = run_ladder(tmp_path, ["pass", "fail", "fail", "fail", "fail"])
    assert controller.ran == ["r1.00", "r2.00"]
    steps = controller.steps
    assert [s.status.value for s in steps] == ["run", "run", "not_run", "not_run", "not_run"]
    assert [s.not_run_reason for s in steps[2:]] == ["stop_after_failures: 1 failing step before it"] * 3
    assert not steps[0].written("not_run_reason")
    assert controller.searched
    said = [line for line in lines if "stop_after_failures" in line]
    assert said == ["  stop_after_failures: 1 failing step before it: r3.00, r4.00, r5.00 not run "
                    "(shape.ladder.stop_after_failures)"]


@pytest.mark.parametrize(("limit", "ran"), [(2, ["r1.00", "r2.00", "r3.00", "r4.00"]), (None, ["r1.00", "r2.00", "r3.00", "r4.00", "r5.00"])])
def test_the_limit_counts_failing_steps_only_and_null_runs_every_step(tmp_path, limit, ran):
    # an insufficient or invalid step is no failure of the server
    controller, _ = run_ladder(tmp_path, ["fail", "insufficient", "invalid", "fail", "pass"],
                               stop_after_failures=limit)
    assert controller.ran == ran
    assert controller.searched


def test_a_bad_value_is_a_config_error():
    from llmload.errors import ConfigError

    with pytest.raises(ConfigError, match="stop_after_failures"):
        parse_config({"target": {"url": "http://127.0.0.1:9"},
                      "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}], "stop_after_failures": 0}}})
