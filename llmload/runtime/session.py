"""The glue between Locust and the runtime, for one Locust process (master, worker or local).

`locustfiles/llm.py` calls `add_options` from `init_command_line_parser` and `on_init` from `init`,
which puts this process's `Session` on the Locust environment (`environment.llmload_session`; read it
with `session_of(environment)`): users reach it as `self.environment`, the shape as
`self.runner.environment`. The run's named states (`RunState`) change only in `Session._to`. What
happens where:

- worker or local runner: a `WorkerRuntime` answers `llmload:step` / `llmload:cancel`;
- master or local runner: the config named by `--llmload-config` is validated at init (a config error
  is one line and exit code 2), and on `test_start` a greenlet runs pre-flight, writes the manifest,
  starts telemetry, runs the `StepController`, then finalises the run directory and sets the exit code;
- master or local runner: SIGINT, SIGTERM and SIGHUP stop the run (what is queued or in flight is
  cancelled and recorded), finalise it and end Locust with 128 + the signal number; repeated signals
  only say that finalisation goes on (docs/ARCHITECTURE.md "Signals and the process tree").

Nothing here reads the worker's own options when a step arrives: the step message carries it all.

A worker that joins a master may be sent its spawn message while `setup` still runs (anything that
yields to gevent lets Locust's receiving greenlet spawn users): `setup` makes the `WorkerRuntime` before
anything that can yield, and users reach it through `worker_of(environment)`, which waits for it
rather than ever seeing a missing worker.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import weakref
from pathlib import Path
from typing import Any

import gevent
import gevent.event

from llmload.clock import now
from llmload.config import Config, load_config
from llmload.errors import LLMLoadError
from llmload.redaction import install_console_redaction
from llmload.runtime import console
from llmload.runtime.controller import StepController, WorkerLink
from llmload.runtime.launcher import new_run_dir
from llmload.runtime.messages import CANCEL, DRAINED, RESULTS, STEP
from llmload.runtime.pool import UNCAPPED_POOL, pool_size  # noqa: F401 (re-exported)
from llmload.runtime.signals import (
    LAUNCHED_ENV,
    STOP_SIGNALS,
    detach_hung_up_terminal,
    follow_parent,
    interrupted_exit_code,
)
from llmload.runtime.states import RUN_TRANSITIONS, RunState, StateMachine
from llmload.runtime.worker import WorkerRuntime

__all__ = ["SESSION_ATTR", "Session", "add_options", "current", "new_run_dir", "on_init", "pool_size",
           "pool_tick", "new_shape_run", "pool_user_classes", "register_user_classes", "session_of", "user_class",
           "worker_of"]

#: the Locust environment's attribute that holds this process's session
SESSION_ATTR = "llmload_session"

log = logging.getLogger("llmload.session")

class _QuietSpawnWarning(logging.Filter):
    """Drops Locust's warning about a spawn rate above 100/s: our users start idle, all at once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


def _quiet_spawn_warning() -> None:
    runners_log = logging.getLogger("locust.runners")
    if not any(isinstance(f, _QuietSpawnWarning) for f in runners_log.filters):
        runners_log.addFilter(_QuietSpawnWarning())


def add_options(parser: Any) -> None:
    """Our Locust options, typed with non-None defaults (they travel to workers and show in the web UI)."""
    from llmload.runtime.workerauth import install

    install()  # before Locust makes its runner: workers prove the worker token (llmload.runtime.workerauth)
    group = parser.add_argument_group("llmload")
    group.add_argument("--llmload-config", type=str, default="", help="llmload run configuration (YAML)")
    group.add_argument("--llmload-run-dir", type=str, default="",
                       help="run directory (default: a new <output>/<UTC time>-<shape> directory)")
    group.add_argument("--llmload-skip-preflight", action="store_true", default=False,
                       help="skip the pre-flight checks (reachability, model, quality cases)")
    group.add_argument("--llmload-no-report", action="store_true", default=False,
                       help="write summary.json but not report.html (`llmload calibrate`; `llmload report` "
                            "draws it later)")
    # live Prometheus metrics (`llmload.runtime.prom`), not in the start form: the process serves them
    parser.add_argument("--llmload-metrics-port", type=int, default=0, include_in_web_ui=False,
                        help="master: serve live Prometheus metrics on this port (/metrics; 0: not served)")
    parser.add_argument("--llmload-metrics-host", type=str, default="127.0.0.1", include_in_web_ui=False,
                        help="master: the address --llmload-metrics-port binds (loopback by default)")
    from llmload.runtime.webform import add_form_options

    add_form_options(parser)  # the run's rates and SLO, shown and editable in the web UI's start form


class Session:
    """The runtime state of this Locust process."""

    def __init__(self, environment: Any) -> None:
        self.env = environment
        self.config: Config | None = None
        #: the config file as loaded (the start form's rates and SLO apply to it for each run)
        self.file_config: Config | None = None
        #: what the start form (or --llmload-rates / --llmload-slo) changed for this run
        self.overrides: dict = {}
        #: the finished run's `verdict` and answer `sentences` (the web UI shows them)
        self.outcome: dict = {}
        #: the web UI's live series (`llmload.runtime.live.LiveSeries`), fed with shipped summaries
        self.live: Any = None
        #: the live Prometheus metrics (`llmload.runtime.prom.LiveMetrics`) with --web or a metrics port
        self.metrics: Any = None
        self.metrics_registry: Any = None
        self.config_path: str = ""
        self.run_dir: Path | None = None
        self.worker: WorkerRuntime | None = None
        #: set once `worker` exists (users wait on it: `worker_of`)
        self.worker_ready = gevent.event.Event()
        self.controller: StepController | None = None
        self.telemetry: Any = None
        #: the master's measurements of its workers' clocks (`llmload.runtime.clocksync`); None elsewhere
        self.clocksync: Any = None
        self._machine = StateMachine(RunState.IDLE, RUN_TRANSITIONS, name="run")
        self.exit_code: int | None = None
        self.greenlet: gevent.Greenlet | None = None
        #: the shape that plans the run (`shapes.loadshapes.planning_shape`), once planned
        self.shape: Any = None
        #: set while no run is under way or being finalised: a stop waits on it before Locust exits
        self._settled = gevent.event.Event()
        self._settled.set()
        #: the first stop signal received (SIGINT, SIGTERM, SIGHUP), None while none came
        self.stop_signal: int | None = None
        self._signal_handles: list[Any] = []
        self._quitting = False

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> RunState:
        return self._machine.state

    def _to(self, state: RunState) -> None:
        """The one place the run's state changes (`llmload.runtime.states`)."""
        self._machine.to(state)

    @property
    def finished(self) -> bool:
        """The run is over (DONE or FAILED): the shape's tick returns None and Locust ends."""
        return self.state.over

    @property
    def _finalised(self) -> bool:
        """Finalisation began (or the run ended without one): nothing may finalise it again."""
        return self.state in (RunState.FINALISING, RunState.DONE, RunState.FAILED) or self._old_run

    @property
    def _old_run(self) -> bool:
        """IDLE after a finished run (a new shaped run is starting): the controller is the last run's."""
        return self.state is RunState.IDLE and self.controller is not None

    def _link(self, greenlet: gevent.Greenlet, what: str) -> gevent.Greenlet:
        """`greenlet` failing ends the run with one line naming `what` (never a run left waiting)."""
        greenlet.link_exception(lambda g: self._greenlet_failed(what, g))
        return greenlet

    def _greenlet_failed(self, what: str, greenlet: gevent.Greenlet) -> None:
        exc = greenlet.exception
        log.error("%s failed", what, exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
        if not self.finished:
            self._fail(f"{what} failed: {type(exc).__name__}: {exc}", 3)

    # ------------------------------------------------------------------ roles

    @property
    def is_master(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self.env.runner, MasterRunner)

    @property
    def is_worker(self) -> bool:
        from locust.runners import WorkerRunner

        return isinstance(self.env.runner, WorkerRunner)

    def setup(self) -> None:
        runner = self.env.runner
        if runner is None:
            return
        if not self.is_master:  # first, before anything that can yield: users may already be spawning
            self.worker = WorkerRuntime(runner.send_message, build_sender=_build_sender)
            self.worker_ready.set()
        install_console_redaction()  # the key, once read, never reaches the terminal or Locust's log
        _quiet_spawn_warning()
        if not self.is_master:
            runner.register_message(STEP, lambda environment, msg, **kw: self.worker.on_step(msg.data))
            runner.register_message(CANCEL, lambda environment, msg, **kw: self.worker.on_cancel(msg.data),
                                    concurrent=True)
            self.env.events.test_stop.add_listener(lambda **kw: self.worker.close())
            if self.is_worker:
                from llmload.runtime import clocksync

                runner.register_message(clocksync.PING, lambda environment, msg, **kw: clocksync.answer_ping(
                    msg.data, runner.send_message))
        if not self.is_worker:
            runner.register_message(RESULTS, self._on_results)
            runner.register_message(DRAINED, self._on_drained)
            if self.is_master:
                from llmload.runtime.clocksync import PONG, ClockSync

                link = WorkerLink(runner)
                self.clocksync = ClockSync(link.send)
                runner.register_message(PONG, lambda environment, msg, **kw: self.clocksync.on_pong(msg.data))
            self._load_config()
            self.env.events.test_start.add_listener(self._on_test_start)
            self.env.events.test_stopping.add_listener(self._on_test_stopping)
            self.env.events.test_stop.add_listener(self._on_test_stop)
            self.env.events.quitting.add_listener(self._on_quitting)
            self._install_stop_signals()
            if getattr(self.env, "web_ui", None) is not None:
                from llmload.runtime.webui import install_web_ui

                install_web_ui(self.env, self)
            self._serve_metrics()

    def _serve_metrics(self) -> None:
        """Live `/metrics` (`llmload.runtime.prom`): on the web UI's app, and on --llmload-metrics-port."""
        options = self.env.parsed_options
        port = int(getattr(options, "llmload_metrics_port", 0) or 0)
        web_ui = getattr(self.env, "web_ui", None)
        if not port and web_ui is None:
            return
        from llmload.runtime import prom

        self.metrics = prom.install(self)
        if web_ui is not None:
            prom.add_route(web_ui.app, self.metrics_registry, web_ui.auth_required_if_enabled)
        if port:
            host = str(getattr(options, "llmload_metrics_host", "") or "127.0.0.1")
            try:
                prom.serve(self.metrics_registry, host, port)
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                self._fail(f"--metrics-port {port}: cannot listen on {host}:{port}: {reason}", 2)

    def _load_config(self) -> None:
        options = self.env.parsed_options
        self.config_path = getattr(options, "llmload_config", "") if options else ""
        if not self.config_path:
            self._fail("no run configuration: pass --llmload-config FILE", 2)
            return
        try:
            self.config = self.file_config = load_config(self.config_path)
            self._apply_form()
        except LLMLoadError as exc:
            self._fail(str(exc), exc.exit_code)

    def _apply_form(self) -> None:
        """This run's config: the file's, with `--llmload-rates` / `--llmload-slo` (the start form) applied."""
        from llmload.runtime.webform import RATES, SLO_OPTION, apply_form

        options = self.env.parsed_options
        self.config, self.overrides = apply_form(self.file_config, str(getattr(options, RATES, "") or ""),
                                                 str(getattr(options, SLO_OPTION, "") or ""),
                                                 str(getattr(self.env, "host", "") or ""))

    def _fail(self, message: str, code: int) -> None:
        print(f"llmload: error: {message}", file=sys.stderr, flush=True)
        self.exit_code = code
        self.env.process_exit_code = code
        self._to(RunState.FAILED)
        self._settled.set()
        runner = self.env.runner
        if runner is not None:
            gevent.spawn_later(0.05, runner.quit)

    # ------------------------------------------------------------------ master: the run

    def _on_results(self, environment: Any, msg: Any, **kw: Any) -> None:
        if self.controller is not None:
            self.controller.on_results(msg.data)
        if self.live is not None:
            self.live.add_rows(msg.data.get("rows", []))
        if self.metrics is not None:
            self.metrics.add_rows(msg.data.get("rows", []))

    def _on_drained(self, environment: Any, msg: Any, **kw: Any) -> None:
        if self.controller is not None:
            self.controller.on_drained(msg.data)

    def _on_test_start(self, **kw: Any) -> None:
        if self.config is None or (self.greenlet is not None and not self.greenlet.dead):
            return
        try:
            self._apply_form()  # the web UI's form may have changed the rates or the SLO since the last run
        except LLMLoadError as exc:  # checked when the form was posted; a bad value here ends the run
            self._fail(str(exc), exc.exit_code)
            return
        self.outcome = {}
        self.controller = None  # the last run's, until this run's is made
        if self.live is not None:
            self.live.reset(self.config.slo)
        options = self.env.parsed_options
        given = getattr(options, "llmload_run_dir", "") if options else ""
        if given and self.run_dir is None and not (Path(given) / "plan.json").exists():
            self.run_dir = Path(given)
        else:
            self.run_dir = new_run_dir(self.config)
        self._install_stop_signals()  # Locust put its own SIGTERM handler in place after init
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # e.g. `output:` names a file: one line, before anything runs
            self.run_dir = None
            self._fail(f"cannot write the run directory: {exc.strerror or exc}: {exc.filename or ''}", 2)
            return
        self._to(RunState.PREFLIGHT)
        self._settled.clear()
        self.greenlet = self._link(gevent.spawn(self._run_guarded), "the run")

    def _run_guarded(self) -> None:
        """`_run`, with any unexpected error ending the run (never a hung shape waiting forever)."""
        try:
            self._run()
        except gevent.GreenletExit:
            if self.controller is None:  # stopped in pre-flight: nothing ran, nothing to finalise
                self._settled.set()
            raise
        except Exception as exc:
            log.exception("the run failed")
            if self.controller is not None and not self._finalised:
                try:
                    self._finalise()
                    return
                except Exception:
                    log.exception("finalisation after a failure failed")
            self._fail(f"the run failed: {type(exc).__name__}: {exc}", 3)

    def _run(self) -> None:
        from llmload.runtime.preflight import PreflightFailed, preflight, start_telemetry, write_run_manifest

        assert self.config is not None and self.run_dir is not None
        config, run_dir = self.config, self.run_dir
        print(f"llmload: run directory {run_dir}", flush=True)
        skip = bool(getattr(self.env.parsed_options, "llmload_skip_preflight", False))
        try:
            checks = {} if skip else preflight(config, run_dir)
        except PreflightFailed as exc:
            self._fail(str(exc), exc.exit_code)
            return
        if checks.get("tokens_per_word"):  # measured with the server's /tokenize: every worker uses it
            requests = config.requests.model_copy(update={"tokens_per_word": checks["tokens_per_word"]})
            config = self.config = config.model_copy(update={"requests": requests})
        from shapes.loadshapes import planning_shape, shape_for_config

        base_dir = Path(self.config_path).resolve().parent
        try:
            self.shape = planning_shape(self.env, config)
            steps = self.shape.plan(config, base_dir=base_dir)
        except LLMLoadError as exc:
            self._fail(str(exc), exc.exit_code)
            return
        from llmload.telemetry.manifest import shape_record

        if self.clocksync is not None:  # at join: every worker's clock, before anything is scheduled
            self.clocksync.reset()
            self.clocksync.measure(WorkerLink(self.env.runner).workers())

        replaced = (None if getattr(self.shape, "follows_config", False)
                    or type(self.shape) is type(shape_for_config(config)) else config.shape.kind)
        if replaced:  # a locustfile's own shape plans the run: the config's `shape:` is not what runs
            print(f"llmload: note: the locustfile's shape {type(self.shape).__name__} plans this run "
                  f"({len(steps)} steps); the config's shape ({replaced}) is not used", flush=True)
        try:
            write_run_manifest(config, run_dir, checks=checks, config_path=self.config_path,
                               workers=len(WorkerLink(self.env.runner).workers()), overrides=self.overrides,
                               shape=shape_record(self.shape, steps, replaced_kind=replaced))
        except Exception as exc:  # the run can go on; the report will say the manifest is missing
            log.exception("manifest not written")
            print(f"llmload: warning: manifest.json not written: {exc}", flush=True)
        self._record_clocks()
        self.telemetry = start_telemetry(config, run_dir)
        from llmload.runtime.judging import live_judge

        recent = getattr(self.telemetry, "recent", None)
        self.controller = StepController(config, run_dir, WorkerLink(self.env.runner), steps,
                                         judge=live_judge(run_dir, recent), telemetry=self.telemetry,
                                         wait_ready=self._wait_pool, base_dir=str(base_dir), shape=self.shape,
                                         clocks=self.clocksync)
        self.controller.plan.data["shape"] = type(self.shape).__name__
        self._to(RunState.RUNNING)
        self.controller.run()
        self._finalise()

    def _wait_pool(self, timeout_s: float = 60.0) -> bool:
        """Wait until Locust has spawned the user pool (the first arrivals need free users)."""
        deadline = now() + timeout_s
        while now() < deadline:
            if self.env.runner.state == "running":
                return True
            gevent.sleep(0.05)
        return False

    def _finalise(self) -> None:
        if self._finalised or self.config is None or self.run_dir is None:
            return
        self._to(RunState.FINALISING)
        self._settled.clear()
        try:
            self._record_clocks()  # the workers' clocks over the whole run, before the report reads the manifest
            self._write_final()
        finally:
            self._settled.set()

    def _record_clocks(self) -> None:
        """manifest.json's `clocks`: each worker's offset, uncertainty and drift so far (a master only)."""
        if self.clocksync is None or self.run_dir is None:
            return
        from llmload.telemetry.manifest import record_clocks

        try:
            record_clocks(self.run_dir, self.clocksync.clocks_record())
        except Exception:
            log.exception("clocks not recorded in manifest.json")

    def _write_final(self) -> None:
        if self.telemetry is not None:
            try:
                # one last sample now, after the last step drained: the polling loop's latest may be an
                # interval older than `drained_at`
                self.telemetry.sample_now()
                self.telemetry.stop()
            except Exception:
                log.exception("telemetry stop failed")
        from llmload.runtime.finish import finalize_run

        report = not bool(getattr(self.env.parsed_options, "llmload_no_report", False))
        try:
            if getattr(self.env, "web_ui", None) is not None:  # in a thread: the web UI answers meanwhile
                if report:  # matplotlib's first import lists the fonts with a subprocess, which gevent's
                    # patched subprocess can only start on the loop's own thread: import it here
                    import matplotlib.font_manager  # noqa: F401

                code = gevent.get_hub().threadpool.apply(finalize_run, (self.run_dir, self.config),
                                                         {"report": report, "outcome": self.outcome})
            else:
                code = finalize_run(self.run_dir, self.config, report=report, outcome=self.outcome)
        except Exception as exc:
            log.exception("finalisation failed")
            print(f"llmload: error: could not finalise {self.run_dir}: {exc}", file=sys.stderr, flush=True)
            code = 3
        if getattr(self.controller, "error", None) is not None:  # ended early on an error of ours (said then)
            code = 3
        if self.stop_signal is not None:  # stopped by a signal: the code says so (the summary has the verdict)
            code = interrupted_exit_code(self.stop_signal)
        self.exit_code = code
        self.env.process_exit_code = code
        said = "" if self.stop_signal is not None and os.environ.get(LAUNCHED_ENV) else console.exit_note(code)
        # the closing line names only a file that is there (a failed report or summary was said already)
        written = next((self.run_dir / name for name in (("report.html",) if report else ()) + ("summary.json",)
                        if (self.run_dir / name).exists()), None)
        if written is not None:
            print(f"llmload: {'report' if written.name == 'report.html' else 'summary'} {written}{said}", flush=True)
        self._to(RunState.DONE)

    # ------------------------------------------------------------------ stop signals

    def _install_stop_signals(self) -> None:
        """SIGINT, SIGTERM and SIGHUP stop the run and finalise it (`_on_stop_signal`). Installed at
        init and again at test start: Locust puts its own SIGTERM handler in place after init (a
        headless shape run reaches that line only when the run is over)."""
        for handle in self._signal_handles:
            handle.cancel()
        self._signal_handles = [gevent.signal_handler(signo, self._on_stop_signal, signo) for signo in STOP_SIGNALS]

    def _on_stop_signal(self, signo: int) -> None:
        detach_hung_up_terminal(signo)
        name = signal.Signals(signo).name
        if self.stop_signal is not None:
            print(f"llmload: {name} again: still finishing the run directory (it is written before Locust "
                  "exits)", flush=True)
            return
        if self.finished and self.exit_code is not None:
            # the run is over (the web UI stays up after it): nothing to cancel; leave with its verdict
            self._link(gevent.spawn(self._quit_after_the_run), "closing after the run")
            return
        self.stop_signal = signo
        if self.controller is not None:  # first: workers that die of the same signal are a stop, not a loss
            self.controller.mark_stopping()
        if not os.environ.get(LAUNCHED_ENV):  # `llmload run` said it already, naming the user's signal
            print(f"llmload: {name}: stopping the run (in-flight requests are recorded as cancelled; the run "
                  "directory is finalised)", flush=True)
        self._link(gevent.spawn(self._stop_and_quit, signo), "stopping the run")

    def _quit_after_the_run(self) -> None:
        """A stop signal once the run has finished (`--web`: the UI stays up): end Locust with the run's
        own exit code (its verdict), as a headless run would have."""
        self.env.process_exit_code = self.exit_code
        web_ui = getattr(self.env, "web_ui", None)
        if web_ui is not None and not self._quitting:
            web_ui.stop()  # Locust's main greenlet waits on the web UI: it returns and shuts down

    def _stop_and_quit(self, signo: int) -> None:
        """Stop the run (`StepController.stop`: what is queued or in flight is cancelled, the run then
        finalises as usual), wait for the finalisation, then end Locust with 128 + the signal number."""
        code = interrupted_exit_code(signo)
        started = self.greenlet is not None
        if started and self.controller is None:  # still in pre-flight: nothing ran, nothing to finalise
            self.greenlet.kill(block=True, timeout=5)
            self._settled.set()
        elif started and not self._finalised and not self.controller.done.is_set():
            # the controller cancels what is queued or in flight (recorded `cancelled`) and ends; the
            # run finalises as usual and the shape ends. (Locust's runner.stop() would race its own
            # quit on a master, which then waits 60 s for workers it has told to quit.)
            self.controller.stop()
        self._settled.wait()  # a finalisation under way (the run's own, or the stop's) ends first
        self.exit_code = code
        self.env.process_exit_code = code
        if not self.finished:  # stopped before anything ran (or in pre-flight): nothing to finalise
            self._to(RunState.DONE)
        web_ui = getattr(self.env, "web_ui", None)
        if web_ui is not None and not self._quitting:
            web_ui.stop()  # Locust's main greenlet waits on the web UI: it returns and shuts down
        elif not started:  # e.g. a master waiting for its workers: no shape will end this process
            self.env.runner.quit()
            gevent.get_hub().parent.throw(SystemExit(code))
        # headless, run started: the shape's tick returns None now and Locust shuts down by itself

    def _on_quitting(self, **kw: Any) -> None:
        """Locust is shutting down (its SIGTERM handler, the end of a run): stop the users first, so
        their in-flight requests are recorded as cancelled, and finalise (or wait for a finalisation
        under way) before Locust reads the exit code."""
        self._quitting = True
        gevent.sleep(0)  # Locust's SIGTERM handler runs beside ours: let ours take the stop first
        if self.stop_signal is not None:
            pass  # `_stop_and_quit` is stopping the run; wait for it below
        elif self.controller is not None and not self._finalised:
            self.env.runner.stop()  # fires test_stop -> _on_test_stop finalises
        elif self.controller is None and self.greenlet is not None and not self.greenlet.dead:
            self.greenlet.kill(block=True, timeout=5)  # in pre-flight: nothing ran, nothing to finalise
            self._settled.set()
        self._settled.wait()

    def _on_test_stopping(self, **kw: Any) -> None:
        """A stop from outside (the web UI, a lost last worker, Locust's own shutdown) begins: stop the
        controller now, before the users are stopped (a master first waits for its workers' users):
        the current step becomes `partial`, no later step starts, and the controller cancels what is
        queued or in flight with `llmload:cancel` (so remote workers' records reach the master too)."""
        if self.controller is None or self.controller.done.is_set() or self._finalised:
            return
        self._to(RunState.STOPPING)
        self.controller.stop()

    def _on_test_stop(self, **kw: Any) -> None:
        """The users are stopped (their in-flight requests recorded as cancelled): keep what ran, finalise
        (unless the controller, stopped above, already ended and the run finalised itself)."""
        if self.controller is None or self._finalised:
            return
        if self.state is not RunState.STOPPING:
            if self.controller.done.is_set():  # the run ended by itself: it finalises itself
                return
            self._to(RunState.STOPPING)  # a stop that did not announce itself
            self.controller.stop()
        if self.greenlet is not None and self.greenlet is not gevent.getcurrent():
            self.greenlet.kill(block=True, timeout=5)  # never inside `_finalise`: that sets `_finalised` first
        if self._finalised:
            return
        if self.is_master:
            gevent.sleep(1.0)  # remote users' cancellations arrive; the worker files are flushed
        self.controller.plan.finish(now(), stopped=True)
        self._finalise()

    # ------------------------------------------------------------------ the shape's view

    def tick(self, shape: Any = None) -> tuple | None:
        """(users, spawn rate, [user class]) while the run is on; None once it is finalised. The spawn
        rate is the pool size: Locust starts the whole pool in one dispatch, not a ramp. The users are
        those of the shape that plans the run (else of the ticking `shape`, else `pool_size`)."""
        if self.finished or self.config is None:
            return None
        planner = self.shape or shape
        users = planner.users(self.config) if planner is not None else pool_size(self.config)
        return users, float(users), self.user_classes(self.config.target.api)

    def new_shape_run(self) -> None:
        """A shaped run is starting: a finished earlier run (web UI: Stop, then Start) must not end it."""
        if self.state is RunState.DONE and self.config is not None:
            self._to(RunState.IDLE)

    def user_classes(self, api: str) -> list[type]:
        """The classes the pool runs: the environment's `LLMUser` classes (as Locust found them in the
        locustfiles) that speak `api` (their `api`, or empty: the run's), of a class and its subclass the
        subclass (a user's own, next to the imported base). Several share the pool by Locust `weight`."""
        found = [cls for cls in getattr(self.env, "user_classes", None) or []
                 if callable(getattr(cls, "build_request", None)) and _api_name(cls) in ("", api)]
        leaves = [cls for cls in found if not any(o is not cls and issubclass(o, cls) for o in found)]
        if not leaves:
            raise LLMLoadError(f"no user class for api {api!r}: load locustfiles/llm.py (or a locustfile "
                               "with an LLMUser subclass) with -f")
        return leaves

    def user_class(self, api: str) -> type:
        """The one class the pool runs for `api` (`user_classes`; the first by name when several share it)."""
        return sorted(self.user_classes(api), key=lambda cls: cls.__name__)[0]


def _build_sender(*args: Any, **kwargs: Any) -> Any:
    """`llmload.runtime.sending.build_sender`, imported when the first step comes (an import can yield)."""
    from llmload.runtime.sending import build_sender

    return build_sender(*args, **kwargs)


def worker_of(environment: Any, *, poll_s: float = 0.01) -> WorkerRuntime:
    """This process's `WorkerRuntime`, for users: waits while the session or its worker is still being
    made (a worker joining a master gets its spawn message while `on_init` may still run)."""
    while True:
        session = session_of(environment)
        if session is not None:
            session.worker_ready.wait()
            return session.worker
        gevent.sleep(poll_s)


def _api_name(cls: type) -> str | None:
    api = getattr(cls, "api", None)
    return api if isinstance(api, str) or api is None else getattr(api, "name", None)


#: the last session made in this process: only for `current()` called with no environment in reach
_LAST: weakref.ref | None = None


def on_init(environment: Any) -> Session:
    """Create this process's session on `environment` (called from the locustfile's `init` listener)."""
    global _LAST
    session = Session(environment)
    setattr(environment, SESSION_ATTR, session)
    _LAST = weakref.ref(session)
    session.setup()
    follow_parent()  # started by `llmload run`: its death (even kill -9) stops this process too
    return session


def session_of(environment: Any) -> Session | None:
    """The session `on_init` put on this Locust environment (None before init, or for another locustfile)."""
    return getattr(environment, SESSION_ATTR, None)


def current(environment: Any = None) -> Session | None:
    """The session of `environment`; without one, the last session made in this process (a fallback for
    code with no environment in reach: users have `self.environment`, shapes `self.runner.environment`)."""
    if environment is not None:
        return session_of(environment)
    return _LAST() if _LAST is not None else None


def new_shape_run(environment: Any = None) -> None:
    """A shaped run is starting: a finished earlier run (web UI: Stop, then Start) must not end it."""
    session = current(environment)
    if session is not None:
        session.new_shape_run()


def pool_tick(environment: Any = None) -> tuple | None:
    """The shape's tick: the user pool while the run is on, None when it is done."""
    session = current(environment)
    return session.tick() if session is not None else None


def register_user_classes(classes: dict[str, type]) -> None:
    """Kept for locustfiles written for earlier versions; nothing needs registering now: the session
    finds the user class for `target.api` among the Locust environment's user classes."""


def pool_user_classes(environment: Any, api: str) -> list[type]:
    """The classes the pool runs for `api` (`Session.user_classes`)."""
    session = current(environment)
    if session is None:
        raise LLMLoadError(f"no user class for api {api!r}: load locustfiles/llm.py with -f")
    return session.user_classes(api)


def user_class(api: str, environment: Any = None) -> type:
    """The user class for `api` among the environment's user classes (`Session.user_class`)."""
    session = current(environment)
    if session is None:
        raise LLMLoadError(f"no user class for api {api!r}: load locustfiles/llm.py with -f")
    return session.user_class(api)
