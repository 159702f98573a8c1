"""The worker-CPU figure is the generator's CPU while it sends a step's arrivals, labelled with that step
(the number the validity rule reads); start-up, drains, judging and finalisation are never sampled, and
a warning comes only with a step's judgement, naming the step."""

from __future__ import annotations

import pytest

from llmload.config import parse_config
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController
from llmload.runtime.wire.messages import ResultsMessage
from llmload.runtime.worker.scheduler import StepPhase, StepState, WorkerRuntime
from shapes.plan import build_plan


class Clocks:
    """Wall time and process CPU time, moved by hand."""

    def __init__(self) -> None:
        self.t, self.cpu = 100.0, 5.0

    def advance(self, seconds: float, busy: float) -> None:
        self.t += seconds
        self.cpu += seconds * busy


def _runtime() -> WorkerRuntime:
    runtime = WorkerRuntime(lambda *a: None, build_sender=lambda *a, **k: None)
    runtime.steps["r4"] = StepState(label="r4", shard=0, shards=1, start_at=101.0)
    return runtime


def _samples(runtime: WorkerRuntime, clocks: Clocks, seconds: float, busy: float, out: list) -> None:
    for _ in range(int(round(seconds / 0.25))):
        clocks.advance(0.25, busy)
        runtime.sample_cpu(clock=lambda: clocks.t, cpu_clock=lambda: clocks.cpu)
        sample = (runtime.cpu_step, runtime.cpu_at, runtime.cpu_now)
        if runtime.cpu_at is not None and (not out or out[-1] != sample):
            out.append(sample)


def test_cpu_is_sampled_only_while_a_steps_arrivals_are_sent():
    runtime, clocks, out = _runtime(), Clocks(), []
    _samples(runtime, clocks, 1.0, busy=1.0, out=out)  # start-up imports before the first arrival: 100%
    assert out == []
    _samples(runtime, clocks, 3.0, busy=0.05, out=out)  # sending: 5% of a core
    runtime.steps["r4"].to(StepPhase.QUEUED)  # the last arrival was put: the drain begins
    _samples(runtime, clocks, 2.0, busy=0.9, out=out)  # drain, judging, finalisation: not the generator
    assert [label for label, *_ in out] == ["r4", "r4", "r4"]
    assert [cpu for *_, cpu in out] == pytest.approx([0.05, 0.05, 0.05])
    # each sample is stamped at the start of the second it covers: inside the step's [start_at, end)
    assert all(101.0 <= at < 104.0 for _, at, _ in out)


def test_a_cpu_warning_comes_with_the_steps_judgement_and_names_it(tmp_path):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"ladder": {"steps": [{"rate": 4, "duration": "2s"}]}}})
    lines: list[str] = []
    controller = StepController(config, tmp_path, WorkerLink(_NoRunner()), build_plan(config), out=lines.append)
    controller.on_results(ResultsMessage(worker="0", rows=[], cpu=0.85, cpu_at=1.0, cpu_step="r4.00"))
    controller.on_results(ResultsMessage(worker="0", rows=[], cpu=0.99, cpu_at=9.0, cpu_step=None))
    assert lines == []  # never from a sample alone, nor from a sample outside any step
    controller.tally.cpu_warning(controller.step_of("r4.00"), [], config)
    assert len(lines) == 1 and lines[0].startswith("llmload: warning: step r4.00: worker 0 CPU at 85%")
    assert "--processes 2" in lines[0]
    # a quiet step says nothing
    controller.on_results(ResultsMessage(worker="0", rows=[], cpu=0.05, cpu_at=2.0, cpu_step="r4.00"))
    controller.tally.cpu_warning(controller.step_of("r4.00"), [], config)
    assert len(lines) == 1


class _NoRunner:
    def send_message(self, *a, **k) -> None:
        pass
