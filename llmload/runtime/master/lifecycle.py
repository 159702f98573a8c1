"""One run on the master (or the local runner), apart from Locust: start, stop(reason), finalise.

`Session` (the Locust adapter, `llmload.runtime.locustglue.session`) turns each Locust event or signal into one
call here; everything Locust-specific it needs goes through a `RunHost` (the runner, the web UI, the
process exit code), so the whole lifecycle runs in tests with a fake host and a virtual clock.

    start()       test_start: a run directory, then a greenlet: pre-flight, manifest, telemetry, the
                  `StepController`, finalisation and the exit code
    stop(reason)  one of `StopReason`: what each does is in its docstring
    finalise()    the run directory's merge, analysis and report, once (`finish.finalise_run`)

The run's named states (`RunState`: IDLE -> PREFLIGHT -> RUNNING [-> STOPPING] -> FINALISING -> DONE,
FAILED from anywhere) and why it was stopped (`RunStop`: the first reason, the stop signal, Locust
quitting) are its `RunMachine`'s, changed only in `_to` and `stop`. A stop waits for the state to settle
(a finalisation under way ends) before Locust exits, so the run directory is always complete.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gevent

from llmload.clocks import REAL_CLOCK
from llmload.config import Config
from llmload.errors import LLMLoadError, interrupted_exit_code
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.states import RunMachine, RunState, RunStop, StopReason
from llmload.runtime.master.step_run import Link

#: `StopReason` is declared beside the run's states (`llmload.runtime.master.states`) and named here too
__all__ = ["RunHost", "RunLifecycle", "RunOptions", "StopReason"]

log = logging.getLogger("llmload.session")


@dataclass
class RunOptions:
    """What the command line says about a run (Locust's parsed options, read by `Session`)."""

    #: the config file (relative paths in it resolve from its folder)
    config_path: str = ""
    #: --llmload-run-dir (empty: a new directory under the config's `output:`)
    run_dir: str = ""
    skip_preflight: bool = False
    #: draw report.html (False: summary.json only, `llmload calibrate`)
    report: bool = True


class RunHost(Protocol):
    """What the lifecycle needs from the process that runs it (Locust's runner and web UI, via `Session`)."""

    @property
    def web(self) -> bool:
        """A web UI serves this process: finalise in a thread (it answers meanwhile), end by closing it."""

    @property
    def remote_users(self) -> bool:
        """The users run in other processes (a master): their cancellations arrive as messages."""

    @property
    def launched(self) -> bool:
        """`llmload run` started this process: it said a stop signal itself, naming the user's signal."""

    def exit_note(self, code: int) -> str:
        """The end of the run's last line: ` (exit code N)` (`llmload demo`: the verdict in words)."""

    def link(self) -> Link:
        """The workers, for the controller."""

    def pool_ready(self) -> bool:
        """Locust has spawned the user pool."""

    def plan_shape(self, config: Config) -> tuple[Any, str | None]:
        """The shape that plans the run (`shapes.loadshapes.planning_shape`), and the config's shape kind
        it replaces (a locustfile's own shape; None: the config's shape plans the run)."""

    def stop_users(self) -> None:
        """Stop the users (Locust's `runner.stop()`: fires test_stopping and test_stop)."""

    def quit_soon(self) -> None:
        """End Locust shortly (`runner.quit()` from a new greenlet)."""

    def close_web_ui(self) -> None:
        """Stop the web UI (Locust's main greenlet waits on it: it returns and shuts down)."""

    def exit(self, code: int) -> None:
        """End the process now with `code` (no shape will end it: e.g. a master waiting for workers)."""

    def set_exit_code(self, code: int) -> None:
        """The code Locust exits with."""


class RunLifecycle:
    """One process's runs: `start`, `stop(reason)`, `finalise`; `state` says where it is."""

    def __init__(self, host: RunHost, *, clock: Callable[[], float] = REAL_CLOCK.now,
                 sleep: Callable[[float], None] = REAL_CLOCK.sleep) -> None:
        self.host = host
        self._clock = clock
        self._sleep_fn = sleep
        #: this run's config (the file's, with the start form applied; pre-flight may add tokens_per_word)
        self.config: Config | None = None
        #: what the start form (or --llmload-rates / --llmload-slo) changed for this run
        self.overrides: dict = {}
        self.options = RunOptions()
        self.run_dir: Path | None = None
        #: the finished run's `verdict` and answer `sentences` (the web UI shows them)
        self.outcome: dict = {}
        self.controller: StepController | None = None
        self.telemetry: Any = None
        #: the master's measurements of its workers' clocks (`llmload.runtime.wire.clocksync`); None elsewhere
        self.clocksync: Any = None
        #: the shape that plans the run (`shapes.loadshapes.planning_shape`), once planned
        self.shape: Any = None
        self.exit_code: int | None = None
        self.greenlet: gevent.Greenlet | None = None
        #: called with each run's `StepController` once made, before it runs (the web UI's series listen)
        self.on_controller: Callable[[StepController], None] | None = None
        #: the run's state and why it was stopped (`stopped_by`): changed only in `_to` and `stop`
        self._machine = RunMachine()

    # ------------------------------------------------------------------ time and state

    def _now(self) -> float:
        return self._clock()

    def _sleep(self, s: float) -> None:
        self._sleep_fn(s)

    @property
    def state(self) -> RunState:
        return self._machine.state

    def _to(self, state: RunState) -> None:
        """The one place the run's state changes (`llmload.runtime.master.states`)."""
        self._machine.to(state)

    @property
    def stopped_by(self) -> RunStop | None:
        """Why the run was stopped from outside (the first reason, the stop signal, Locust quitting); None
        while it was not."""
        return self._machine.stop

    @property
    def settled(self) -> bool:
        """No run is under way or being finalised (`RunState.settled`)."""
        return self._machine.settled

    @property
    def finished(self) -> bool:
        """The run is over (DONE or FAILED): the shape's tick returns None and Locust ends."""
        return self.state.over

    @property
    def running(self) -> bool:
        """A run's greenlet (pre-flight, steps, finalisation) is under way."""
        return self.greenlet is not None and not self.greenlet.dead

    @property
    def _finalised(self) -> bool:
        """Finalisation began (or the run ended without one): nothing may finalise it again."""
        return self.state in (RunState.FINALISING, RunState.DONE, RunState.FAILED) or self._old_run

    @property
    def _old_run(self) -> bool:
        """IDLE after a finished run (a new shaped run is starting): the controller is the last run's."""
        return self.state is RunState.IDLE and self.controller is not None

    def new_run(self) -> None:
        """A shaped run is starting: a finished earlier run (web UI: Stop, then Start) must not end it."""
        if self.state is RunState.DONE and self.config is not None:
            self._to(RunState.IDLE)

    def watch(self, greenlet: gevent.Greenlet, what: str) -> gevent.Greenlet:
        """`greenlet` failing ends the run with one line naming `what` (never a run left waiting)."""
        greenlet.link_exception(lambda g: self._greenlet_failed(what, g))
        return greenlet

    def _greenlet_failed(self, what: str, greenlet: gevent.Greenlet) -> None:
        exc = greenlet.exception
        log.error("%s failed", what, exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
        if not self.finished:
            self.fail(f"{what} failed: {type(exc).__name__}: {exc}", 3)

    def fail(self, message: str, code: int) -> None:
        """End the run (or the process before any run) with one line and exit code `code`."""
        print(f"llmload: error: {message}", file=sys.stderr, flush=True)
        self._set_exit_code(code)
        self._to(RunState.FAILED)
        self.host.quit_soon()

    def _set_exit_code(self, code: int) -> None:
        self.exit_code = code
        self.host.set_exit_code(code)

    # ------------------------------------------------------------------ start

    def start(self, options: RunOptions) -> None:
        """test_start: this run's directory, then pre-flight, the steps and finalisation in a greenlet."""
        if self.config is None or self.running:
            return
        from llmload.rundir.layout import new_run_dir

        self.options = options
        self.outcome = {}
        from llmload.diskfull import reset_dropped

        reset_dropped()  # what an earlier run in this process dropped is not this run's
        self.controller = None  # the last run's, until this run's is made
        given = options.run_dir
        if given and self.run_dir is None and not (Path(given) / "plan.json").exists():
            self.run_dir = Path(given)
        else:
            self.run_dir = new_run_dir(self.config)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # e.g. `output:` names a file: one line, before anything runs
            self.run_dir = None
            self.fail(f"cannot write the run directory: {exc.strerror or exc}: {exc.filename or ''}", 2)
            return
        self._to(RunState.PREFLIGHT)  # a new run: no stop noted yet
        self.greenlet = self.watch(gevent.spawn(self._run_guarded), "the run")

    def _run_guarded(self) -> None:
        """`_run`, with any unexpected error ending the run (never a hung shape waiting forever)."""
        try:
            self._run()
        except gevent.GreenletExit:
            self._ended_before_running()
            raise
        except Exception as exc:
            log.exception("the run failed")
            if self.controller is not None and not self._finalised:
                try:
                    self.finalise()
                    return
                except Exception:
                    log.exception("finalisation after a failure failed")
            self.fail(f"the run failed: {type(exc).__name__}: {exc}", 3)

    def _run(self) -> None:
        from llmload.runtime.master.preflight import (
            PreflightFailed,
            preflight,
            start_telemetry,
            write_run_manifest,
        )

        if self.config is None or self.run_dir is None:
            raise RuntimeError("a run started without its config or run directory")
        config, run_dir = self.config, self.run_dir
        print(f"llmload: run directory {run_dir}", flush=True)
        try:
            checks = {} if self.options.skip_preflight else preflight(config, run_dir, clock=self._clock)
        except PreflightFailed as exc:
            self.fail(str(exc), exc.exit_code)
            return
        if checks.get("tokens_per_word"):  # measured with the server's /tokenize: every worker uses it
            requests = config.requests.model_copy(update={"tokens_per_word": checks["tokens_per_word"]})
            config = self.config = config.model_copy(update={"requests": requests})
        base_dir = Path(self.options.config_path).resolve().parent
        try:
            self.shape, replaced = self.host.plan_shape(config)
            steps = self.shape.plan(config, base_dir=base_dir)
        except LLMLoadError as exc:
            self.fail(str(exc), exc.exit_code)
            return
        from llmload.telemetry.manifest import shape_record

        if self.clocksync is not None:  # at join: every worker's clock, before anything is scheduled
            self.clocksync.reset()
            self.clocksync.measure(self.host.link().workers())

        if replaced:  # a locustfile's own shape plans the run: the config's `shape:` is not what runs
            print(f"llmload: note: the locustfile's shape {type(self.shape).__name__} plans this run "
                  f"({len(steps)} steps); the config's shape ({replaced}) is not used", flush=True)
        from shapes.duration import plan_duration

        print(f"llmload: plan: {plan_duration(config, steps, search=not replaced).line()}", flush=True)
        from shapes.samples import sample_lines

        for line in sample_lines(config, steps):
            print(f"llmload: {line}", flush=True)
        try:
            write_run_manifest(config, run_dir, checks=checks, config_path=self.options.config_path,
                               workers=len(self.host.link().workers()), overrides=self.overrides,
                               shape=shape_record(self.shape, steps, replaced_kind=replaced))
        except Exception as exc:  # the run can go on; the report will say the manifest is missing
            log.exception("manifest not written")
            print(f"llmload: warning: manifest.json not written: {exc}", flush=True)
        self._record_clocks()
        self.telemetry = start_telemetry(config, run_dir)
        from llmload.runtime.master.judging import live_judge

        recent = getattr(self.telemetry, "recent", None)
        self.controller = StepController(config, run_dir, self.host.link(), steps,
                                         judge=live_judge(run_dir, recent), telemetry=self.telemetry,
                                         wait_ready=self._wait_pool, base_dir=str(base_dir), shape=self.shape,
                                         clocks=self.clocksync, clock=self._clock, sleep=self._sleep_fn)
        self.controller.plan.data["shape"] = type(self.shape).__name__
        if self.on_controller is not None:
            self.on_controller(self.controller)
        self._to(RunState.RUNNING)
        self.controller.run()
        self.finalise()

    def _ended_before_running(self) -> None:
        """The run's greenlet was ended in pre-flight (a stop): nothing ran, nothing to finalise (DONE)."""
        if self.controller is None and self.state is RunState.PREFLIGHT:
            self._to(RunState.DONE)

    def _wait_pool(self, timeout_s: float = 60.0) -> bool:
        """Wait until Locust has spawned the user pool (the first arrivals need free users)."""
        deadline = self._now() + timeout_s
        while self._now() < deadline:
            if self.host.pool_ready():
                return True
            self._sleep(0.05)
        return False

    # ------------------------------------------------------------------ finalise

    def finalise(self) -> None:
        """Merge, analyse and report the run directory, once; sets the exit code (`_write_final`)."""
        config, run_dir = self.config, self.run_dir
        if self._finalised or config is None or run_dir is None:
            return
        self._to(RunState.FINALISING)
        try:
            self._record_clocks()  # the workers' clocks over the whole run, before the report reads the manifest
            self._write_final(config, run_dir)
        except BaseException:  # never left finalising: a stop waiting for the run to settle would wait forever
            self._to(RunState.FAILED)
            raise

    def _record_clocks(self) -> None:
        """manifest.json's `clocks`: each worker's offset, uncertainty and drift so far (a master only)."""
        if self.clocksync is None or self.run_dir is None:
            return
        from llmload.telemetry.manifest import record_clocks

        try:
            record_clocks(self.run_dir, self.clocksync.clocks_record())
        except Exception:
            log.exception("clocks not recorded in manifest.json")

    def _write_final(self, config: Config, run_dir: Path) -> None:
        if self.telemetry is not None:
            try:
                # one last sample now, after the last step drained: the polling loop's latest may be an
                # interval older than `drained_at`
                self.telemetry.sample_now()
                self.telemetry.stop()
            except Exception:
                log.exception("telemetry stop failed")
        from llmload.rundir.finalise import finalise_run

        report = self.options.report
        tally = getattr(self.controller, "tally", None)
        finished = getattr(tally, "finished", None)
        closing: list[str] = []  # what the disk had no room for, unless a full-disk error line said it
        try:
            if self.host.web:  # in a thread: the web UI answers meanwhile
                if report:  # matplotlib's first import lists the fonts with a subprocess, which gevent's
                    # patched subprocess can only start on the loop's own thread: import it here
                    import matplotlib.font_manager  # noqa: F401

                code = gevent.get_hub().threadpool.apply(finalise_run, (run_dir, config),
                                                         {"report": report, "outcome": self.outcome,
                                                          "finished": finished, "closing": closing})
            else:
                code = finalise_run(run_dir, config, report=report, outcome=self.outcome,
                                    finished=finished, closing=closing)
        except Exception as exc:
            log.exception("finalisation failed")
            print(f"llmload: error: could not finalise {run_dir}: {exc}", file=sys.stderr, flush=True)
            code = 3
        if getattr(self.controller, "error", None) is not None:  # ended early on an error of ours (said then)
            code = 3
        signo = self._machine.signo
        if signo is not None:  # stopped by a signal: the code says so (the summary has the verdict)
            code = interrupted_exit_code(signo)
        self._set_exit_code(code)
        said = "" if signo is not None and self.host.launched else self.host.exit_note(code)
        # the closing line names only a file that is there (a failed report or summary was said already)
        written = next((run_dir / name for name in (("report.html",) if report else ()) + ("summary.json",)
                        if (run_dir / name).exists()), None)
        if written is not None:
            print(f"llmload: {'report' if written.name == 'report.html' else 'summary'} {written}"
                  f"{''.join(f'; {d}' for d in closing)}{said}", flush=True)
        self._to(RunState.DONE)

    # ------------------------------------------------------------------ stop

    def stop(self, reason: StopReason, *, signo: int | None = None) -> None:
        """Stop the run from outside for `reason` (`StopReason` says what each does); `signo` with SIGNAL.
        The stop is noted in the run's `RunMachine` (`stopped_by`); a signal's number once it stops the run."""
        if reason is not StopReason.SIGNAL:
            self._machine.stopped(reason)
        if reason is StopReason.WEB_STOP:
            self._stop_controller_first()
        elif reason is StopReason.USERS_STOPPED:
            self._users_stopped()
        elif reason is StopReason.QUITTING:
            self._quit()
        elif reason is StopReason.SIGNAL:
            if signo is None:
                raise ValueError("stop(StopReason.SIGNAL) needs the signal number")
            self._on_signal(signo)
        else:
            raise ValueError(f"unknown stop reason {reason!r}")

    def _stop_controller_first(self) -> None:
        """WEB_STOP: stop the controller now, before the users are stopped (a master first waits for its
        workers' users)."""
        if self.controller is None or self.controller.done.is_set() or self._finalised:
            return
        self._to(RunState.STOPPING)
        self.controller.stop()

    def _users_stopped(self) -> None:
        """USERS_STOPPED: keep what ran, finalise (unless the controller, stopped by WEB_STOP, already
        ended and the run finalised itself)."""
        if self.controller is None or self._finalised:
            return
        if self.state is not RunState.STOPPING:
            if self.controller.done.is_set():  # the run ended by itself: it finalises itself
                return
            self._to(RunState.STOPPING)  # a stop that did not announce itself
            self.controller.stop()
        if self.greenlet is not None and self.greenlet is not gevent.getcurrent():
            self.greenlet.kill(block=True, timeout=5)  # never inside `finalise`: that sets `_finalised` first
        if self._finalised:
            return
        if self.host.remote_users:
            self._sleep(1.0)  # remote users' cancellations arrive; the worker files are flushed
        self.controller.plan.finish(self._now(), stopped=True)
        self.finalise()

    def _quit(self) -> None:
        """QUITTING: stop the users first, so their in-flight requests are recorded as cancelled, and
        finalise (or wait for a finalisation under way) before Locust reads the exit code (`stop` noted
        that Locust is quitting: it closes its web UI itself)."""
        self._sleep(0)  # Locust's SIGTERM handler runs beside ours: let ours take the stop first
        if self._machine.signo is not None:
            pass  # `_stop_and_quit` is stopping the run; wait for it below
        elif self.controller is not None and not self._finalised:
            self.host.stop_users()  # fires test_stop -> stop(USERS_STOPPED) finalises
        elif self.controller is None and self.greenlet is not None and not self.greenlet.dead:
            self.greenlet.kill(block=True, timeout=5)  # in pre-flight: nothing ran, nothing to finalise
            self._ended_before_running()
        self._machine.wait_settled()

    def _on_signal(self, signo: int) -> None:
        """SIGNAL: the first one stops the run (`_stop_and_quit`); repeated ones only say that
        finalisation goes on; one after the run ended leaves with the run's own exit code."""
        name = signal.Signals(signo).name
        if self._machine.signo is not None:
            print(f"llmload: {name} again: still finishing the run directory (it is written before Locust "
                  "exits)", flush=True)
            return
        if self.finished and self.exit_code is not None:
            # the run is over (the web UI stays up after it): nothing to cancel; leave with its verdict
            self.watch(gevent.spawn(self._quit_after_the_run), "closing after the run")
            return
        self._machine.stopped(StopReason.SIGNAL, signo=signo)
        if self.controller is not None:  # first: workers that die of the same signal are a stop, not a loss
            self.controller.mark_stopping()
            if self.state is RunState.RUNNING:  # the controller is frozen: the run is stopping
                self._to(RunState.STOPPING)
        if not self.host.launched:  # `llmload run` said it already, naming the user's signal
            print(f"llmload: {name}: stopping the run (in-flight requests are recorded as cancelled; the run "
                  "directory is finalised)", flush=True)
        self.watch(gevent.spawn(self._stop_and_quit, signo), "stopping the run")

    def _quit_after_the_run(self) -> None:
        """A stop signal once the run has finished (`--web`: the UI stays up): end Locust with the run's
        own exit code (its verdict), as a headless run would have."""
        if self.exit_code is not None:
            self.host.set_exit_code(self.exit_code)
        if self.host.web and not self._machine.quitting:
            self.host.close_web_ui()

    def _stop_and_quit(self, signo: int) -> None:
        """Stop the run (`StepController.stop`: what is queued or in flight is cancelled, the run then
        finalises as usual), wait for the finalisation, then end Locust with 128 + the signal number."""
        code = interrupted_exit_code(signo)
        greenlet, controller = self.greenlet, self.controller
        started = greenlet is not None
        if greenlet is not None and controller is None:  # still in pre-flight: nothing ran, nothing to finalise
            greenlet.kill(block=True, timeout=5)
            self._ended_before_running()
        elif controller is not None and not self._finalised and not controller.done.is_set():
            # the controller cancels what is queued or in flight (recorded `cancelled`) and ends; the
            # run finalises as usual and the shape ends. (Locust's runner.stop() would race its own
            # quit on a master, which then waits 60 s for workers it has told to quit.)
            controller.stop()
        self._machine.wait_settled()  # a finalisation under way (the run's own, or the stop's) ends first
        self._set_exit_code(code)
        if not self.finished:  # stopped before anything ran: nothing to finalise
            self._to(RunState.DONE)
        if self.host.web and not self._machine.quitting:
            self.host.close_web_ui()
        elif not started:  # e.g. a master waiting for its workers: no shape will end this process
            self.host.exit(code)
        # headless, run started: the shape's tick returns None now and Locust shuts down by itself
