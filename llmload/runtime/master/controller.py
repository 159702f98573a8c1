"""The master's step controller: runs the plan step by step, drains, judges live, refines.

Its parts, one module each: `step` (the typed `Step`: everything the master knows of one step, and
the `StepEvents` it fires), `step_run` (one step: send, drain, cancel, judge), `shipped` (`StepTally`:
routes what the workers ship to its step), `lost_workers` (arrivals of workers lost mid-step), the knee search
(`shapes.knee_search.KneeSearch`, called from `_refine`), and `states` (`ControllerState`: its named
states, changed only in `_to`).

The controller's view for others is `steps` (the run's `Step`s in plan order) and `events`
(`step_started`, `step_window_ended`, `step_judged`, `step_finished`, `search_finished`): the live
table (`live_table.LiveTable`) and the web UI's series (`live_series.LiveSeries.listen`) listen to them.

It runs as one greenlet on the master (or the local runner), never inside `tick()` (ticks come late,
NOTES.md). For each step it sends every worker one self-contained `llmload:step` message with an
absolute `start_at` a little in the future, sleeps until the arrivals end, then waits for every
worker's `llmload:drained` or the drain deadline, after which it sends `llmload:cancel` (the workers
record their in-flight requests as `cancelled`). It judges the step with `analysis.judge_step` from
the summaries the workers shipped, prints the live table row, and goes on; after a ladder it runs the
knee search's refine steps back to back, without draining between them (`_refine`; plan.json `search`:
why it stopped, how many steps). `plan.json` is rewritten as it goes; steps not run stay `not_run`.

A step with `drain=False` (every soak slice but the last) does not pause the load: the next step is
sent so that it starts exactly when this one's arrivals end, and this one's in-flight requests finish
(or are cancelled at its own drain deadline) in a background greenlet that then judges it. When this
process also runs the users (local runner), such a step gets only its quick numbers live, verdict
`unjudged`: pandas here would hold up the next step's arrivals (send lag); the report judges it.

A greenlet of the run that fails (a worker's scheduler, reported in its `llmload:drained`; a background
drain-and-judge greenlet) ends the run after the step under way with one line (`fail`), also written
into plan.json as `error`.

When it is done it finalises the run directory (`llmload.rundir.finalise`) and sets `done`, which
makes the shape's `tick()` return None (after a short drain phase so late results are not lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event

from llmload.clocks import REAL_CLOCK
from llmload.config import Config
from llmload.rundir.plan_file import PlanFile
from llmload.runtime.master.live_table import LiveTable, format_header
from llmload.runtime.master.lost_workers import LostWorkers
from llmload.runtime.master.shipped import StepTally
from llmload.runtime.master.states import CONTROLLER_TRANSITIONS, ControllerState
from llmload.runtime.master.step import Step, StepEvents, StepStatus
from llmload.runtime.master.step_run import PROGRESS_EVERY_S, Link, StepContext, StepRun
from llmload.runtime.wire.messages import DrainedMessage, ResultsMessage
from llmload.statemachine import StateMachine
from shapes.phases import PHASES
from shapes.steps import StepSpec

__all__ = ["StepController", "search_line", "step_lead_s"]

log = logging.getLogger("llmload.controller")

#: lead time between sending a step and its first arrival (messages, clock skew, pool start). Measured
#: (bench/startup.py, bench/README.md): the step message reaches a worker and `on_step` has scheduled
#: its arrivals 1-11 ms after sending (2 processes, 512 users); planning a 36,000-arrival step takes
#: 0.15-0.2 s on a slow 2-core VM. It is wall time before every run's first request.
LEAD_S = 0.25
#: a local runner's lead for a small step: there the step message is handled in-process, so `on_step`
#: has queued the arrivals when the send returns (60 arrivals: 1 ms); the lead covers planning, about
#: 5 us per arrival (`LEAD_PER_ARRIVAL_S` allows twice that), up to `LEAD_S`. Remote or forked workers
#: (messages, clock skew) and a dataset (read when the first step builds the sender) keep `LEAD_S`.
LOCAL_LEAD_S = 0.1
LEAD_PER_ARRIVAL_S = 10e-6


def step_lead_s(spec: StepSpec, *, local: bool, dataset: bool = False) -> float:
    """The lead between sending `spec` and its first arrival (see `LEAD_S`, `LOCAL_LEAD_S`)."""
    if not local or dataset:
        return LEAD_S
    arrivals: float
    if spec.arrival == "trace":
        arrivals = len(spec.trace.offsets_s) if spec.trace is not None else 0
    elif spec.arrival == "closed":
        arrivals = int(spec.concurrency or 0)
    else:
        arrivals = float(spec.target_rate or 0.0) * (spec.warmup_s + (spec.duration_s or 0.0))
    return min(LEAD_S, LOCAL_LEAD_S + arrivals * LEAD_PER_ARRIVAL_S)


def search_line(stopped: str | None, steps: int, extensions: int = 0, *,
                search: Mapping[str, Any] | None = None) -> str:
    """The knee search's closing line: why it stopped and how many refine steps it ran (the knee itself
    is the run's answer, printed from the analysis once the run is finalised). Never a None. `search`:
    plan.json's `search`, for what the stop's phrase adds (`search_stop_text`: an `auto` shape's advice,
    what a budget stop lacked, the budget projected for the precision)."""
    from shapes.knee_search import search_stop_text, steps_text

    lead = {"no_pass": "no rate passed; ", "no_failure": "no rate failed; "}.get(stopped or "", "")
    why = search_stop_text({**(search or {}), "stopped": stopped})
    return f"  knee search: {lead}stopped: {why or 'not run'} ({steps_text(steps, extensions)})"


class StepController:
    """Runs the steps of one run on the master. `start()` spawns it; `done` is set when it ends."""

    def __init__(self, config: Config, run_dir: Path, link: Link, steps: list[StepSpec], *,
                 judge: Callable | None = None, telemetry: Any = None, out: Callable[[str], None] = print,
                 wait_ready: Callable[[], bool] | None = None, base_dir: str = ".", shape: Any = None,
                 clocks: Any = None, clock: Callable[[], float] = REAL_CLOCK.now,
                 sleep: Callable[[float], None] = REAL_CLOCK.sleep) -> None:
        self.config = config
        #: the master's measurements of the workers' clocks (`llmload.runtime.wire.clocksync.ClockSync`), or None
        self.clocks = clocks
        #: the master's time source and sleep (tests inject a virtual pair: `tests/runtime/virtual_time.py`)
        self._clock = clock
        self._sleep_fn = sleep
        #: the shape that planned the steps (`shapes.loadshapes`): it may add steps (`_refine`)
        self.shape = shape
        self.config_dict = config.model_dump(mode="json")
        self.run_dir = Path(run_dir)
        self.link = link
        self.judge = judge
        self.telemetry = telemetry
        self.out = out
        self.wait_ready = wait_ready
        self.base_dir = base_dir
        self.seed = int(config.requests.seed)
        self.tally = StepTally(self.run_dir, local=link.local, telemetry=telemetry, out=out, clock=clock,
                               slo=config.slo)
        self.plan = PlanFile(self.run_dir, kind=config.shape.kind, workers=len(link.workers()),
                             seed=self.seed, started_at=self.now())
        self.lost = LostWorkers(self.run_dir, self.plan, out)
        #: the declared events of the run's steps; the live table prints the judged steps' rows
        self.events = StepEvents()
        LiveTable(out).listen(self.events)
        #: the planned steps (added to the plan when the run starts; refine steps come later)
        self._planned = [Step(spec) for spec in steps]
        #: the run's steps in plan order, as `plan` holds them (`_add`)
        self._steps: list[Step] = []
        for step in self._planned:
            self.tally.add(step)
        #: what each step's `StepRun` needs of the run
        self.context = StepContext(config=config, run_dir=self.run_dir, base_dir=base_dir, link=link, plan=self.plan,
                                   tally=self.tally, lost=self.lost, events=self.events, run=self, out=out,
                                   judge=judge, telemetry=telemetry, clocks=self.clocks, config_dict=self.config_dict,
                                   clock=clock, sleep=sleep)
        self.done = Event()
        self._machine = StateMachine(ControllerState.WAITING, CONTROLLER_TRANSITIONS, name="steps")
        #: when the run was stopped from outside: a partial step's window ends here
        self.stopped_at: float | None = None
        #: why the run failed (a worker greenlet, a judging greenlet): one line, also in plan.json
        self.error: str | None = None
        self.greenlet: gevent.Greenlet | None = None
        #: background greenlets draining and judging `drain=False` steps, in step order
        self._tails: list[gevent.Greenlet] = []

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        """The run's time (the clock it was handed): the web UI's running numbers read it too."""
        return self._clock()

    def _sleep(self, s: float) -> None:
        self._sleep_fn(s)

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> ControllerState:
        state = self._machine.state
        assert isinstance(state, ControllerState)  # `StateMachine` holds the states it was made with
        return state

    def _to(self, state: ControllerState) -> None:
        """The one place the controller's state changes (`llmload.runtime.master.states`)."""
        self._machine.to(state)

    @property
    def stopped(self) -> bool:
        """Stopped from outside (`stop`): what is queued or in flight is being cancelled."""
        return self.state is ControllerState.STOPPED

    @property
    def stopping(self) -> bool:
        """A stop was asked for (`mark_stopping`) or done (`stop`)."""
        return self.state.stopping or self.stopped_at is not None

    @property
    def failed(self) -> bool:
        return self.state is ControllerState.FAILED

    def fail(self, message: str) -> None:
        """End the run after the step under way, with one line saying why (`message`)."""
        if self.error is None:
            self.error = message
            self.out(f"llmload: error: {message}; ending the run")
        if self.state not in (ControllerState.STOPPED, ControllerState.DONE):
            self._to(ControllerState.FAILED)

    def _link(self, greenlet: gevent.Greenlet, what: str) -> gevent.Greenlet:
        """`greenlet` failing ends the run (`fail`) instead of leaving a step to wait for its deadline."""
        def failed(g: gevent.Greenlet) -> None:
            log.error("%s failed", what, exc_info=(type(g.exception), g.exception, g.exception.__traceback__))
            self.fail(f"{what} failed ({type(g.exception).__name__}: {g.exception})")

        greenlet.link_exception(failed)
        return greenlet

    # ------------------------------------------------------------------ the steps (web UI, tests)

    @property
    def steps(self) -> list[Step]:
        """The run's steps in plan order (empty until the run starts; refine steps are appended)."""
        return self._steps

    def _add(self, step: Step) -> None:
        """Append `step` to the run's steps and to plan.json (not run yet)."""
        self._steps.append(step)
        self.plan.add(step)

    def step_of(self, label: str) -> Step:
        """The step labelled `label` (a `KeyError` when there is none)."""
        return self.tally.steps[label]

    def running(self) -> Step | None:
        """The step sent last that is still running (None when none is, or the run is done)."""
        if self.done.is_set():
            return None
        running = [s for s in self.steps if s.status is StepStatus.RUNNING]
        return running[-1] if running else None

    def on_results(self, results: ResultsMessage) -> None:
        """A batch of per-request summaries from one worker."""
        self.tally.on_results(results)

    def on_drained(self, drained: DrainedMessage) -> None:
        self.tally.on_drained(drained)
        if drained.error and not drained.label:  # a worker could not read a message naming no step
            self.fail(drained.error)

    # ------------------------------------------------------------------ the run

    def start(self) -> None:
        if self.greenlet is None:
            self.greenlet = self._link(gevent.spawn(self.run), "the step controller")

    def run(self) -> None:
        """Every planned step, then refine steps; marks the run done either way."""
        if self.state is ControllerState.WAITING:
            self._to(ControllerState.RUNNING)
        try:
            for step in self._planned:
                self._add(step)
            if self.wait_ready is not None:
                self.wait_ready()
            self.out(format_header())
            next_start: float | None = None
            failures, limit = 0, self._stop_after_failures()
            for step in self._planned:
                if self.stopping or self.failed:
                    break
                if limit is not None and failures >= limit:  # deep overload teaches nothing more
                    self._skip_after_failures(step, failures)
                    continue
                if not step.spec.drain and step.spec.arrivals_s is not None:
                    next_start = self._run_undrained(step, next_start)
                else:
                    verdict, *_ = self.run_step(step, start_at=next_start)
                    failures += verdict == "fail"
                    next_start = None
            gevent.joinall(self._tails)
            if not self.stopping and not self.failed:
                self._refine()
        except gevent.GreenletExit:
            gevent.killall([g for g in self._tails if not g.dead], block=True, timeout=5)
            raise
        except Exception:
            log.exception("step controller failed")
            self.out("llmload: error: the step controller failed (see the log); finishing the run")
        finally:
            try:
                self.lost.record_arrivals()
            except Exception:
                log.exception("could not record the arrivals of lost workers")
            extra: dict[str, Any] = {"stopped": True} if self.stopped else {}
            if self.error is not None:
                extra["error"] = self.error
            self.plan.finish(self.now(), **extra)
            self.tally.close()
            if self.state in (ControllerState.RUNNING, ControllerState.STOPPING):
                self._to(ControllerState.DONE)
            self.done.set()

    def _skip_after_failures(self, step: Step, failures: int) -> None:
        """Leave `step` `not_run`, with the reason (said once, on the first step left out)."""
        reason = f"stop_after_failures: {failures} failing step{'s' if failures > 1 else ''} before it"
        if not any(s.not_run_reason for s in self.steps):
            later = [s.label for s in self.steps[step.index:]]
            self.out(f"  {reason}: {', '.join(later)} not run (shape.ladder.stop_after_failures)")
        self.plan.update(step, not_run_reason=reason)

    def _stop_after_failures(self) -> int | None:
        """The config ladder's `stop_after_failures` when the config's ladder plans the run (no shape,
        `shapes/llm.py`'s or a built-in kind's, which has `serves`), else None: a shape of the user's own
        plans its steps itself."""
        ladder, shape = self.config.shape.ladder, self.shape
        if ladder is None or not (shape is None or getattr(shape, "follows_config", False) or hasattr(shape, "serves")):
            return None
        return ladder.stop_after_failures

    def run_step(self, step: Step, *, start_at: float | None = None) -> tuple[str, list[str], dict]:
        """Run one step on every worker, drain it, judge it; returns (verdict, failing, stats)."""
        run = StepRun(self.context, step).launch(start_at, self._lead(step.spec))
        gevent.joinall(self._tails)  # earlier undrained steps are judged first: the table stays in order
        return run.settle()

    def _lead(self, spec: StepSpec) -> float:
        return step_lead_s(spec, local=self.link.local, dataset=bool(self.config.requests.dataset))

    def _run_undrained(self, step: Step, start_at: float | None, *, judged_live: bool = False) -> float:
        """Send a `drain=False` step, return when the next step must be sent; returns the time its
        arrivals end (the next step's start). Its drain and judging go on in a background greenlet.
        `judged_live`: judged live by a local runner too (a refine step: the search needs its verdict),
        and the step before it is settled when this returns (the search's one-step lag)."""
        run = StepRun(self.context, step).launch(start_at, self._lead(step.spec))
        previous = self._tails[-1] if self._tails else None
        arrivals_end = run.arrivals_end
        last_progress = self.now()
        while not self.stopped and not self.failed and self.now() < arrivals_end - LEAD_S:
            self._sleep(min(0.5, arrivals_end - LEAD_S - self.now()))
            if self.now() - last_progress >= PROGRESS_EVERY_S:
                last_progress = self.now()
                run.progress()
        if judged_live and previous is not None:
            previous.join()  # the step before settled while this one ran (its queue drained into it)

        def settle() -> None:
            if previous is not None:
                previous.join()
            run.settle(threaded=not judged_live)

        self._tails.append(self._link(gevent.spawn(settle), f"draining and judging step {step.label}"))
        return arrivals_end

    def _refine(self) -> None:
        """The shape's search (a ladder with `refine:`): refine steps at the knee estimate over every
        judged step so far, until its interval is precise enough, the budget or `max_steps` (plan.json
        `search`, one closing line).

        The refine steps follow on without draining (a queue near the knee takes minutes to reach its
        steady state; a step that starts on an idle server reads its percentiles low): each is sent to
        start as the previous one's arrivals end, and the next rate is decided then from the steps judged
        so far, the previous one still settling (a one-step lag; the first two ask the same estimate).
        Only the last drains."""
        if self.shape is None:  # made without the shape that planned: the config's knee search
            from shapes.plan import ConfigSearch

            self.shape = ConfigSearch()
        search = self.shape.search(self.config, [s.judged_row() for s in self.steps if s.judged])
        if search is None:
            return
        if callable(getattr(search, "use_clock", None)):  # its budget on the run's clock
            search.use_clock(self._clock)
        refine: list[Step] = []  # the refine steps sent, in order
        handed = 0  # how many of them the search has been given, judged
        next_start: float | None = None
        while True:
            while not self.stopping and not self.failed and (ask := search.next_step()) is not None:
                spec = self.shape.search_step(self.config, ask.rate, index=len(self.steps), seed=self.seed,
                                              taken=[s.label for s in self.steps])
                if PHASES[spec.phase].drained:  # `auto`'s probe and placement steps: run as planned ones are
                    self._search_drained(search, Step(spec, extends=ask.extends))
                    continue
                if getattr(ask, "window_s", None) is not None:  # the search sized it (no refine.duration)
                    spec = replace(spec, duration_s=float(ask.window_s))
                step = Step(replace(spec, drain=False), extends=ask.extends)
                self.tally.add(step)
                self._add(step)
                refine.append(step)
                next_start = self._run_undrained(step, next_start, judged_live=True)
                handed = self._record_judged(search, refine, handed, keep=1)
            gevent.joinall(self._tails)  # the last step drains
            handed = self._record_judged(search, refine, handed, keep=0)
            # a precision stop the step settling then undid: the search goes on (from the drained server)
            if self.stopping or self.failed or not callable(getattr(search, "reopen", None)) or not search.reopen():
                break
            next_start = None
        if self.stopping or self.failed:
            search.stop()
        self.plan.data["search"] = search.answer.to_dict()
        self.plan.write()
        self.out(search_line(search.stopped, search.refine_steps, search.answer.extensions,
                             search=self.plan.data["search"]))
        if getattr(search, "prior_note", ""):  # refine.prior dropped: the ladder disagreed with it
            self.out(f"llmload: note: {search.prior_note}")
        self.events.search_finished.fire(answer=search.answer)

    def _search_drained(self, search: Any, step: Step) -> None:
        """A search step of a drained phase (`shape: auto`'s probe levels and placement steps): after the
        chained steps before it settled, run, drained and judged like a planned step; handed back at once."""
        gevent.joinall(self._tails)
        self.tally.add(step)
        self._add(step)
        self.run_step(step)
        search.record(step.judged_row())

    @staticmethod
    def _record_judged(search: Any, refine: list[Step], handed: int, *, keep: int) -> int:
        """Hand the search the refine steps judged since the first `handed`, all but the `keep` still
        settling; returns how many it has now."""
        while handed < len(refine) and refine[handed].judged and search.pending > keep:
            search.record(refine[handed].judged_row())
            handed += 1
        return handed

    # ------------------------------------------------------------------ stops from outside

    def mark_stopping(self) -> None:
        """A stop is coming (a signal arrived): note its time now, so that workers dying of the same
        signal before `stop()` runs end the step as `partial` at this time, not as lost workers."""
        if self.stopped_at is None:
            self.stopped_at = self.now()
        if self.state in (ControllerState.WAITING, ControllerState.RUNNING):
            self._to(ControllerState.STOPPING)

    def stop(self) -> None:
        """The run was stopped from outside: the current step is `partial`, the rest stay `not_run`.
        A partial step's measurement window ends at the stop (its planned end is kept as
        `planned_window_end`), so its rates divide by the time it ran, whichever process judges it. A step
        the controller is waiting on has its queued and in-flight requests cancelled (recorded
        `cancelled`), then the run ends as usual (`done`)."""
        self.mark_stopping()
        if not self.done.is_set():
            self._to(ControllerState.STOPPED)
        for step in self.steps:  # the current step, and undrained steps still finishing
            if step.status is StepStatus.RUNNING:
                self.plan.update(step, status=StepStatus.PARTIAL, window_end=self.cut_window(step, step.window_end))

    def cut_window(self, step: Step, window_end: float | None) -> float | None:
        """`window_end` cut at the stop (never before the window's start); the planned end is kept as
        `planned_window_end`."""
        if self.stopped_at is None:
            return window_end
        if not step.written("planned_window_end"):  # the first cut keeps the planned end (None included)
            step.planned_window_end = window_end
        end = self.stopped_at if window_end is None else min(window_end, self.stopped_at)
        start = step.window_start
        return max(end, start) if start is not None else end
