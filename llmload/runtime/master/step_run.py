"""One step on every worker: send it, wait for its drain (cancel at its deadline), record it, judge it.

The step controller (`llmload.runtime.master.controller`) makes a `StepRun` per step. `launch` sends every
worker one self-contained `llmload:step` message with an absolute `start_at`; `settle` waits for every
live worker's `llmload:drained` or the drain deadline, after which it sends `llmload:cancel` (the
workers record their in-flight requests as `cancelled`), writes the step's end into plan.json and
judges it with the live judge on the summaries the workers shipped. A worker's drained notice that
carries an error (a worker greenlet failed) ends the run after this step (`StepController.fail`).

A `StepRun` gets what it needs of the run in a `StepContext` made once by the controller (the workers,
the plan, the tally, the events, the judge, and the run's stop state through `RunControl`): it never
reaches into the controller, and this module does not import it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gevent
from gevent.event import Event

from llmload.clocks import REAL_CLOCK
from llmload.config import Config
from llmload.rundir.plan_file import PlanFile
from llmload.runtime.master.live_table import format_progress, step_row
from llmload.runtime.master.lost_workers import LostWorkers
from llmload.runtime.master.shipped import StepTally
from llmload.runtime.master.step import Step, StepEvents, StepStatus
from llmload.runtime.wire.messages import CancelMessage, StepMessage
from shapes.steps import step_bounds

__all__ = ["CANCEL_GRACE_S", "PROGRESS_EVERY_S", "Link", "RunControl", "StepContext", "StepRun"]

log = logging.getLogger("llmload.controller")

#: how long to wait for workers after a cancel before judging anyway
CANCEL_GRACE_S = 3.0
PROGRESS_EVERY_S = 5.0


class Link(Protocol):
    """How the master reaches its workers: Locust's runner (`llmload.runtime.locustglue.seams.WorkerLink`)
    or worker runtimes in this process (`llmload.runtime.virtual.link.InProcessLink`)."""

    @property
    def local(self) -> bool:
        """The users run in this process (a local runner): step messages are handled in-process."""

    def workers(self) -> list[tuple[str | None, str]]:
        """(client id, worker name) of each worker that can take a step now."""

    def missing(self, client_id: str | None) -> bool:
        """The worker `client_id` is gone (Locust marked it missing)."""

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        """Send one message (`llmload.runtime.wire.messages`) to one worker."""


class RunControl(Protocol):
    """What a step asks of the run it belongs to (`StepController`): is it stopping, end it on an error,
    cut a window at the stop."""

    @property
    def stopping(self) -> bool: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def failed(self) -> bool: ...

    def fail(self, message: str) -> None: ...

    def cut_window(self, step: Step, window_end: float | None) -> float | None: ...


@dataclass
class StepContext:
    """What every `StepRun` of a run needs, made once by the controller."""

    config: Config
    run_dir: Path
    base_dir: str
    #: the workers
    link: Link
    plan: PlanFile
    tally: StepTally
    lost: LostWorkers
    events: StepEvents
    run: RunControl
    out: Callable[[str], None] = print
    #: the live judge (`judging.live_judge`), or None: every step `insufficient`
    judge: Callable | None = None
    telemetry: Any = None
    #: the master's measurements of the workers' clocks (`clocksync.ClockSync`), or None
    clocks: Any = None
    #: the config as the step message carries it (empty: made from `config`)
    config_dict: dict = field(default_factory=dict)
    #: the master's time in seconds (`REAL_CLOCK.now`, `llmload.clocks`; a virtual clock's)
    clock: Callable[[], float] = REAL_CLOCK.now
    #: the master's sleep (`gevent.sleep`; a test's virtual sleep)
    sleep: Callable[[float], None] = REAL_CLOCK.sleep
    #: the line about back-to-back slices judged in the report was said
    said_unjudged: bool = False

    def __post_init__(self) -> None:
        if not self.config_dict:
            self.config_dict = self.config.model_dump(mode="json")

    def wait(self, event: Event, timeout_s: float) -> None:
        """Wait until `event` is set or `timeout_s` passed on the injected clock (`event.wait(timeout)`,
        with the timeout slept by `sleep`)."""
        if event.is_set():
            return
        sleeper = gevent.spawn(self.sleep, timeout_s)
        try:
            gevent.wait([event, sleeper], count=1)
        finally:
            sleeper.kill(block=False)


class StepRun:
    """One step of the run on every worker (made and driven by `StepController`)."""

    def __init__(self, ctx: StepContext, step: Step) -> None:
        self.ctx = ctx
        self.step = step
        self.spec = step.spec
        self.workers: list[tuple[str | None, str]] = []
        self.start_at = 0.0
        #: per worker name, the clock sample whose offset its step message carried (None: not measured)
        self.applied: dict[str, Any] = {}

    @property
    def label(self) -> str:
        return self.spec.label

    def launch(self, start_at: float | None, lead_s: float) -> StepRun:
        """Send the step to every worker to start at `start_at` (default: `lead_s` from now)."""
        ctx, spec, step = self.ctx, self.spec, self.step
        self.workers = ctx.link.workers()
        clocks = ctx.clocks
        if clocks is not None:  # a worker that joined since the last measurement is measured first
            clocks.measure([(cid, name) for cid, name in self.workers if clocks.latest(name) is None])
            self.applied = {name: clocks.latest(name) for _, name in self.workers}
        self.start_at = max(start_at, self.ctx.clock() + 0.05) if start_at is not None else self.ctx.clock() + lead_s
        step.bounds = bounds = step_bounds(spec, self.start_at)
        step.rows.progress.bounds = bounds  # the progress line's window TTFT p95
        ctx.tally.current = step
        if not spec.closed_loop:
            from llmload.arrivals import step_offsets

            step.offsets = step_offsets(spec)
        if ctx.telemetry is not None:
            ctx.telemetry.set_step(spec.label)
        ctx.plan.update(step, start_at=self.start_at, window_start=bounds.window_start,
                        window_end=bounds.window_end, drain_deadline=bounds.drain_deadline,
                        status=StepStatus.RUNNING, workers=len(self.workers))
        step_dict = spec.to_dict()
        for shard, (client_id, name) in enumerate(self.workers):
            applied = self.applied.get(name)
            message = StepMessage(step=spec, start_at=self.start_at, seed=spec.seed, shard=shard,
                                  shards=len(self.workers), run_dir=str(ctx.run_dir), config=ctx.config_dict,
                                  worker=name, base_dir=ctx.base_dir,
                                  clock_offset_s=applied.offset_s if applied is not None else None)
            ctx.link.send(message.TYPE, message.to_dict(step=step_dict), client_id)
        ctx.events.step_started.fire(step=step)
        return self

    @property
    def arrivals_end(self) -> float:
        return self.start_at + float(self.spec.arrivals_s or 0.0)

    def settle(self, *, threaded: bool = False) -> tuple[str, list[str], dict]:
        """Wait for the step to drain (cancel at its deadline), record it in the plan, judge it."""
        ctx, spec, step, run = self.ctx, self.spec, self.step, self.ctx.run
        cancelled = self._wait_drained(progress=not threaded)
        drained_at = self.ctx.clock()
        if not threaded and ctx.telemetry is not None and hasattr(ctx.telemetry, "sample_now"):
            try:  # the server's counters at the drained end: the step's evidence ends here (served period)
                ctx.telemetry.sample_now()
            except Exception:
                log.exception("telemetry sample at the end of %s failed", spec.label)
        if step.bounds is None:
            raise RuntimeError(f"step {spec.label} settled before it was sent")
        window_end: float | None = step.bounds.window_end if step.bounds.window_end is not None else drained_at
        if run.stopping:
            window_end = run.cut_window(step, window_end)
        lost = [name for cid, name in self.workers if name not in step.drained]
        ctx.plan.update(step, drained_at=drained_at, window_end=window_end,
                        status=StepStatus.PARTIAL if run.stopping else StepStatus.RUN, cancelled=cancelled,
                        lost_workers=lost)
        self._record_clocks(lost)
        errors = step.errors()
        if errors:
            ctx.plan.update(step, error=errors[0])
            run.fail(errors[0])
        ctx.events.step_window_ended.fire(step=step)
        if lost and not run.stopping and not spec.closed_loop:
            # judge live on what the final analysis will see: the lost workers' flushed records and a
            # `cancelled` ("worker lost") record for each of their arrivals that left none
            step.rows.extend(ctx.lost.add(step, lost, self.workers, self.start_at, step.rows))
        return self.judge(lost, threaded=threaded)

    def _record_clocks(self, lost: list[str]) -> None:
        """Measure the step's workers again and write each one's clock error for the step into plan.json
        (`ClockSync.step_clock`: the offset's uncertainty plus its drift over the step)."""
        clocks = self.ctx.clocks
        if clocks is None:
            return
        kept = [(cid, name) for cid, name in self.workers if name not in lost and not self.ctx.link.missing(cid)]
        try:
            clocks.measure(kept)
        except Exception:  # the step stands without its clock check rather than failing the run
            log.exception("measuring the workers' clocks after %s failed", self.label)
            return
        self.ctx.plan.update(self.step, clock={name: clocks.step_clock(name, self.applied.get(name))
                                               for _, name in kept})

    def _wait_drained(self, *, progress: bool = True) -> bool:
        """Block until every live worker drained the step; cancel stragglers at the deadline."""
        ctx, spec, step = self.ctx, self.spec, self.step
        arrivals_end = self.start_at + spec.arrivals_s if spec.arrivals_s is not None else None
        last_progress = self.ctx.clock()
        last_count = -1
        event = step.drain_event
        while True:
            pending = [(cid, n) for cid, n in self.workers if n not in step.drained and not ctx.link.missing(cid)]
            if not pending:
                return False
            if ctx.run.stopped or ctx.run.failed:
                # stopped (a signal), or failed (a message it could not read may have been this step's
                # drained notice, which will never come): what is queued or in flight is cancelled and
                # recorded, and a worker that does not answer within the grace is given up
                self._cancel(pending, why="the run was stopped" if ctx.run.stopped else "the run failed")
                return True
            t = self.ctx.clock()
            count = len(step.rows)
            if count != last_count:
                last_count, last_change = count, t
            deadline = (arrivals_end + spec.drain_timeout_s if arrivals_end is not None
                        else last_change + spec.drain_timeout_s)
            if t >= deadline:
                self._cancel(pending)
                return True
            if progress and t - last_progress >= PROGRESS_EVERY_S:
                last_progress = t
                self.progress()
            event.clear()
            self.ctx.wait(event, min(0.5, max(0.01, deadline - t)))

    def _cancel(self, pending: list, *, why: str = "") -> None:
        ctx, spec, step = self.ctx, self.spec, self.step
        why = why or f"drain timeout ({spec.drain_timeout_s:g}s)"
        ctx.out(f"  {spec.label}: {why}: cancelling queued and in-flight requests")
        for cid, _ in pending:
            ctx.link.send(CancelMessage.TYPE, CancelMessage(label=spec.label).to_dict(), cid)
        deadline = self.ctx.clock() + CANCEL_GRACE_S
        event = step.drain_event
        while self.ctx.clock() < deadline and any(n not in step.drained for _, n in pending):
            event.clear()
            self.ctx.wait(event, 0.2)

    def progress(self) -> None:
        """One progress line: how far into its arrivals (or its drain), done, failed, pending, TTFT p95."""
        ctx, spec, step = self.ctx, self.spec, self.step
        stats = step.rows.stats()  # folded in as the summaries arrived (`StepRecords`)
        t = self.ctx.clock()
        pending = max(0, step.planned_so_far(t) - stats["done"]) if step.planned_arrivals else 0
        ctx.out(format_progress(spec.label, t - self.start_at, spec.arrivals_s, step.planned_arrivals,
                                stats, pending, ctx.tally.server_waiting(),
                                window_ttft_p95_s=stats["window_ttft_p95_s"],
                                in_warmup=step.bounds is not None and t < step.bounds.window_start))

    def judge(self, lost: list[str], *, threaded: bool = False) -> tuple[str, list[str], dict]:
        """The step's live verdict (the live judge on the shipped summaries), its table row, its warnings."""
        ctx, spec, step = self.ctx, self.spec, self.step
        step_rows = step.rows
        # the figures folded in as the summaries arrived: a step judged in the report only is not read back
        stats = {k: v for k, v in step_rows.stats().items() if k != "window_ttft_p95_s"}
        verdict, failing = "insufficient", []
        if threaded and ctx.link.local:  # the next step's arrivals run in this process: stay light
            verdict = "unjudged"
            if not ctx.said_unjudged:
                ctx.said_unjudged = True
                ctx.out("  (slices that run back to back are judged in the report, not live: judging here "
                        "would delay the arrivals)")
        elif ctx.judge is not None:
            try:
                verdict, failing, stats = ctx.judge(step_rows, dict(step.plan_row()), ctx.config)
                from analysis.share_cv import SHARE_HISTORY  # judging imported the analysis already

                step.share_history = stats.pop(SHARE_HISTORY, None)  # the search's, not a figure
            except Exception:
                log.exception("live judging of %s failed", spec.label)
                verdict = "unjudged"
        if lost:
            failing = [*failing, f"lost worker(s) {', '.join(lost)}"]
        ctx.plan.update(step, live_verdict=verdict, live_failing=list(failing))
        step.verdict, step.failing, step.stats = verdict, list(failing), stats
        step.table_row = {**stats, **step_row(spec.label, stats, verdict, list(failing), ctx.tally.step_waiting(step))}
        ctx.events.step_judged.fire(step=step)
        ctx.tally.cpu_warning(step, failing, ctx.config)
        # judged: its summaries are done with (the records are on disk), so hours of soak slices do not
        # pile up in the master's memory
        ctx.tally.forget(step)
        ctx.events.step_finished.fire(step=step)
        return verdict, list(failing), stats
