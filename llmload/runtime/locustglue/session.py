"""The glue between Locust and the runtime, for one Locust process (master, worker or local).

`locustfiles/llm.py` calls `add_options` from `init_command_line_parser` and `on_init` from `init`,
which puts this process's `Session` on the Locust environment (`environment.llmload_session`; read it
with `session_of(environment)`): users reach it as `self.environment`, the shape as
`self.runner.environment`. The run itself (its named states, pre-flight, the steps, the stops,
finalisation) is a `RunLifecycle` (`llmload.runtime.master.lifecycle`), apart from Locust: `Session` turns each
Locust event or signal into one call on it (test_start -> `start`; test_stopping, the web UI's Stop ->
`stop(WEB_STOP)`; test_stop -> `stop(USERS_STOPPED)`; quitting -> `stop(QUITTING)`; SIGINT/SIGTERM/SIGHUP
-> `stop(SIGNAL)`). What happens where:

- worker or local runner: a `WorkerRuntime` answers `llmload:step` / `llmload:cancel` (a worker's
  `MasterWatch` stops it and exits 3 once its master is gone);
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
import weakref
from typing import Any

import gevent
import gevent.event

from llmload.config import Config, load_config
from llmload.errors import LLMLoadError
from llmload.redaction import install_console_redaction
from llmload.runtime.launcher.stop_signals import (
    LAUNCHED_ENV,
    STOP_SIGNALS,
    detach_hung_up_terminal,
    follow_parent,
)
from llmload.runtime.locustglue import console
from llmload.runtime.locustglue.seams import (
    SESSION_ATTR,
    WorkerLink,
    attach_session,
    cheap_stop_caller,
    is_master,
    is_worker,
    quiet_spawn_warning,
    session_of,
)
from llmload.runtime.master.lifecycle import RunLifecycle, RunOptions, StopReason
from llmload.runtime.master.pool import UNCAPPED_POOL, pool_size  # noqa: F401 (re-exported)
from llmload.runtime.master.states import RunState, RunStop
from llmload.runtime.wire.messages import (
    CANCEL,
    DRAINED,
    RESULTS,
    STEP,
    DrainedMessage,
    ResultsMessage,
    read_message,
)
from llmload.runtime.worker.scheduler import WorkerRuntime

__all__ = ["SESSION_ATTR", "Session", "add_options", "current", "on_init", "pool_size",
           "pool_tick", "new_shape_run", "pool_user_classes", "register_user_classes", "session_of", "user_class",
           "worker_of"]

log = logging.getLogger("llmload.session")

def add_options(parser: Any) -> None:
    """Our Locust options, typed with non-None defaults (they travel to workers and show in the web UI)."""
    from llmload.runtime.locustglue.workerauth import install

    install()  # before Locust makes its runner: workers prove the worker token (llmload.runtime.locustglue.workerauth)
    group = parser.add_argument_group("llmload")
    group.add_argument("--llmload-config", type=str, default="", help="llmload run configuration (YAML)")
    group.add_argument("--llmload-run-dir", type=str, default="",
                       help="run directory (default: a new <output>/<UTC time>-<shape> directory)")
    group.add_argument("--llmload-skip-preflight", action="store_true", default=False,
                       help="skip the pre-flight checks (reachability, model, quality cases)")
    group.add_argument("--llmload-no-report", action="store_true", default=False,
                       help="write summary.json but not report.html (`llmload calibrate`; `llmload report` "
                            "draws it later)")
    # live Prometheus metrics (`llmload.runtime.locustglue.prom`), not in the start form: the process serves them
    parser.add_argument("--llmload-metrics-port", type=int, default=0, include_in_web_ui=False,
                        help="master: serve live Prometheus metrics on this port (/metrics; 0: not served)")
    parser.add_argument("--llmload-metrics-host", type=str, default="127.0.0.1", include_in_web_ui=False,
                        help="master: the address --llmload-metrics-port binds (loopback by default)")
    from llmload.runtime.master.start_form import add_form_options

    add_form_options(parser)  # the run's rates and SLO, shown and editable in the web UI's start form


class LocustHost:
    """The `RunHost` of a Locust process: its runner, its web UI, its exit code."""

    def __init__(self, environment: Any) -> None:
        self.env = environment

    @property
    def web(self) -> bool:
        return getattr(self.env, "web_ui", None) is not None

    @property
    def launched(self) -> bool:
        return bool(os.environ.get(LAUNCHED_ENV))

    def exit_note(self, code: int) -> str:
        return console.exit_note(code)

    @property
    def remote_users(self) -> bool:
        return is_master(self.env.runner)

    def link(self) -> WorkerLink:
        return WorkerLink(self.env.runner)

    def pool_ready(self) -> bool:
        return self.env.runner.state == "running"

    def plan_shape(self, config: Config) -> tuple[Any, str | None]:
        from shapes.loadshapes import planning_shape, shape_for_config

        shape = planning_shape(self.env, config)
        replaced = (None if getattr(shape, "follows_config", False)
                    or type(shape) is type(shape_for_config(config)) else config.shape.kind)
        return shape, replaced

    def stop_users(self) -> None:
        self.env.runner.stop()

    def quit_soon(self) -> None:
        runner = self.env.runner
        if runner is not None:
            gevent.spawn_later(0.05, runner.quit)

    def close_web_ui(self) -> None:
        self.env.web_ui.stop()

    def exit(self, code: int) -> None:
        self.env.runner.quit()
        gevent.get_hub().parent.throw(SystemExit(code))

    def set_exit_code(self, code: int) -> None:
        self.env.process_exit_code = code


def _run_attr(name: str, doc: str) -> property:
    """A `Session` attribute that is the run lifecycle's (`RunLifecycle`)."""
    return property(lambda self: getattr(self.life, name), lambda self, value: setattr(self.life, name, value),
                    doc=doc)


class Session:
    """The runtime state of this Locust process: its roles, its config and web form, and the adapter
    that turns Locust's events and stop signals into calls on the run's `RunLifecycle` (`life`)."""

    config = _run_attr("config", "this run's config (the file's, with the start form applied)")
    overrides = _run_attr("overrides", "what the start form (or --llmload-rates / --llmload-slo) changed")
    outcome = _run_attr("outcome", "the finished run's `verdict` and answer `sentences` (the web UI shows them)")
    run_dir = _run_attr("run_dir", "this run's directory, once chosen")
    controller = _run_attr("controller", "this run's `StepController`, once made")
    telemetry = _run_attr("telemetry", "this run's telemetry collector, or None")
    clocksync = _run_attr("clocksync", "the master's measurements of its workers' clocks; None elsewhere")
    shape = _run_attr("shape", "the shape that plans the run, once planned")
    exit_code = _run_attr("exit_code", "the run's exit code, once known")
    greenlet = _run_attr("greenlet", "the run's greenlet (pre-flight, steps, finalisation)")

    def __init__(self, environment: Any) -> None:
        self.env = environment
        self.life = RunLifecycle(LocustHost(environment))
        self.life.on_controller = self._controller_made
        #: the config file as loaded (the start form's rates and SLO apply to it for each run)
        self.file_config: Config | None = None
        #: the web UI's live series (`llmload.runtime.master.live_series.LiveSeries`), fed with shipped summaries
        self.live: Any = None
        #: the live Prometheus metrics (`llmload.runtime.locustglue.prom.LiveMetrics`) with --web or a metrics port
        self.metrics: Any = None
        self.metrics_registry: Any = None
        self.config_path: str = ""
        self.worker: WorkerRuntime | None = None
        #: set once `worker` exists (users wait on it: `worker_of`)
        self.worker_ready = gevent.event.Event()
        self._signal_handles: list[Any] = []

    @property
    def state(self) -> RunState:
        return self.life.state

    @property
    def stopped_by(self) -> RunStop | None:
        """Why the run was stopped from outside (`RunLifecycle.stopped_by`), None while it was not."""
        return self.life.stopped_by

    @property
    def finished(self) -> bool:
        """The run is over (DONE or FAILED): the shape's tick returns None and Locust ends."""
        return self.life.finished

    # ------------------------------------------------------------------ roles

    @property
    def is_master(self) -> bool:
        return is_master(self.env.runner)

    @property
    def is_worker(self) -> bool:
        return is_worker(self.env.runner)

    def setup(self) -> None:
        runner = self.env.runner
        if runner is None:
            return
        worker = None
        if not self.is_master:  # first, before anything that can yield: users may already be spawning
            worker = self.worker = WorkerRuntime(runner.send_message, build_sender=_build_sender)
            self.worker_ready.set()
        install_console_redaction()  # the key, once read, never reaches the terminal or Locust's log
        quiet_spawn_warning()
        cheap_stop_caller()
        if worker is not None:
            runner.register_message(STEP, lambda environment, msg, **kw: worker.on_step(msg.data))
            runner.register_message(CANCEL, lambda environment, msg, **kw: worker.on_cancel(msg.data),
                                    concurrent=True)
            self.env.events.test_stop.add_listener(lambda **kw: worker.close())
            if self.is_worker:
                from llmload.runtime.locustglue.master_watch import MasterWatch
                from llmload.runtime.wire import clocksync

                runner.register_message(clocksync.PING, lambda environment, msg, **kw: clocksync.answer_ping(
                    msg.data, runner.send_message))
                runner.greenlet.spawn(MasterWatch(runner, self.worker).run)  # a lost master: stop, exit 3
        if not self.is_worker:
            runner.register_message(RESULTS, self._on_results)
            runner.register_message(DRAINED, self._on_drained)
            if self.is_master:
                from llmload.runtime.wire.clocksync import PONG, ClockSync

                link = WorkerLink(runner)
                self.clocksync = ClockSync(link.send)
                runner.register_message(PONG, lambda environment, msg, **kw: self.clocksync.on_pong(msg.data))
            self._load_config()
            self.listen(self.env.events)
            self.install_stop_signals()
            if getattr(self.env, "web_ui", None) is not None:
                from llmload.runtime.locustglue.webui import install_web_ui

                install_web_ui(self.env, self)
            self._serve_metrics()

    def listen(self, events: Any) -> None:
        """Each Locust event that starts or stops a run becomes one lifecycle call."""
        events.test_start.add_listener(self._on_test_start)
        events.test_stopping.add_listener(self._on_test_stopping)
        events.test_stop.add_listener(self._on_test_stop)
        events.quitting.add_listener(self._on_quitting)

    def _serve_metrics(self) -> None:
        """Live `/metrics` (`llmload.runtime.locustglue.prom`): on the web UI's app, and on --llmload-metrics-port."""
        options = self.env.parsed_options
        port = int(getattr(options, "llmload_metrics_port", 0) or 0)
        web_ui = getattr(self.env, "web_ui", None)
        if not port and web_ui is None:
            return
        from llmload.runtime.locustglue import prom

        self.metrics = prom.install(self)
        if web_ui is not None:
            prom.add_route(web_ui.app, self.metrics_registry, web_ui.auth_required_if_enabled)
        if port:
            host = str(getattr(options, "llmload_metrics_host", "") or "127.0.0.1")
            try:
                prom.serve(self.metrics_registry, host, port)
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                self.life.fail(f"--metrics-port {port}: cannot listen on {host}:{port}: {reason}", 2)

    def _load_config(self) -> None:
        options = self.env.parsed_options
        self.config_path = getattr(options, "llmload_config", "") if options else ""
        if not self.config_path:
            self.life.fail("no run configuration: pass --llmload-config FILE", 2)
            return
        try:
            self.config = self.file_config = load_config(self.config_path)
            self._apply_form()
        except LLMLoadError as exc:
            self.life.fail(str(exc), exc.exit_code)

    def _apply_form(self) -> None:
        """This run's config: the file's, with `--llmload-rates` / `--llmload-slo` (the start form) applied."""
        from llmload.runtime.master.start_form import RATES, SLO_OPTION, apply_form

        if self.file_config is None:
            raise RuntimeError("the start form applies to the config file's config: none was loaded")
        options = self.env.parsed_options
        self.config, self.overrides = apply_form(self.file_config, str(getattr(options, RATES, "") or ""),
                                                 str(getattr(options, SLO_OPTION, "") or ""),
                                                 str(getattr(self.env, "host", "") or ""))

    def run_options(self) -> RunOptions:
        """This process's command line, as the lifecycle reads it."""
        options = self.env.parsed_options
        return RunOptions(config_path=self.config_path,
                          run_dir=str(getattr(options, "llmload_run_dir", "") or "") if options else "",
                          skip_preflight=bool(getattr(options, "llmload_skip_preflight", False)),
                          report=not bool(getattr(options, "llmload_no_report", False)))

    # ------------------------------------------------------------------ master: Locust's events

    def _on_results(self, environment: Any, msg: Any, **kw: Any) -> None:
        results = self._read(ResultsMessage, msg)
        if results is None:
            return
        if self.controller is not None:
            self.controller.on_results(results)
        if self.live is not None:
            self.live.add_rows(results.rows)
        if self.metrics is not None:
            self.metrics.add_rows(results.rows)

    def _on_drained(self, environment: Any, msg: Any, **kw: Any) -> None:
        drained = self._read(DrainedMessage, msg)
        if drained is not None and self.controller is not None:
            self.controller.on_drained(drained)

    def _read(self, cls: type, msg: Any) -> Any:
        """A worker's message, typed; one that cannot be read fails the run with one line naming the
        worker and the field (`StepController.fail`), or is logged when no run is under way."""
        fail = self.controller.fail if self.controller is not None else log.error
        return read_message(cls, msg.data, worker=msg.node_id, fail=fail)

    def _controller_made(self, controller: Any) -> None:
        if self.live is not None:  # the web UI's charts take each step's planned arrivals as it starts
            self.live.listen(controller.events)

    def _on_test_start(self, **kw: Any) -> None:
        if self.config is None or self.life.running:
            return
        try:
            self._apply_form()  # the web UI's form may have changed the rates or the SLO since the last run
        except LLMLoadError as exc:  # checked when the form was posted; a bad value here ends the run
            self.life.fail(str(exc), exc.exit_code)
            return
        if self.live is not None:
            self.live.reset(self.config.slo)
        self.install_stop_signals()  # Locust put its own SIGTERM handler in place after init
        self.life.start(self.run_options())

    def _on_test_stopping(self, **kw: Any) -> None:
        """Locust's test_stopping: the web UI's Stop (a lost last worker, Locust's own shutdown)."""
        self.life.stop(StopReason.WEB_STOP)

    def _on_test_stop(self, **kw: Any) -> None:
        """Locust's test_stop: the users are stopped (their in-flight requests recorded as cancelled)."""
        self.life.stop(StopReason.USERS_STOPPED)

    def _on_quitting(self, **kw: Any) -> None:
        """Locust's quitting: it shuts down (its SIGTERM handler, the end of a run)."""
        self.life.stop(StopReason.QUITTING)

    # ------------------------------------------------------------------ stop signals

    def install_stop_signals(self) -> list[Any]:
        """SIGINT, SIGTERM and SIGHUP stop the run and finalise it (`_on_stop_signal`). Installed at
        init and again at test start: Locust puts its own SIGTERM handler in place after init (a
        headless shape run reaches that line only when the run is over). Returns the handlers."""
        for handle in self._signal_handles:
            handle.cancel()
        self._signal_handles = [gevent.signal_handler(signo, self._on_stop_signal, signo) for signo in STOP_SIGNALS]
        return self._signal_handles

    def _on_stop_signal(self, signo: int) -> None:
        detach_hung_up_terminal(signo)
        self.life.stop(StopReason.SIGNAL, signo=signo)

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
        self.life.new_run()

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
    """`llmload.runtime.worker.sending.build_sender`, imported when the first step comes (an import can yield)."""
    from llmload.runtime.worker.sending import build_sender

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
    attach_session(environment, session)
    _LAST = weakref.ref(session)
    session.setup()
    follow_parent()  # started by `llmload run`: its death (even kill -9) stops this process too
    return session


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
