"""One step on every worker: send it, wait for its drain (cancel at its deadline), record it, judge it.

The step controller (`llmload.runtime.controller`) makes a `StepRun` per step. `launch` sends every
worker one self-contained `llmload:step` message with an absolute `start_at`; `settle` waits for every
live worker's `llmload:drained` or the drain deadline, after which it sends `llmload:cancel` (the
workers record their in-flight requests as `cancelled`), writes the step's end into plan.json and
judges it with the live judge on the summaries the workers shipped. A worker's drained notice that
carries an error (a worker greenlet failed) ends the run after this step (`StepController.fail`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from llmload.runtime.messages import CANCEL, STEP, step_message
from llmload.runtime.table import ProgressStats, format_progress, quick_stats
from shapes.steps import StepSpec, step_bounds

if TYPE_CHECKING:
    from llmload.runtime.controller import StepController

__all__ = ["CANCEL_GRACE_S", "PROGRESS_EVERY_S", "StepRun", "plan_fields"]

log = logging.getLogger("llmload.controller")

#: how long to wait for workers after a cancel before judging anyway
CANCEL_GRACE_S = 3.0
PROGRESS_EVERY_S = 5.0


class StepRun:
    """One step of the run on every worker (made and driven by `StepController`)."""

    def __init__(self, ctl: StepController, spec: StepSpec, row: dict) -> None:
        self.ctl = ctl
        self.spec = spec
        self.row = row
        self.workers: list[tuple[str | None, str]] = []
        self.start_at = 0.0
        self.bounds: Any = None
        #: the progress line's running figures (`ProgressStats`), made at launch
        self.progress_stats: ProgressStats | None = None
        #: per worker name, the clock sample whose offset its step message carried (None: not measured)
        self.applied: dict[str, Any] = {}

    @property
    def label(self) -> str:
        return self.spec.label

    def launch(self, start_at: float | None, lead_s: float) -> StepRun:
        """Send the step to every worker to start at `start_at` (default: `lead_s` from now)."""
        ctl, spec = self.ctl, self.spec
        self.workers = ctl.link.workers()
        if ctl.clocks is not None:  # a worker that joined since the last measurement is measured first
            ctl.clocks.measure([(cid, name) for cid, name in self.workers if ctl.clocks.latest(name) is None])
            self.applied = {name: ctl.clocks.latest(name) for _, name in self.workers}
        self.start_at = max(start_at, ctl._now() + 0.05) if start_at is not None else ctl._now() + lead_s
        self.bounds = bounds = step_bounds(spec, self.start_at)
        self.progress_stats = ProgressStats(bounds)
        ctl.current = self.row
        if not spec.closed_loop:
            from llmload.arrivals import step_offsets

            ctl.tally.offsets[spec.label] = step_offsets(spec)
        if ctl.telemetry is not None:
            ctl.telemetry.set_step(spec.label)
        ctl.plan.update(self.row, start_at=self.start_at, window_start=bounds.window_start,
                        window_end=bounds.window_end, drain_deadline=bounds.drain_deadline,
                        status="running", workers=len(self.workers))
        step_dict = spec.to_dict()
        for shard, (client_id, name) in enumerate(self.workers):
            applied = self.applied.get(name)
            ctl.link.send(STEP, step_message(step=step_dict, start_at=self.start_at, seed=spec.seed, shard=shard,
                                             shards=len(self.workers), run_dir=str(ctl.run_dir),
                                             config=ctl.config_dict, worker=name, base_dir=ctl.base_dir,
                                             clock_offset_s=applied.offset_s if applied is not None else None),
                          client_id)
        return self

    @property
    def arrivals_end(self) -> float:
        return self.start_at + float(self.spec.arrivals_s or 0.0)

    def settle(self, *, threaded: bool = False) -> tuple[str, list[str], dict]:
        """Wait for the step to drain (cancel at its deadline), record it in the plan, judge it."""
        ctl, spec, row = self.ctl, self.spec, self.row
        cancelled = self._wait_drained(progress=not threaded)
        drained_at = ctl._now()
        if not threaded and ctl.telemetry is not None and hasattr(ctl.telemetry, "sample_now"):
            try:  # the server's counters at the drained end: the step's evidence ends here (served period)
                ctl.telemetry.sample_now()
            except Exception:
                log.exception("telemetry sample at the end of %s failed", spec.label)
        window_end = self.bounds.window_end if self.bounds.window_end is not None else drained_at
        if ctl.stopping:
            window_end = ctl.cut_window(row, window_end)
        lost = [name for cid, name in self.workers if name not in ctl.tally.drained[spec.label]]
        ctl.plan.update(row, drained_at=drained_at, window_end=window_end,
                        status="partial" if ctl.stopping else "run", cancelled=cancelled, lost_workers=lost)
        self._record_clocks(lost)
        errors = ctl.tally.errors(spec.label)
        if errors:
            ctl.plan.update(row, error=errors[0])
            ctl.fail(errors[0])
        if lost and not ctl.stopping and not spec.closed_loop:
            # judge live on what the final analysis will see: the lost workers' flushed records and a
            # `cancelled` ("worker lost") record for each of their arrivals that left none
            ctl.tally.rows[spec.label].extend(
                ctl.lost.add(spec, row, lost, self.workers, self.start_at, ctl.tally.rows[spec.label]))
        return self.judge(lost, threaded=threaded)

    def _record_clocks(self, lost: list[str]) -> None:
        """Measure the step's workers again and write each one's clock error for the step into plan.json
        (`ClockSync.step_clock`: the offset's uncertainty plus its drift over the step)."""
        clock = self.ctl.clocks
        if clock is None:
            return
        kept = [(cid, name) for cid, name in self.workers if name not in lost and not self.ctl.link.missing(cid)]
        try:
            clock.measure(kept)
        except Exception:  # the step stands without its clock check rather than failing the run
            log.exception("measuring the workers' clocks after %s failed", self.label)
            return
        self.ctl.plan.update(self.row, clock={name: clock.step_clock(name, self.applied.get(name))
                                              for _, name in kept})

    def _wait_drained(self, *, progress: bool = True) -> bool:
        """Block until every live worker drained the step; cancel stragglers at the deadline."""
        ctl, spec = self.ctl, self.spec
        arrivals_end = self.start_at + spec.arrivals_s if spec.arrivals_s is not None else None
        last_progress = ctl._now()
        last_count = -1
        event = ctl.tally.events[spec.label]
        while True:
            pending = [(cid, n) for cid, n in self.workers
                       if n not in ctl.tally.drained[spec.label] and not ctl.link.missing(cid)]
            if not pending:
                return False
            if ctl.stopped:  # stopped (a signal): what is queued or in flight is cancelled and recorded
                self._cancel(pending, why="the run was stopped")
                return True
            t = ctl._now()
            count = len(ctl.tally.rows[spec.label])
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
            ctl._wait(event, min(0.5, max(0.01, deadline - t)))

    def _cancel(self, pending: list, *, why: str = "") -> None:
        ctl, spec = self.ctl, self.spec
        why = why or f"drain timeout ({spec.drain_timeout_s:g}s)"
        ctl.out(f"  {spec.label}: {why}: cancelling queued and in-flight requests")
        for cid, _ in pending:
            ctl.link.send(CANCEL, {"label": spec.label}, cid)
        deadline = ctl._now() + CANCEL_GRACE_S
        event = ctl.tally.events[spec.label]
        while ctl._now() < deadline and any(n not in ctl.tally.drained[spec.label] for _, n in pending):
            event.clear()
            ctl._wait(event, 0.2)

    def progress(self) -> None:
        """One progress line: how far into its arrivals (or its drain), done, failed, pending, TTFT p95."""
        ctl, spec, row = self.ctl, self.spec, self.row
        if self.progress_stats is None:
            self.progress_stats = ProgressStats(self.bounds)
        stats = self.progress_stats.update(ctl.tally.rows[spec.label])
        t = ctl._now()
        pending = max(0, _planned_so_far(spec, self.start_at, row, t) - stats["done"]) if row.get("planned_arrivals") else 0
        ctl.out(format_progress(spec.label, t - self.start_at, spec.arrivals_s, row.get("planned_arrivals"),
                                stats, pending, ctl.tally.server_waiting(),
                                window_ttft_p95_s=stats["window_ttft_p95_s"],
                                in_warmup=self.bounds is not None and t < self.bounds.window_start))

    def judge(self, lost: list[str], *, threaded: bool = False) -> tuple[str, list[str], dict]:
        """The step's live verdict (the live judge on the shipped summaries), its table row, its warnings."""
        ctl, spec, row = self.ctl, self.spec, self.row
        step_rows = ctl.tally.rows[spec.label]
        verdict, failing, stats = "insufficient", [], quick_stats(step_rows)
        if threaded and ctl.link.local:  # the next step's arrivals run in this process: stay light
            verdict = "unjudged"
            if not ctl.said_unjudged:
                ctl.said_unjudged = True
                ctl.out("  (slices that run back to back are judged in the report, not live: judging here "
                        "would delay the arrivals)")
        elif ctl.judge is not None:
            try:
                verdict, failing, stats = ctl.judge(step_rows, dict(row), ctl.config)
            except Exception:
                log.exception("live judging of %s failed", spec.label)
                verdict = "unjudged"
        if lost:
            failing = [*failing, f"lost worker(s) {', '.join(lost)}"]
        ctl.plan.update(row, live_verdict=verdict, live_failing=list(failing))
        ctl.tally.add_judged(spec.label, spec.target_rate, row, verdict, list(failing), stats)
        ctl.tally.cpu_warning(spec.label, failing, ctl.config)
        # judged: its summaries are done with (the records are on disk), so hours of soak slices do not
        # pile up in the master's memory
        ctl.tally.forget(spec.label, row)
        return verdict, list(failing), stats


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


def _planned_so_far(spec: StepSpec, start_at: float, row: dict, t: float) -> int:
    total = row.get("planned_arrivals") or 0
    if not spec.arrivals_s:
        return total
    return int(total * min(1.0, max(0.0, (t - start_at) / spec.arrivals_s)))
