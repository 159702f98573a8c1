"""Every place llmload reaches into Locust by a name Locust does not document as an API, in one module.

`tests/runtime/test_locust_seams.py` pins each of them against the installed Locust (as
`test_geventhttpclient_contract` does for the transport): an upgrade that renames one fails that test, not a run.

- The session on the environment: `attach_session` puts this process's `Session` on Locust's `Environment` as
  an attribute of ours (`SESSION_ATTR`); users, the shapes (`shapes/loadshapes.py`) and the web UI read it back
  with `session_of`.
- The runner's role: `is_master` (a `MasterRunner` is the one runner with `clients`), `is_worker`, and
  `WorkerLink`, how the step controller reaches the workers: `runner.clients` (`.all`, `.get`, each node's
  `.id` and `.state`), `runner.get_worker_index`, `runner.send_message`.
- The web UI: `add_tab` (the index template's `extended_tabs` / `extended_tables`), `fill_tab` (its rows as
  `extended_stats` in the `/stats/requests` the page polls), `override_start_form`
  (wraps `WebUI.update_template_args` to set `extra_options`, `host`, `missing_host_warning`), `splice_into_page`
  (our script and meta tag put before `</body>` of the index page, endpoint `locust.index`).
- A user's stop: `finish_then_stop` (a user that Locust stops while its runner is still spawning or running
  is being moved to another worker, a rebalance when a worker joins: it finishes the request in flight
  first, by `User._state` = `LOCUST_STATE_STOPPING`, which Locust checks after each task; a stop of the test,
  runner state `cleanup`, still kills it and records the request `cancelled`).
- Logging: `log_readers` (the root logger's handler that feeds the web UI's log panel, a `LogReader` matched by
  class name), `quiet_spawn_warning` (drops `locust.runners`' "spawn rate is very high" warning by its text),
  `STATS_LOGGER` (the logger of Locust's request tables).
- The stop's caller: `cheap_stop_caller` (`Runner.stop` finds its caller's file and line for a DEBUG line with
  `inspect.stack()`, which reads the source of every frame and scans every loaded module: ~0.05 s of CPU
  per Locust process; `locust.runners`' `inspect` replaced by one that reads the frame's own file and line).
- The web UI's import: `locust.env` binds `WebUI` from `locust.web` at import and calls it in `create_web_ui`
  alone; `boot.defer_web_ui` (before `import locust`, so not here) stands in for `locust.web` until a web UI is
  made, then puts the real class at `locust.env.WebUI` (pinned by test_lean_start's web probe).
- The end of the process: `run_without_teardown` runs Locust's `main()`, which ends with `sys.exit(code)`,
  and then ends the process with that code without the interpreter's teardown.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

__all__ = ["SESSION_ATTR", "SPAWN_WARNING", "STATS_LOGGER", "WorkerLink", "add_tab", "attach_session", "fill_tab",
           "cheap_stop_caller", "finish_then_stop", "is_master", "is_worker", "log_readers", "override_start_form", "quiet_spawn_warning",
           "run_without_teardown", "session_of", "splice_into_page", "worker_count"]

#: the Locust environment's attribute that holds this process's session
SESSION_ATTR = "llmload_session"
#: Locust's logger of its request statistics tables
STATS_LOGGER = "locust.stats_logger"
#: the text of Locust's warning about a spawn rate above 100/s (our users start idle, all at once)
SPAWN_WARNING = "spawn rate is very high"
#: the Flask endpoint of the web UI's index page, and the class name of the root logger's handler behind its log panel
INDEX_ENDPOINT = "locust.index"
#: the statistics the web UI polls every few seconds (its tables, ours among them)
STATS_PATH = "/stats/requests"
LOG_READER = "LogReader"


# ------------------------------------------------------------------ the session on the environment

def attach_session(environment: Any, session: Any) -> None:
    setattr(environment, SESSION_ATTR, session)


def session_of(environment: Any) -> Any:
    """The session `attach_session` put on this Locust environment (None before init, or for another locustfile)."""
    return getattr(environment, SESSION_ATTR, None)


# ------------------------------------------------------------------ the runner's role

def is_master(runner: Any) -> bool:
    """A master runner (it has workers); False for a local runner, a worker runner or None."""
    return hasattr(runner, "clients")


def is_worker(runner: Any) -> bool:
    from locust.runners import WorkerRunner

    return isinstance(runner, WorkerRunner)


def finish_then_stop(user: Any) -> bool:
    """Ask `user` to stop once its task (the request in flight) is done, instead of being killed, when
    Locust stops it for a rebalance: its runner still spawning or running (a test that stops is in
    `cleanup` first) and the user inside a task, not waiting for an arrival. True when asked; False:
    kill it as Locust would (the caller's `User.stop`)."""
    from locust.runners import STATE_RUNNING, STATE_SPAWNING
    from locust.user.users import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING

    runner = getattr(user.environment, "runner", None)
    if user._state != LOCUST_STATE_RUNNING or getattr(runner, "state", None) not in (STATE_SPAWNING, STATE_RUNNING):
        return False
    user._state = LOCUST_STATE_STOPPING
    return True


def worker_count(runner: Any) -> int:
    """The workers that can take a step now (a local runner is its own worker)."""
    return len(_alive(runner)) if is_master(runner) else 1


def _alive(runner: Any) -> list[Any]:
    """A master's worker nodes, less those it lost (`missing`: no heartbeat)."""
    return [c for c in runner.clients.all if c.state != "missing"]


class WorkerLink:
    """How the controller reaches workers: Locust's runner (master or local) behind three calls."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    @property
    def local(self) -> bool:
        return not is_master(self.runner)

    def workers(self) -> list[tuple[str | None, str]]:
        """(client id, worker name) of each worker that can take a step now."""
        if self.local:
            return [(None, "0")]
        return [(c.id, str(self.runner.get_worker_index(c.id))) for c in _alive(self.runner)]

    def missing(self, client_id: str | None) -> bool:
        if self.local or client_id is None:
            return False
        node = self.runner.clients.get(client_id) if hasattr(self.runner.clients, "get") else None
        return node is None or node.state == "missing"

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        self.runner.send_message(msg_type, data, client_id=client_id)


# ------------------------------------------------------------------ the web UI

def add_tab(web_ui: Any, title: str, key: str, columns: Sequence[tuple[str, str]]) -> None:
    """A tab of our own beside Locust's, with a table of `columns` ((key, title) pairs)."""
    web_ui.template_args["extended_tabs"] = [{"title": title, "key": key}]
    web_ui.template_args["extended_tables"] = [{"key": key, "structure": [{"key": k, "title": t} for k, t in columns]}]


def override_start_form(web_ui: Any, values: Callable[[dict], tuple[dict, str] | None]) -> None:
    """After Locust fills the start form's template args, `values(extra_options)` may return (the custom
    parameters to show, the host to show); the missing-host warning is then off."""
    original = web_ui.update_template_args

    def update() -> None:
        original()
        got = values(dict(web_ui.template_args.get("extra_options") or {}))
        if got is None:
            return
        web_ui.template_args["extra_options"], web_ui.template_args["host"] = got
        web_ui.template_args["missing_host_warning"] = False

    web_ui.update_template_args = update


def fill_tab(request: Any, response: Any, key: str, rows: Callable[[], list]) -> bool:
    """Our tab's rows (`rows()`) in the statistics the web UI polls (`/stats/requests`, `extended_stats`);
    True when this response was those statistics."""
    if not (request.path.endswith(STATS_PATH) and response.is_json):
        return False
    data = response.get_json() or {}
    data["extended_stats"] = [{"key": key, "data": rows()}]
    response.set_data(json.dumps(data))
    return True


def splice_into_page(request: Any, response: Any, html: str, *, unless: str) -> bool:
    """Put `html` before `</body>` of the web UI's index page unless the page holds `unless` already;
    True when it did."""
    if request.endpoint != INDEX_ENDPOINT or response.mimetype != "text/html":
        return False
    page = response.get_data(as_text=True)
    if unless in page:
        return False
    response.set_data(page.replace("</body>", html + "</body>", 1))
    return True


# ------------------------------------------------------------------ logging

def log_readers() -> list[logging.Handler]:
    """The root logger's handlers that feed the web UI's log panel."""
    return [h for h in logging.getLogger().handlers if type(h).__name__ == LOG_READER]


class _QuietSpawnWarning(logging.Filter):
    """Drops Locust's warning about a spawn rate above 100/s."""

    def filter(self, record: logging.LogRecord) -> bool:
        return SPAWN_WARNING not in record.getMessage()


def quiet_spawn_warning() -> None:
    runners_log = logging.getLogger("locust.runners")
    if not any(isinstance(f, _QuietSpawnWarning) for f in runners_log.filters):
        runners_log.addFilter(_QuietSpawnWarning())


# ------------------------------------------------------------------ the stop's caller

class _FrameCaller:
    """`locust.runners`' `inspect`: the two calls `Runner.stop` makes (`getframeinfo(stack()[1][0])`, its
    caller's `filename` and `lineno`, for a DEBUG line), answered from the frames alone."""

    @staticmethod
    def stack(context: int = 1) -> list[tuple[Any, ...]]:
        frame: Any = sys._getframe(1)
        frames = []
        while frame is not None:
            frames.append((frame,))
            frame = frame.f_back
        return frames

    @staticmethod
    def getframeinfo(frame: Any, context: int = 1) -> Any:
        return SimpleNamespace(filename=frame.f_code.co_filename, lineno=frame.f_lineno)


def cheap_stop_caller() -> None:
    """`Runner.stop` logs its caller without `inspect.stack()` (see the module docstring)."""
    import locust.runners

    locust.runners.inspect = _FrameCaller  # type: ignore[assignment]


# ------------------------------------------------------------------ the end of the process

def run_without_teardown(main: Callable[[], Any]) -> None:
    """Run Locust's `main()` (the child's entry point, `launcher.run.BOOT`), which ends with `sys.exit(code)`,
    then end the process with that code at once: the atexit handlers run (logging's flush among them) and the
    standard streams are flushed, as at any exit, but `os._exit` skips the interpreter's teardown of the
    ~1,500 modules a run loads (pandas, pyarrow, matplotlib): about 0.5 s of CPU per Locust process, after
    everything is written. An exit without an integer code, or with another non-daemon thread still
    running, takes the ordinary way."""
    try:
        main()
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
        others = [t for t in threading.enumerate()
                  if t is not threading.main_thread() and t.is_alive() and not t.daemon]
        if not isinstance(code, int) or others:
            raise
        atexit._run_exitfuncs()  # what the interpreter runs first at exit (non-daemon threads: none, checked)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
