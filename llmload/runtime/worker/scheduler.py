"""The worker side of the open-loop runtime: scheduler greenlet, arrival queue, in-flight tracking.

One `WorkerRuntime` lives in each process that runs users (a Locust worker, or the local runner). For
each `llmload:step` message it starts a scheduler greenlet that sleeps until each planned arrival's
time and puts a `Job` on a gevent queue. The pool of users blocks on that queue inside `wait_time`
(Locust kills idle waiting users instantly on stop) and sends. An arrival put while no user is free is
marked `capped`: its wait shows as client wait (`sent_at - scheduled_at`), never as TTFT.

Closed-loop (concurrency) steps use the same queue: the scheduler puts this shard's share of the level
at once and each finished request puts its successor, until the shard's share of the requests is sent.

Time comes from the `Clock` the runtime is handed (`llmload.clocks`: the real one, or a virtual one for
`llmload run --virtual` and the tests); nothing here reads the process clock. The step message carries
the worker's clock offset the master measured: `on_step` applies it (`Clock.set_offset`), so the
schedule and every timestamp are on the master's clock.

Every finished request is written (flushed) to `records/worker-<id>.jsonl`, and a compact summary is
queued for the master, with the process's CPU while it sends a step's arrivals (`sample_cpu`). When a step's arrivals are over and every job of it has finished, the worker
flushes its summaries and sends `llmload:drained`. On `llmload:cancel` (drain timeout) the in-flight
requests of that step are killed, which records them as `cancelled`; a worker whose master is gone
stops every step the same way (`abandon`).

The scheduler and shipper greenlets are linked (`link_exception`): a scheduler that fails records the
step's arrivals it never queued as `client_error` (a failure of the generator) and the step drains at
once, its drained message carrying the error, which ends the run on the master with that one line. A
step or cancel message this worker cannot read (`MessageError`: a field missing, unknown or of the wrong
type) is answered the same way: a drained notice whose error names the field.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, cast

import gevent
import gevent.queue
from gevent.greenlet import Greenlet

from llmload.arrivals import Arrival
from llmload.client.outcomes import SendContext, classify_exception, trim
from llmload.clocks import REAL_CLOCK, Clock
from llmload.errors import MessageError
from llmload.records import Record, RecordWriter
from llmload.runtime.wire.messages import (
    CancelMessage,
    DrainedMessage,
    Message,
    ResultsMessage,
    StepMessage,
    pack_record,
)
from llmload.runtime.worker.jobs import ClosedLoop, Job, plan_jobs
from llmload.statemachine import StateMachine
from shapes.steps import step_bounds

__all__ = ["STEP_PHASES", "Lead", "RequestCancelled", "StepPhase", "StepState", "WorkerRuntime"]

#: the real clock, as the `Clock` it is (`llmload.clocks.Clock` declares `precise` a settable attribute,
#: `RealClock` a read-only property: mypy refuses the plain `REAL_CLOCK` as a `Clock` default)
_DEFAULT_CLOCK = cast(Clock, REAL_CLOCK)

log = logging.getLogger("llmload.worker")

#: a session's next turn is queued this long before its time (a user then waits until it)
TURN_LEAD_S = 0.005
#: how often queued summaries are shipped to the master
SHIP_INTERVAL_S = 0.25
#: the worker's CPU is sampled over intervals this long while it sends (none shorter than the second)
CPU_INTERVAL_S = 1.0
MIN_CPU_SPAN_S = 0.5
#: arrivals are queued at most this long before their time, so a user has built the request when it is
#: due (`Sender.send` waits out the rest precisely; gevent timers wake up to 1 ms late, bench/)
QUEUE_AHEAD_S = 0.003
#: how long a drain timeout waits for the cancelled requests to be recorded
CANCEL_WAIT_S = 5.0
#: with a precise wake-up (`Clock.precise`: the real clock's) the lead is learnt (`Lead`): the
#: `LEAD_QUANTILE` of the last `LEAD_WINDOW` times from the scheduler's wake-up to the user's being
#: ready, plus `LEAD_MARGIN_S`
LEAD_QUANTILE = 0.75
LEAD_MARGIN_S = 0.00005
MIN_LEAD_S = 0.0001
LEAD_WINDOW = 32


class Lead:
    """How long before its time an arrival is queued. Each arrival used to cost two sleeps and wake-ups
    (the scheduler's at `QUEUE_AHEAD_S` before, the user's at the time), ~0.25 ms of CPU each on the
    2-vCPU VMs: with a precise wake-up the scheduler wakes just early enough for the user to build the request
    (`Sender.send` then yields to the loop for the few µs left, `llmload.clocks.YIELD_BELOW_S`), one wake-up."""

    def __init__(self, precise: bool) -> None:
        self.precise = precise
        self.needs: deque[float] = deque(maxlen=LEAD_WINDOW)

    def value(self) -> float:
        if not self.precise or not self.needs:
            return QUEUE_AHEAD_S
        needs = sorted(self.needs)
        need = needs[min(len(needs) - 1, int(LEAD_QUANTILE * len(needs)))]
        return min(QUEUE_AHEAD_S, max(MIN_LEAD_S, need + LEAD_MARGIN_S))

    def learn(self, job: Job) -> None:
        """A job's user reached its wait (`Job.ready_at`): how early its queueing had to be."""
        if job.queued_for is not None and job.ready_at is not None and not job.capped:
            self.needs.append(job.ready_at - job.queued_for)


class RequestCancelled(gevent.GreenletExit):
    """Thrown into a user's greenlet whose request a drain timeout cancels: recorded `cancelled` (as a
    killed greenlet's), then caught by `WorkerRuntime.run`, so the user goes on."""


def _cancel_request(state: StepState, greenlet: Any) -> None:
    """In the hub: cancel the request `greenlet` is sending, if it still is (its `inflight` entry goes
    before the record is written, so a cancel never lands in the writing, nor in the user's next wait)."""
    if greenlet in state.inflight and not greenlet.dead:
        greenlet.throw(RequestCancelled)


class StepPhase(Enum):
    """Where one step is on this worker (`STEP_PHASES`):

        SCHEDULING -> QUEUED -> DRAINED
        SCHEDULING or QUEUED -> CANCELLING -> CANCELLED   (the master's cancel: its drain timed out)
    """

    SCHEDULING = "scheduling"  # the scheduler queues the planned arrivals at their times
    #: open loop: every planned arrival is queued (or recorded, if the scheduler failed); closed loop: the
    #: first level's jobs are, and each finished job queues its successor until the shard's share is sent
    QUEUED = "queued"
    CANCELLING = "cancelling"  # the master's cancel: queued arrivals and requests in flight are cancelled
    DRAINED = "drained"  # every job put has finished: the drained notice went out
    CANCELLED = "cancelled"  # drained after a cancel (the notice says `cancelled`)

    @property
    def arrivals_queued(self) -> bool:
        return self is not StepPhase.SCHEDULING

    @property
    def cancelled(self) -> bool:
        return self in (StepPhase.CANCELLING, StepPhase.CANCELLED)

    @property
    def drained(self) -> bool:
        return self in (StepPhase.DRAINED, StepPhase.CANCELLED)


_P = StepPhase
STEP_PHASES: dict[StepPhase, set[StepPhase]] = {
    _P.SCHEDULING: {_P.QUEUED, _P.CANCELLING},
    _P.QUEUED: {_P.CANCELLING, _P.DRAINED},
    _P.CANCELLING: {_P.CANCELLED},
    _P.DRAINED: set(),  # a cancel that crossed the drained notice finds nothing left to cancel
    _P.CANCELLED: set(),
}


def _phase_machine() -> StateMachine:
    return StateMachine(StepPhase.SCHEDULING, STEP_PHASES, name="worker step")


@dataclass
class StepState:
    """What a worker knows about one step it runs."""

    label: str
    shard: int
    shards: int
    loop: ClosedLoop | None = None
    put: int = 0
    finished: int = 0
    #: where the step is (`StepPhase`); changed only through `to`
    machine: StateMachine = field(default_factory=_phase_machine)
    #: the step's first arrival time, its measurement window start, and its arrivals taken by a user so far
    start_at: float = 0.0
    window_start: float = 0.0
    sent: int = 0
    inflight: set = field(default_factory=set)
    scheduler: Greenlet | None = None
    #: planned jobs the scheduler has queued so far
    scheduled: int = 0
    #: why this step ended early on this worker (a greenlet of ours failed), sent with `llmload:drained`
    error: str | None = None

    @property
    def phase(self) -> StepPhase:
        phase = self.machine.state
        assert isinstance(phase, StepPhase)  # `StateMachine` holds the states it was made with
        return phase

    def to(self, phase: StepPhase) -> bool:
        """The one place the step's phase changes (`STEP_PHASES`)."""
        return self.machine.to(phase)

    def arrivals_over(self, t: float) -> bool:
        """Every arrival of this step is queued at `t` (a closed loop: none is left to put)."""
        return self.phase.arrivals_queued and not (self.loop is not None and self.loop.more(t))


class WorkerRuntime:
    """Scheduler, queue and record shipping for one user-running process."""

    def __init__(self, send_message: Callable[[str, Any], None], *, build_sender: Callable,
                 clock: Clock = _DEFAULT_CLOCK) -> None:
        self._send_message = send_message
        #: every time this worker reads, sleeps or waits for (`llmload.clocks`)
        self.clock = clock
        self._build_sender = build_sender
        self.queue: gevent.queue.Queue = gevent.queue.Queue()
        self.free_users = 0
        self.steps: dict[str, StepState] = {}
        self.worker = "0"
        self.run_dir: Path | None = None
        self.writer: RecordWriter | None = None
        self.sender: Any = None
        self._config_dict: dict | None = None
        self._outbox: list[dict] = []
        self._shipper: Greenlet | None = None
        #: the last CPU sample while sending: fraction of one core, its interval's start, its step
        self.cpu_now: float | None = None
        self.cpu_at: float | None = None
        self.cpu_step: str | None = None
        self._cpu_shipped: float | None = None
        self._cpu_mark: tuple[str, float, float] | None = None
        #: how long before its time an arrival is queued (learnt where wake-ups are precise)
        self.lead = Lead(clock.precise)
        #: the master is gone (`abandon`): nothing is sent to it any more
        self.master_gone = False

    # ------------------------------------------------------------------ messages from the master

    def on_step(self, data: dict) -> None:
        """Start one step: the message carries everything (`StepMessage`); one this worker cannot read
        ends the step at once, its drained notice saying why (`_unreadable`)."""
        try:
            message = StepMessage.from_dict(data, worker=self.worker)
        except MessageError as exc:
            self._unreadable(exc, data)
            return
        self.worker = message.worker
        if message.clock_offset_s is not None:  # onto the master's timeline (llmload.runtime.wire.clocksync)
            self.clock.set_offset(message.clock_offset_s)
        run_dir = Path(message.run_dir)
        if self.writer is None or self.run_dir != run_dir:
            if self.writer is not None:
                self.writer.close()
            self.run_dir = run_dir
            self.writer = RecordWriter(run_dir / "records" / f"worker-{self.worker}.jsonl")
        if self.sender is None or message.config != self._config_dict:
            self._config_dict = message.config
            self.sender = self._build_sender(message.config, worker=self.worker, shard=message.shard,
                                             shards=message.shards, seed=message.seed, base_dir=message.base_dir,
                                             clock=self.clock)
        step, start_at = message.step, float(message.start_at)
        jobs, loop = plan_jobs(step, start_at=start_at, shard=message.shard, shards=message.shards)
        state = StepState(label=step.label, shard=message.shard, shards=message.shards, loop=loop,
                          start_at=start_at, window_start=step_bounds(step, start_at).window_start)
        self.steps[state.label] = state
        if self._shipper is None:
            self._shipper = gevent.spawn(self._ship_loop)
            self._shipper.link_exception(self._shipper_failed)
        state.scheduler = gevent.spawn(self._schedule, state, jobs)
        state.scheduler.link_exception(lambda g: self._scheduler_failed(state, jobs, g))

    def on_cancel(self, data: dict) -> None:
        """The drain timed out: cancel this step's in-flight requests and its queued arrivals
        (`CancelMessage`; one this worker cannot read is said as `on_step` says it)."""
        try:
            message = CancelMessage.from_dict(data, worker=self.worker)
        except MessageError as exc:
            self._unreadable(exc, data)
            return
        state = self.steps.get(message.label)
        if state is None or state.phase.drained:  # a cancel that crossed our drained notice: nothing is left
            return
        state.to(StepPhase.CANCELLING)
        self._stop_step(state)
        deadline = self.clock.now() + CANCEL_WAIT_S
        while state.inflight and self.clock.now() < deadline:
            self.clock.sleep(0.005)
        self._maybe_drained(state)

    def _stop_step(self, state: StepState) -> None:
        """Stop a cancelling step at once: no more arrivals, its queued ones recorded `cancelled`, and a
        cancel scheduled for each request in flight (the caller waits for them to end)."""
        if state.loop is not None:
            state.loop.stopped = True
        if state.scheduler is not None:
            state.scheduler.kill(block=True)
        self._drop_queued(state, outcome="cancelled")
        hub = gevent.get_hub()
        for greenlet in list(state.inflight):
            hub.loop.run_callback(_cancel_request, state, greenlet)

    def abandon(self) -> int | None:
        """The master is gone (`llmload.runtime.locustglue.master_watch`): nothing more goes to it, every
        step stops at once as a cancel stops it (queued arrivals and requests in flight recorded
        `cancelled`) and the record file is closed. Returns how many records the file got (None: no
        step came, no file)."""
        self.master_gone = True
        for state in self.steps.values():
            if state.phase.drained:
                continue
            if not state.phase.cancelled:
                state.to(StepPhase.CANCELLING)
            self._stop_step(state)
        deadline = self.clock.now() + CANCEL_WAIT_S
        while any(state.inflight for state in self.steps.values()) and self.clock.now() < deadline:
            self.clock.sleep(0.005)
        if self._shipper is not None:
            self._shipper.kill(block=False)
            self._shipper = None
        if self.writer is None:
            return None
        count = self.writer.count
        self.writer.close()
        self.writer = None
        return count

    def _unreadable(self, exc: MessageError, data: Any) -> None:
        """A message from the master this worker cannot read (llmload versions that differ, a bug):
        said in this worker's log and as the `error` of a drained notice for the step it names (`""`
        when it names none), which ends the run on the master with that one line."""
        log.error("%s", exc)
        step = data.get("step") if isinstance(data, dict) else None
        named = step if isinstance(step, dict) else data if isinstance(data, dict) else {}
        label = named.get("label")
        self._tell_master(DrainedMessage(worker=exc.worker or self.worker,
                                         label=label if isinstance(label, str) else "", put=0, finished=0,
                                         cancelled=False, at=self.clock.now(), error=str(exc)))

    def _tell_master(self, message: Message) -> None:
        if self.master_gone:  # nobody to tell (a send would only wait on Locust's retries)
            return
        self._send_message(message.TYPE, message.to_dict())

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, state: StepState, jobs: list[Job]) -> None:
        lead, sleep_until = self.lead, self.clock.sleep_until
        for job in jobs:
            at = job.scheduled_at - lead.value()
            sleep_until(at)
            job.queued_for = at
            self._put(state, job)
            state.scheduled += 1
        state.to(StepPhase.QUEUED)
        self._maybe_drained(state)

    def _scheduler_failed(self, state: StepState, jobs: list[Job], greenlet: Greenlet) -> None:
        """The step's scheduler died: its arrivals not queued yet are recorded `client_error` (the
        generator failed them), and the step drains now with the error (the master ends the run)."""
        exc = greenlet.exception
        state.error = (f"worker {self.worker}: the scheduler of step {state.label} failed "
                       f"({type(exc).__name__}: {exc})")
        log.error("%s", state.error, exc_info=(type(exc), exc, exc.__traceback__))
        if state.loop is not None:
            state.loop.stopped = True
        for job in jobs[state.scheduled:]:
            record = job.record(self.worker)
            record.outcome, record.error = "client_error", trim(state.error)
            state.put += 1  # recorded as it would have been sent: the step's counts stay whole
            self.finish(job, record)
        if state.phase is StepPhase.SCHEDULING:  # (a cancel may have come between the failure and this call)
            state.to(StepPhase.QUEUED)
        self._maybe_drained(state)

    def _shipper_failed(self, greenlet: Greenlet) -> None:
        """Shipping summaries failed: every step under way ends with the error (their drained messages
        still flush what is queued); the next step starts a new shipper."""
        exc = greenlet.exception
        error = f"worker {self.worker}: shipping results to the master failed ({type(exc).__name__}: {exc})"
        log.error("%s", error, exc_info=(type(exc), exc, exc.__traceback__))
        for state in self.steps.values():
            if not state.phase.drained and state.error is None:
                state.error = error
        if self._shipper is greenlet:
            self._shipper = None

    def _put(self, state: StepState, job: Job, *, freeing: int = 0) -> None:
        """Queue `job`; `capped` when no user is free for it (`freeing`: users about to be, e.g. the one
        whose finished request put this closed-loop successor: it takes it next, never a capped wait)."""
        job.capped = self.free_users + freeing <= 0
        state.put += 1
        self.queue.put(job)

    def take(self) -> Job:
        """Block until an arrival is queued (called by users inside `wait_time`)."""
        self.free_users += 1
        try:
            job = self.queue.get()
        finally:
            self.free_users -= 1
        job.dequeued_at = self.clock.now()
        state = self.steps.get(job.label)
        if state is not None and job.scheduled_at >= state.window_start:
            state.sent += 1
        return job

    def _drop_queued(self, state: StepState, *, outcome: str) -> None:
        kept = []
        while not self.queue.empty():
            job = self.queue.get_nowait()
            if job.label == state.label:
                record = job.record(self.worker)
                record.outcome = outcome
                self.finish(job, record)
            else:
                kept.append(job)
        for job in kept:
            self.queue.put(job)

    # ------------------------------------------------------------------ running one request

    def run(self, job: Job, *, on_record: Callable[[Record], None] | None = None, user: Any = None) -> Record:
        """Send one job in the calling greenlet and return its record. `user` (an `LLMUser`) builds the
        request with its `build_request` hook (`llmload.runtime.worker.sending`).

        A drain timeout (`on_cancel`) throws `RequestCancelled` into the greenlet while its request is
        in flight: the record says `cancelled` and the caller goes on. If the calling user is killed
        (test stopped), the request is recorded `cancelled` before the exit propagates. (No child
        greenlet per request: each cost a spawn, a switch and a 16 KiB frame stack mapped and unmapped.)
        """
        record = job.record(self.worker)
        with contextlib.suppress(RequestCancelled):
            self._send(job, record, on_record, user)
        return record

    def _send(self, job: Job, record: Record, on_record: Callable[[Record], None] | None, user: Any = None) -> None:
        state = self.steps.get(job.label)
        me = gevent.getcurrent()
        if state is not None:
            state.inflight.add(me)
        try:
            self.sender.send(record, job, user=user)
            self.lead.learn(job)
        except gevent.GreenletExit:
            record.outcome = "cancelled"
            raise
        except Exception as exc:  # a bug of ours must not kill the user pool, nor count against the server
            log.exception("request %s failed inside the client", record.request_id)
            failure = classify_exception(exc, SendContext(generator=True))
            credentials = getattr(getattr(self.sender, "transport", None), "credentials", None)
            message = credentials.redact(failure.message) if credentials is not None else failure.message
            record.outcome, record.error = failure.outcome, trim(message)
        finally:
            if state is not None:  # from here on a cancel no longer reaches this greenlet
                state.inflight.discard(me)
            self.finish(job, record)
            if on_record is not None and record.outcome != "not_sent":
                try:
                    on_record(record)
                except Exception:
                    log.exception("request event hook failed")

    def finish(self, job: Job, record: Record) -> None:
        """Write the record, queue its summary, and keep the step's counts (and closed loop) going."""
        if self.writer is not None:
            self.writer.write(record)
        self._outbox.append(pack_record(record))
        state = self.steps.get(job.label)
        if state is None:
            return
        continued = self._next_turn(state, job, record)
        state.finished += 1
        if state.loop is not None and not state.phase.cancelled and not continued:  # a session's turn is its next
            successor = state.loop.next(self.clock.now())
            if successor is not None:  # the user that finished `job` is about to be free for it
                self._put(state, successor, freeing=1)
        self._maybe_drained(state)

    def _next_turn(self, state: StepState, job: Job, record: Record) -> bool:
        """A session's answered turn: queue its next turn after the think time (counted as put now, so
        the step is not drained while a session thinks); True when it did. A failed turn ends its
        session. In a closed loop the session's next turn is its user's next request."""
        if job.session is None or record.outcome != "ok" or state.phase.cancelled:
            return False
        turn = self.sender.planner().next_turn(job.session, job.session.answer)
        if turn is None:
            return False
        a = job.arrival
        at = self.clock.now() + turn.think_s
        successor = Job(label=job.label, seed=job.seed, session=turn, arrival=Arrival(
            request_id=turn.request_id, step=a.step, index=a.index, scheduled_at=at))
        state.put += 1
        gevent.spawn(self._put_turn_later, max(0.0, turn.think_s - TURN_LEAD_S), state, successor)
        return True

    def _put_turn_later(self, delay_s: float, state: StepState, job: Job) -> None:
        self.clock.sleep(delay_s)
        self._put_turn(state, job)

    def _put_turn(self, state: StepState, job: Job) -> None:
        """Queue a session's next turn (already counted in `put`); a cancelled step records it unsent."""
        if state.phase.cancelled:
            record = job.record(self.worker)
            record.session_id, record.turn = job.session.session_id, job.session.turn
            self.finish(job, record)
            return
        job.capped = self.free_users <= 0
        self.queue.put(job)

    # ------------------------------------------------------------------ shipping to the master

    def _maybe_drained(self, state: StepState) -> None:
        phase = state.phase
        if state.arrivals_over(self.clock.now()) and state.put <= state.finished and not phase.drained:
            state.to(StepPhase.CANCELLED if phase.cancelled else StepPhase.DRAINED)
            self.sample_cpu()  # the step's last CPU interval goes out before its drained message
            self.flush()
            self._tell_master(DrainedMessage(worker=self.worker, label=state.label, put=state.put,
                                             finished=state.finished, cancelled=phase.cancelled, at=self.clock.now(),
                                             error=state.error))

    def flush(self) -> None:
        """Ship the queued summaries now (with this process's CPU use, even when there are none)."""
        if not self._outbox and self.cpu_at is None:
            return
        rows, self._outbox = self._outbox, []
        if not rows and self.cpu_at == self._cpu_shipped:
            return
        self._cpu_shipped = self.cpu_at
        sent = {s.label: s.sent for s in self.steps.values() if not s.phase.drained}
        self._tell_master(ResultsMessage(worker=self.worker, rows=rows, cpu=self.cpu_now, cpu_at=self.cpu_at,
                                         cpu_step=self.cpu_step, sent=sent))

    def _ship_loop(self) -> None:
        while True:
            self.clock.sleep(SHIP_INTERVAL_S)
            self.sample_cpu()
            try:
                self.flush()
            except Exception:
                log.exception("could not ship results to the master")

    def sending(self, t: float) -> str | None:
        """The step whose arrivals this worker is sending at `t` (the latest started one), else None."""
        label = None
        for state in self.steps.values():
            if state.start_at <= t and not state.arrivals_over(t) and not state.phase.cancelled:
                label = state.label
        return label

    def sample_cpu(self, *, clock: Callable[[], float] | None = None,
                   cpu_clock: Callable[[], float] | None = None) -> None:
        """This process's CPU (fraction of one core) while it sends a step's arrivals, at most one
        sample per `CPU_INTERVAL_S`, never outside the sending (start-up, drains, judging, finalisation).
        A sample covers [mark, t) and is stamped at its start, so it lies inside its step's
        [start_at, window_end): the number the validity rule reads (`worker_cpu`)."""
        t = clock() if clock is not None else self.clock.now()
        cpu = cpu_clock() if cpu_clock is not None else self.clock.cpu_time()
        label = self.sending(t)
        mark = self._cpu_mark
        if mark is not None and (label != mark[0] or t - mark[1] >= CPU_INTERVAL_S):
            if t - mark[1] >= MIN_CPU_SPAN_S:  # a sliver at the end of a step is too noisy to judge on
                self.cpu_now, self.cpu_at, self.cpu_step = (cpu - mark[2]) / (t - mark[1]), mark[1], mark[0]
            mark = None
        if mark is None and label is not None:
            mark = (label, t, cpu)
        self._cpu_mark = mark

    def close(self) -> None:
        """Record queued-but-unsent arrivals as cancelled and close the record file."""
        for state in self.steps.values():
            if state.scheduler is not None:
                state.scheduler.kill(block=False)
            self._drop_queued(state, outcome="cancelled")
        if self._shipper is not None:
            self._shipper.kill(block=False)
            self._shipper = None
        try:
            self.flush()
        except Exception:
            log.debug("final flush failed", exc_info=True)
        if self.writer is not None:
            self.writer.close()
            self.writer = None
