"""The step controller runs `drain=False` steps (soak slices) back to back, without Locust, in virtual time
(`llmload.clocks.VirtualClock`: the times below are exact, whatever the machine's load).

A fake local runner stands in for the workers: each step's in-flight requests finish `TAIL_S` after its
arrivals end. Soak slices must start exactly when the previous slice's arrivals end (while its requests
are still finishing, never cancelled); a ladder step waits for the previous step's drain.
"""

from __future__ import annotations

import gevent
import pytest

from llmload.clocks import VirtualClock
from llmload.config import parse_config
from llmload.records import Record
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.step import StepStatus
from llmload.runtime.wire.messages import STEP, DrainedMessage, ResultsMessage, pack_record
from shapes.plan import build_plan

TAIL_S = 0.3


class FakeRunner:
    """A local runner whose one worker drains each step TAIL_S after its arrivals end."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.controller: StepController | None = None
        self.sent: list[tuple[float, dict]] = []
        #: summaries the controller held for each step when it drained
        self.kept: list[int] = []

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        if msg_type != STEP:
            return
        step = data["step"]
        arrivals_end = data["start_at"] + step["warmup_s"] + step["duration_s"]
        self.sent.append((data["start_at"], step))

        def drain() -> None:
            self.clock.sleep_until(arrivals_end + TAIL_S)
            t = self.clock.now() - TAIL_S
            record = Record(request_id=step["label"], step=step["label"], worker="0", scheduled_at=t - 0.1,
                            outcome="ok", sent_at=t - 0.1, first_token_at=t - 0.05, last_token_at=t,
                            output_tokens=2, token_times=[t - 0.05, t])
            self.controller.on_results(ResultsMessage(worker="0", rows=[pack_record(record)]))
            self.kept.append(len(self.controller.step_of(step["label"]).rows))
            self.controller.on_drained(DrainedMessage(label=step["label"], worker="0", put=0, finished=0))

        gevent.spawn(drain)


def run_controller(tmp_path, shape: dict) -> tuple[StepController, list[str], FakeRunner]:
    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": shape})
    clock = VirtualClock()
    runner, lines = FakeRunner(clock), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append,
                                clock=clock.now, sleep=clock.sleep)
    runner.controller = controller
    controller.run()
    return controller, lines, runner


def test_soak_slices_start_when_the_previous_arrivals_end_and_drain_meanwhile(tmp_path):
    controller, lines, runner = run_controller(tmp_path, {"soak": {"rate": 5, "duration": "1.2s", "slice": "0.4s",
                                                           "drain_timeout": "5s"}})
    steps = controller.steps
    assert [s.label for s in steps] == ["soak-000", "soak-001", "soak-002"]
    for before, after in zip(steps, steps[1:], strict=False):
        assert after.start_at == pytest.approx(before.window_end, abs=1e-6)  # no pause
        assert before.drained_at > after.start_at  # its requests finished while the next ran
        assert before.drained_at == pytest.approx(before.window_end + TAIL_S, abs=1e-6)
    assert all(s.status is StepStatus.RUN and s.cancelled is False for s in steps)
    assert steps[-1].drained_at >= steps[-1].window_end + TAIL_S - 0.02  # the last slice drains
    table = [line for line in lines if line.startswith("soak-")]
    assert [line.split()[0] for line in table] == ["soak-000", "soak-001", "soak-002"]  # in order
    assert "unjudged" in table[0] and "unjudged" in table[1]  # judged in the report, not mid-load
    assert controller.done.is_set()
    assert runner.kept == [1, 1, 1] and not any(s.rows for s in controller.steps)  # judged: not kept in memory
    assert "50ms" in table[0]  # the quick numbers (TTFT p95) of the shipped request


def test_ladder_steps_still_wait_for_the_drain(tmp_path):
    controller, _, _ = run_controller(tmp_path, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                         "drain_timeout": "5s",
                                                         "steps": [{"rate": 5, "duration": "0.4s"},
                                                                   {"rate": 5, "duration": "0.4s"}]}})
    first, second = controller.steps
    assert second.start_at > first.drained_at >= first.window_end + TAIL_S - 0.02
