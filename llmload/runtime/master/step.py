"""One step of a run as the master knows it (`Step`), its status (`StepStatus`), and the events the step
controller fires as steps go (`StepEvents`).

A `Step` holds what was spread over the plan.json row dict, the tally's label-keyed dicts and `StepRun`:
its spec (`shapes.steps.StepSpec`), its plan.json fields as typed attributes (`start_at`, `window_end`,
`live_verdict`, ...: a misspelt name is an `AttributeError`, never a silent None), and what the workers
shipped for it until it is judged: their summaries (`rows`), drained notices (`drained`), arrivals sent
(`sent`), its planned arrival offsets (`offsets`) and each worker's highest CPU while sending it (`cpu`).

plan.json is written from the steps (`PlanFile`): `Step.plan_row()` is the step's plan.json object, its
keys in the order they were first set (every planned field first, `None` until known), so the file is
the same byte for byte as when it was a dict updated in place.

    status:  NOT_RUN -> RUNNING -> RUN | PARTIAL   (`STEP_TRANSITIONS`; NOT_RUN stays, with `not_run_reason`,
                                                    when a step is left out)

The events follow Locust's `event.py`: each hook is a declared attribute whose docstring lists its
arguments; listeners (the live table, the web UI's series) subscribe with `add_listener`, the controller
calls `fire`. A listener that raises is logged and the next one still runs: a view never stops a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

from gevent.event import Event

from llmload.runtime.master.step_records import StepRecords
from shapes.steps import StepBounds, StepSpec

__all__ = ["PLANNED_FIELDS", "STEP_TRANSITIONS", "EventHook", "Step", "StepEvents", "StepStatus", "plan_fields"]

log = logging.getLogger("llmload.controller")

#: the per-step keys every plan.json step carries from the start (None where not known yet), in this order
PLANNED_FIELDS = ("label", "index", "phase", "target_rate", "arrival", "concurrency", "start_at",
                  "window_start", "window_end", "drain_deadline", "drained_at", "planned_arrivals", "status")


class StepStatus(Enum):
    """Where one step is (plan.json `status`)."""

    NOT_RUN = "not_run"  # planned, not sent (yet, or never: `not_run_reason`)
    RUNNING = "running"  # sent: arriving or draining
    RUN = "run"  # drained (or cancelled at its drain deadline) and recorded
    PARTIAL = "partial"  # the run was stopped inside it: its window ends at the stop


_S = StepStatus
#: the expected changes of a step's status; any other is logged (a bug of ours) and still written, so
#: plan.json says what happened
STEP_TRANSITIONS: dict[StepStatus, set[StepStatus]] = {
    _S.NOT_RUN: {_S.RUNNING},
    _S.RUNNING: {_S.RUN, _S.PARTIAL},
    _S.RUN: set(),
    _S.PARTIAL: set(),
}


class _PlanField:
    """A plan.json field of `Step`: stored in the step's plan.json row (`Step.row`), None until set."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, step: Step | None, owner: type) -> Any:
        if step is None:
            return self
        return step.row.get(self.name)

    def __set__(self, step: Step, value: Any) -> None:
        step.row[self.name] = value


class _StatusField(_PlanField):
    """plan.json `status` as a `StepStatus` (written as its value)."""

    def __get__(self, step: Step | None, owner: type) -> Any:
        if step is None:
            return self
        return StepStatus(step.row["status"])

    def __set__(self, step: Step, value: StepStatus) -> None:
        new = StepStatus(value)
        old = step.row.get("status")
        if old is not None and new.value != old and new not in STEP_TRANSITIONS[StepStatus(old)]:
            log.warning("step %s: no status transition %s -> %s", step.label, old, new.value)
        step.row["status"] = new.value


class Step:
    """Everything the master knows of one step (see the module docstring)."""

    __slots__ = ("spec", "row", "bounds", "rows", "drained", "drain_event", "sent", "offsets", "cpu",
                 "verdict", "failing", "stats", "table_row", "share_history")

    # plan.json fields the master writes (the spec's own fields are read from `spec`)
    index = _PlanField()
    status = _StatusField()
    start_at = _PlanField()
    window_start = _PlanField()
    window_end = _PlanField()
    drain_deadline = _PlanField()
    drained_at = _PlanField()
    planned_arrivals = _PlanField()
    trace_requests = _PlanField()
    extends = _PlanField()
    workers = _PlanField()
    cancelled = _PlanField()
    lost_workers = _PlanField()
    clock = _PlanField()
    error = _PlanField()
    live_verdict = _PlanField()
    live_failing = _PlanField()
    planned_window_end = _PlanField()
    not_run_reason = _PlanField()
    lost_requests = _PlanField()

    def __init__(self, spec: StepSpec, *, extends: str | None = None) -> None:
        self.spec = spec
        #: the plan.json object of this step, kept in the order its keys were first set (`plan_row`)
        self.row: dict[str, Any] = {key: None for key in PLANNED_FIELDS}
        self.row.update(spec.to_dict() | plan_fields(spec) | ({"extends": extends} if extends else {}))
        self.status = StepStatus.NOT_RUN
        #: its warm-up, window and drain deadline once sent
        self.bounds: StepBounds | None = None
        #: the workers' per-request summaries shipped so far, spilled to disk by the tally, with their
        #: streaming figures (`llmload.runtime.master.step_records`; dropped once judged: `forget`)
        self.rows: StepRecords = StepRecords()
        #: per worker name, its drained notice
        self.drained: dict[str, Any] = {}
        #: set when a worker's drained notice arrives
        self.drain_event = Event()
        #: per worker name, arrivals of the measurement window sent so far (the web UI's running rate)
        self.sent: dict[str, int] = {}
        #: its arrival offsets from its start (open loop), for the planned arrivals so far
        self.offsets: Any = None
        #: per worker name, the highest CPU sample (fraction of one core) while sending it
        self.cpu: dict[str, float] = {}
        #: the live verdict, failing checks, `judge_step` stats and the live table's row, once judged
        self.verdict: str | None = None
        self.failing: list[str] = []
        self.stats: dict = {}
        self.table_row: dict | None = None
        #: its requests as the knee search's estimate reads them (`analysis.share_cv.History`), once judged
        #: live in a run that searches
        self.share_history: Any = None

    def __repr__(self) -> str:
        return f"Step({self.label!r}, {self.status.value})"

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def target_rate(self) -> float | None:
        return self.spec.target_rate

    @property
    def judged(self) -> bool:
        return self.verdict is not None

    def set(self, **values: Any) -> None:
        """Set plan.json fields (each must be one of `Step`'s: a misspelt name raises `AttributeError`)."""
        for name in values:
            self.written(name)  # an unknown name raises before anything is set
        for name, value in values.items():
            setattr(self, name, value)

    def written(self, name: str) -> bool:
        """The plan.json field `name` was set (to None too); an unknown name raises `AttributeError`."""
        if not isinstance(getattr(type(self), name, None), _PlanField):
            raise AttributeError(f"Step has no plan.json field {name!r}")
        return name in self.row

    def plan_row(self) -> dict[str, Any]:
        """The step's plan.json object."""
        return self.row

    # ------------------------------------------------------------------ what the workers shipped

    def errors(self) -> list[str]:
        """The errors the workers' drained notices carry (a worker greenlet that failed)."""
        return [d.error for d in self.drained.values() if d.error]

    def planned_so_far(self, t: float) -> int:
        """Planned arrivals due by time `t` (all of them for a count-bound closed loop)."""
        total = self.planned_arrivals or 0
        if not self.spec.arrivals_s or self.start_at is None:
            return total
        return int(total * min(1.0, max(0.0, (t - self.start_at) / self.spec.arrivals_s)))

    def running_rates(self, t: float) -> tuple[float | None, float | None]:
        """(offered, achieved) so far at time `t` of a running step: planned arrivals of its window so far
        and arrivals sent, each over the elapsed window (None before the window starts)."""
        ws, start_at = self.window_start, self.start_at
        if ws is None or start_at is None:
            return None, None
        t = min(t, self.window_end or t)
        elapsed = t - ws
        if elapsed <= 0:
            return None, None
        offered = None
        if self.offsets is not None:
            import numpy as np

            due = np.count_nonzero((self.offsets >= ws - start_at) & (self.offsets < t - start_at))
            offered = float(due) / elapsed
        achieved = sum(self.sent.values()) / elapsed
        return offered, achieved

    def judged_row(self) -> dict:
        """The judged step as the knee search reads it (`judge_step`'s stats with its verdict)."""
        row = {**self.stats, "label": self.label, "target_rate": self.target_rate, "verdict": self.verdict,
               "failing": list(self.failing), "arrival": self.spec.arrival}
        if self.share_history is not None:
            from analysis.share_cv import SHARE_HISTORY

            row[SHARE_HISTORY] = self.share_history
        return row

    def forget(self) -> None:
        """Judged: its summaries, offsets and sent counts are done with (the records are on disk), so hours of
        soak slices do not pile up in the master's memory."""
        self.rows.discard()
        self.rows = StepRecords()
        self.offsets = None
        self.sent = {}


def plan_fields(spec: StepSpec) -> dict:
    """plan.json's per-step fields that come from the spec alone."""
    planned = None
    if not spec.closed_loop:
        from llmload.arrivals import step_offsets

        planned = len(step_offsets(spec))
    elif spec.requests is not None:
        planned = spec.requests
    fields = {"planned_arrivals": planned}
    if spec.trace is not None:
        fields["trace"] = None  # the arrivals travel in the step message, not in plan.json
        fields["trace_requests"] = len(spec.trace)
    return fields


class EventHook:
    """One event: listeners added with `add_listener` are called in that order by `fire(**kwargs)`.
    A listener that raises is logged; the others still run (Locust's `EventHook`, without its
    user-flow exceptions)."""

    def __init__(self) -> None:
        self._handlers: list[Callable[..., None]] = []

    def add_listener(self, handler: Callable[..., None]) -> Callable[..., None]:
        self._handlers.append(handler)
        return handler

    def remove_listener(self, handler: Callable[..., None]) -> None:
        self._handlers.remove(handler)

    def fire(self, **kwargs: Any) -> None:
        for handler in self._handlers.copy():  # a listener may add or remove listeners
            try:
                handler(**kwargs)
            except Exception:
                log.exception("a listener of a step event failed")


class StepEvents:
    """The step controller's events (`StepController.events`)."""

    step_started: EventHook
    """A step was sent to the workers (its `start_at`, bounds and `offsets` are set).

    :param step: the `Step`
    """

    step_window_ended: EventHook
    """A step drained or was cancelled: its `window_end` (cut at a stop), `drained_at` and status are final.

    :param step: the `Step`
    """

    step_judged: EventHook
    """A step got its live verdict: `verdict`, `failing`, `stats` and `table_row` are set (the live table
    prints the row).

    :param step: the `Step`
    """

    step_finished: EventHook
    """A step is done with: judged, its summaries dropped (`Step.forget`).

    :param step: the `Step`
    """

    search_finished: EventHook
    """The knee search after the ladder ended (not fired when the shape has none).

    :param answer: the search's answer (`shapes.knee_search.SearchAnswer`: why it stopped, how many steps)
    """

    def __init__(self) -> None:
        for name in self.__annotations__:
            setattr(self, name, EventHook())
