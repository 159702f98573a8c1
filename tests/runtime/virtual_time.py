"""Virtual time for the master's step logic: the runtime's `llmload.clocks.VirtualClock` (its `now` /
`sleep` go to `StepController(clock=..., sleep=...)`: a 5-minute soak runs in milliseconds, in the same
order every time), and a fake worker link that answers step messages in that time.

`FakeLink` is a `WorkerLink` whose workers answer `llmload:step` with one summary and an
`llmload:drained`, each at a chosen virtual time; `llmload:cancel` is answered with a drained notice.

`FakeHost` is a `RunHost` (`llmload.runtime.master.lifecycle`) for a `RunLifecycle` without Locust: its
`stop_users` does what Locust's `runner.stop()` does (test_stopping, then test_stop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event

from llmload.clocks import VirtualClock
from llmload.records import Record
from llmload.runtime.wire.messages import (
    CANCEL,
    STEP,
    DrainedMessage,
    ResultsMessage,
    pack_record,
    read_message,
)

__all__ = ["FakeHost", "FakeLink", "VirtualClock", "WorkerPlan"]


@dataclass
class WorkerPlan:
    """How one fake worker answers a step (times in virtual seconds)."""

    #: name (Locust's worker index as a string) and client id
    name: str = "0"
    client_id: str | None = None
    #: its drained notice comes this long after the step's arrivals end (None: never, until cancelled)
    tail_s: float | None = 0.1
    #: it answers a cancel with its drained notice after this long (None: never)
    cancel_s: float | None = 0.05
    #: it vanishes (missing) at this time (None: never)
    lost_at: float | None = None
    #: the error its drained notice carries (a failed scheduler), or None
    error: str | None = None
    #: its drained notice arrives with a field the master cannot read (read as `Session._read` reads it)
    garbled: bool = False


@dataclass
class FakeLink:
    """A master's `WorkerLink` over fake workers that answer in virtual time (see the module docstring)."""

    clock: VirtualClock
    plans: list[WorkerPlan] = field(default_factory=lambda: [WorkerPlan()])
    #: True: a local runner (one worker, named "0")
    local: bool = False
    #: the controller the answers go to (set after making it)
    controller: object = None
    #: (virtual time, message type, data, client id) of each message the controller sent
    sent: list[tuple[float, str, dict, str | None]] = field(default_factory=list)
    #: what one shipped summary looks like (default: an ok request ending at the given time)
    make_record: Callable[[str, str, int, float], Record] | None = None

    def __post_init__(self) -> None:
        self._cancelled: dict[tuple[str, str], Event] = {}
        self.greenlets: list[gevent.Greenlet] = []

    def workers(self) -> list[tuple[str | None, str]]:
        return [(p.client_id, p.name) for p in self.plans if not self._gone(p)]

    def missing(self, client_id: str | None) -> bool:
        plan = next((p for p in self.plans if p.client_id == client_id), None)
        return plan is not None and self._gone(plan)

    def _gone(self, plan: WorkerPlan) -> bool:
        return plan.lost_at is not None and self.clock.now() >= plan.lost_at

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        self.sent.append((self.clock.now(), msg_type, data, client_id))
        plan = next(p for p in self.plans if p.client_id == client_id)
        if msg_type == STEP:
            self.greenlets.append(gevent.spawn(self._answer_step, plan, data))
        elif msg_type == CANCEL:
            self._cancel_event(plan.name, data["label"]).set()

    def steps_sent(self) -> list[tuple[float, dict]]:
        """(virtual send time, step message) of each step sent to the first worker."""
        first = self.plans[0].client_id
        return [(t, d) for t, kind, d, cid in self.sent if kind == STEP and cid == first]

    def cancels(self) -> list[tuple[float, str]]:
        return [(t, d["label"]) for t, kind, d, _ in self.sent if kind == CANCEL]

    def _cancel_event(self, name: str, label: str) -> Event:
        return self._cancelled.setdefault((name, label), Event())

    def _answer_step(self, plan: WorkerPlan, data: dict) -> None:
        step, start_at = data["step"], data["start_at"]
        label = step["label"]
        arrivals_end = start_at + float(step["warmup_s"]) + float(step["duration_s"] or 0.0)
        self._sleep_until(start_at)
        if self._gone(plan):
            return
        cancel = self._cancel_event(plan.name, label)
        drained_by = arrivals_end + plan.tail_s if plan.tail_s is not None else None
        if plan.lost_at is not None and (drained_by is None or plan.lost_at < drained_by):
            self._sleep_until(plan.lost_at)  # vanishes: no results, no drained notice
            return
        while not cancel.is_set() and (drained_by is None or self.clock.now() < drained_by):
            target = drained_by if drained_by is not None else self.clock.now() + 1.0
            self.clock.sleep(min(0.25, target - self.clock.now()))
        if cancel.is_set():
            if plan.cancel_s is None:
                return
            self.clock.sleep(plan.cancel_s)
        t = self.clock.now()
        record = (self.make_record or _ok_record)(label, plan.name, data["shard"], min(t, arrivals_end))
        controller = self.controller() if callable(self.controller) else self.controller
        controller.on_results(ResultsMessage(worker=plan.name, rows=[pack_record(record)]))
        notice = DrainedMessage(worker=plan.name, label=label, put=1, finished=1, error=plan.error).to_dict()
        if plan.garbled:
            notice["finished_count"] = notice.pop("finished")
        drained = read_message(DrainedMessage, notice, worker=plan.name, fail=controller.fail)
        if drained is not None:
            controller.on_drained(drained)

    def _sleep_until(self, t: float) -> None:
        if t > self.clock.now():
            self.clock.sleep(t - self.clock.now())


class FakeHost:
    """A `RunHost` without Locust: what the lifecycle asked of it is in `calls`."""

    def __init__(self, link: FakeLink | None = None, *, web: bool = False, remote_users: bool = False) -> None:
        self.fake_link = link
        self.web = web
        self.remote_users = remote_users
        self.launched = False
        self.life: Any = None
        #: ("stop_users",), ("quit_soon",), ("close_web_ui",), ("exit", code) in the order asked
        self.calls: list[tuple] = []
        self.exit_code: int | None = None

    def link(self) -> FakeLink:
        return self.fake_link

    def pool_ready(self) -> bool:
        return True

    def exit_note(self, code: int) -> str:
        return f" (exit code {code})"

    def plan_shape(self, config: Any) -> tuple[Any, None]:
        return _ConfigShape(), None

    def stop_users(self) -> None:
        """Locust's `runner.stop()`: test_stopping, the users stop, test_stop."""
        from llmload.runtime.master.lifecycle import StopReason

        self.calls.append(("stop_users",))
        self.life.stop(StopReason.WEB_STOP)
        self.life.stop(StopReason.USERS_STOPPED)

    def quit_soon(self) -> None:
        self.calls.append(("quit_soon",))

    def close_web_ui(self) -> None:
        self.calls.append(("close_web_ui",))

    def exit(self, code: int) -> None:
        self.calls.append(("exit", code))

    def set_exit_code(self, code: int) -> None:
        self.exit_code = code


class _ConfigShape:
    """The config's own plan and knee search (`shapes.plan`), as `shapes.loadshapes`' shapes offer them
    (without importing Locust)."""

    follows_config = True

    def plan(self, config: Any, *, base_dir: Any = None) -> list:
        from shapes.plan import build_plan

        return build_plan(config, base_dir=base_dir)

    def search(self, config: Any, rows: Any = ()) -> Any:
        from shapes.plan import ConfigSearch

        return ConfigSearch().search(config, rows)

    def search_step(self, config: Any, rate: float, **kwargs: Any) -> Any:
        from shapes.plan import ConfigSearch

        return ConfigSearch().search_step(config, rate, **kwargs)


def _ok_record(label: str, worker: str, shard: int, t: float) -> Record:
    return Record(request_id=f"{label}-{worker}-{shard}", step=label, worker=worker, scheduled_at=t - 0.1,
                  outcome="ok", sent_at=t - 0.1, first_token_at=t - 0.05, last_token_at=t, output_tokens=2,
                  token_times=[t - 0.05, t])
