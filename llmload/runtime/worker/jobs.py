"""From a step spec to this worker's jobs: its shard of the open-loop arrivals, or its closed-loop share.

Open loop and traces: `llmload.arrivals.plan_arrivals` gives this shard's arrivals (absolute times,
seeded by the step, so forked workers never share numpy's global state, NOTES.md). Closed loop: this
shard runs `closed_loop_users` users; each finished request starts the next one (`ClosedLoop.next`),
restamped with the time it is taken, until the shard's requests (or the step's duration) run out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.arrivals import Arrival, closed_loop_arrival, closed_loop_users, plan_arrivals
from llmload.records import Record
from shapes.steps import StepSpec

__all__ = ["ClosedLoop", "Job", "plan_jobs"]


@dataclass(slots=True)
class Job:
    """One planned request on its way through the worker's queue."""

    label: str
    arrival: Arrival
    #: the step's seed (the request mix draws from it and the arrival index)
    seed: int = 0
    capped: bool = False
    dequeued_at: float | None = None
    #: when the scheduler meant to queue it (its time minus the lead), and when its user was ready to
    #: send it (built, waiting for its time): `worker.Lead` learns from the two
    queued_for: float | None = None
    ready_at: float | None = None
    #: a multi-turn session's turn (`llmload.client.sessions.SessionTurn`); None: not (yet) a session
    session: Any = None

    @property
    def scheduled_at(self) -> float:
        return self.arrival.scheduled_at

    def record(self, worker: str) -> Record:
        """A fresh record for this job (outcome `not_sent` until a request is made)."""
        a = self.arrival
        return Record(request_id=a.request_id, step=self.label, worker=worker, scheduled_at=a.scheduled_at,
                      capped=self.capped, dequeued_at=self.dequeued_at, planned_input_tokens=a.input_tokens,
                      planned_output_tokens=a.output_tokens, prefix_id=a.prefix_id)


class ClosedLoop:
    """The rest of a closed-loop step on one shard: hands out the next request as one finishes."""

    def __init__(self, step: StepSpec, shard: int, shards: int, pending: list[Arrival] | None,
                 end_at: float | None) -> None:
        self.step, self.shard, self.shards = step, shard, shards
        self.pending = pending
        self.end_at = end_at
        self.made = 0
        self.stopped = False

    def more(self, at: float) -> bool:
        """Whether another request should start at time `at`."""
        if self.stopped or (self.end_at is not None and at >= self.end_at):
            return False
        return self.pending is None or bool(self.pending)

    def next(self, at: float) -> Job | None:
        """The next request, stamped `at`, or None when the step's share is done."""
        if not self.more(at):
            return None
        if self.pending is None:
            arrival = closed_loop_arrival(self.step, self.shard, self.shards, self.made, at)
        else:
            arrival = self.pending.pop(0)
            arrival.scheduled_at = at
        self.made += 1
        return Job(label=self.step.label, arrival=arrival, seed=self.step.seed)


def plan_jobs(step: StepSpec, *, start_at: float, shard: int, shards: int) -> tuple[list[Job], ClosedLoop | None]:
    """This shard's scheduled jobs of `step`, and for a closed loop the loop that makes the rest."""
    if not step.closed_loop:
        return [Job(label=step.label, arrival=a, seed=step.seed) for a in plan_arrivals(step, start_at, shard, shards)], None
    users = closed_loop_users(step, shard, shards)
    pending = plan_arrivals(step, start_at, shard, shards) if step.requests is not None else None
    end_at = start_at + step.duration_s if step.duration_s is not None else None
    loop = ClosedLoop(step, shard, shards, pending, end_at)
    first = [job for job in (loop.next(start_at) for _ in range(users)) if job is not None]
    return first, loop
