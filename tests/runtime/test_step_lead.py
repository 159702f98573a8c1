"""The lead between sending a step and its first arrival (issue 20, launch to first planned request).

A local runner handles the step message in-process (the arrivals are queued when the send returns), so
a small step needs only `LOCAL_LEAD_S`; planning grows with the step's arrivals, up to `LEAD_S`, which
forked or remote workers (messages, clock skew) and a dataset (read by the first step) keep.
"""

from __future__ import annotations

import pytest

from llmload.clock import now
from llmload.config import parse_config
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import LEAD_S, LOCAL_LEAD_S, StepController, step_lead_s
from llmload.runtime.wire.messages import DRAINED, STEP, DrainedMessage
from shapes.plan import build_plan


class RecordingRunner:
    """A local runner that records when each step message was sent, and drains the step at once."""

    def __init__(self) -> None:
        self.controller: StepController | None = None
        self.sent: list[tuple[float, float]] = []  # (time sent, the step's start_at)

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        if msg_type == STEP:
            self.sent.append((now(), data["start_at"]))
            self.controller.on_drained(DrainedMessage(label=data["step"]["label"], worker="0", put=0, finished=0))
        assert msg_type != DRAINED


def _steps(rate: float, duration: str, **requests):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "requests": requests,
                           "shape": {"ladder": {"warmup": "0s", "drain_timeout": "1s",
                                                "steps": [{"rate": rate, "duration": duration}]}}})
    return config, build_plan(config)


def test_a_local_runner_sends_a_small_step_with_the_short_lead(tmp_path):
    config, steps = _steps(20, "0.2s")
    runner = RecordingRunner()
    controller = StepController(config, tmp_path, WorkerLink(runner), steps, out=lambda line: None)
    runner.controller = controller
    controller.run()
    (sent_at, start_at), = runner.sent
    assert 0 < start_at - sent_at <= LOCAL_LEAD_S  # it was LEAD_S (0.25 s) for every step


def test_the_lead_grows_with_the_arrivals_and_stays_long_where_messages_travel():
    _, (small,) = _steps(20, "3s")
    _, (large,) = _steps(300, "120s")  # 36,000 arrivals: planning takes 0.15-0.2 s on a slow VM
    assert step_lead_s(small, local=True) == pytest.approx(LOCAL_LEAD_S + 60 * 10e-6)
    assert step_lead_s(large, local=True) == LEAD_S
    assert step_lead_s(small, local=False) == LEAD_S  # --processes, --master: messages, clock skew
    assert step_lead_s(small, local=True, dataset=True) == LEAD_S  # the first step reads the dataset
