"""`llmload run`: validate the config, check the target, start Locust with our users and shape.

The command line built here is what a user could type themselves:

    python -m locust -f <locustfiles/llm.py>,<shapes/llm.py> --headless --llmload-config CONFIG
        --llmload-run-dir RUN_DIR [--processes N | --master --expect-workers N | --worker --master-host H]

(`--locustfile PATH`: the user's own locustfile. One that imports `locustfiles.llm` (its own `LLMUser`
subclass) replaces `locustfiles/llm.py`; one that does not (a shape of one's own) is loaded between the
two, and its shape plans the run.)

(`llmload run` starts it as `python -c BOOT ...`, which is `python -m locust` with our packages imported
before Locust puts the working directory first on the import path: a folder named `llmload` there, as
in the parent of a clone, must not shadow the package; once Locust exits, the process ends without the
interpreter's teardown: `locustglue.seams.run_without_teardown`.)

Config errors, bad flag combinations and a run directory that cannot be written, or that another run
holds, are caught before Locust starts (one line, exit 2). The launcher claims its run directory for
the whole run with an exclusive lock (`claim_run_dir`: `flock` on `.llmload-lock`), then checks that no
run is there (`plan.json`): of two runs started into one `--out` at once, one runs and the other is
refused; a port the run would listen on (the master's, the web UI's, the live metrics') that something
already listens on is refused before anything is made (`llmload.runtime.launcher.ports`); the default
`<output>/<UTC time>-<shape>` is made with an exclusive `mkdir`, so two runs
started in the same second get two directories (`-2`, `-3`, ...); an unreachable target gives one line and exit 3, a model the server does not list one line and exit 2 (`llmload.runtime.master.served_model`). Once the config
has validated and the run directory is claimed, the Locust child is started and held before it reads its
command line while the other checks run (`llmload.runtime.launcher.gated_child`: its ~1 s of imports no longer follow them); it gets the command
line above when they pass, and is ended, having said nothing, when one fails. With
`--processes N` the master and its local workers talk over a free loopback port (not Locust's fixed
5557, so two runs on one machine do not collide) unless a port is asked for. The exit code afterwards
is the run's verdict from `summary.json` (0 pass, 1 fail, 3 invalid), or, when no summary was
written, Locust's own code where it said why (2, 3, or 4: a full disk, `llmload.diskfull`), else 3 with
one line naming how it ended (a killed master: the signal, and `llmload report RUN_DIR` to recover). SIGINT, SIGTERM or SIGHUP stop the run (`llmload.runtime.launcher.stop_signals`): the run
directory is finalised, nothing outlives the command, and the exit code is 128 + the signal number.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmload.diskfull import DISK_FULL_EXIT
from llmload.rundir.layout import claim_run_dir, new_run_dir, prepare_run_dir, remove_if_unused

if TYPE_CHECKING:
    from llmload.config import Config

__all__ = ["BOOT", "free_loopback_port", "locust_command", "run_config", "say_once", "verdict_exit_code"]

#: the Locust child's entry point: `python -m locust`, with our packages imported first and without
#: the working directory on the import path (see the module docstring); Locust imported with the installed
#: packages' entry points read once (`llmload.runtime.locustglue.boot`: ~0.25 s of CPU per Locust process)
BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p != '']; "
        "from llmload.runtime.locustglue.boot import import_locust; import_locust(); "
        "import locust, llmload, shapes, analysis; "
        "from locust.main import main; from llmload.runtime.locustglue.seams import run_without_teardown; "
        "run_without_teardown(main)")

REPO_FILES = Path(__file__).resolve().parents[3]
LOCUSTFILE = REPO_FILES / "locustfiles" / "llm.py"
SHAPEFILE = REPO_FILES / "shapes" / "llm.py"
#: Locust's master port, for `--master` / `--worker` when none is given
DEFAULT_PORT = 5557

def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def locust_command(config_path: Path, run_dir: Path | None, *, web: bool = False, processes: int = 0,
                   master: bool = False, expect_workers: int = 1, worker: bool = False,
                   master_host: str = "127.0.0.1", master_port: int | None = None,
                   locustfile: Path | None = None, metrics_port: int | None = None,
                   metrics_host: str = "127.0.0.1", master_bind_host: str = "127.0.0.1",
                   report: bool = True) -> list[str]:
    """The Locust command line for one run (see the module docstring); `master_port` None: Locust's
    5557 for `master` / `worker`, a free loopback port for `processes`; `locustfile` the user's own
    instead of ours; `metrics_port`: live Prometheus metrics there (`llmload.runtime.locustglue.prom`);
    `master_bind_host` the interface a `master` listens on (loopback unless told); `report` False: the
    run writes summary.json and no report.html (`llmload report RUN_DIR` draws it later)."""
    files = [LOCUSTFILE, SHAPEFILE]
    if locustfile is not None:  # its users replace ours when it imports them (a subclass); else it adds a shape
        own = Path(locustfile).resolve()
        files = [own, SHAPEFILE] if _imports_our_users(own) else [LOCUSTFILE, own, SHAPEFILE]
    cmd = [sys.executable, "-c", BOOT, "-f", ",".join(str(f) for f in files), "--loglevel", "WARNING"]
    if worker:
        return cmd + ["--worker", "--master-host", master_host, "--master-port", str(master_port or DEFAULT_PORT)]
    cmd += ["--llmload-config", str(config_path)]
    if run_dir is not None:
        cmd += ["--llmload-run-dir", str(run_dir)]
    if not web:
        cmd += ["--headless", "--only-summary", "--llmload-no-locust-stats"]
    elif not os.environ.get("LOCUST_WEB_HOST"):  # loopback unless told otherwise (e.g. in a container)
        cmd += ["--web-host", "127.0.0.1"]
    if processes:
        port = master_port or free_loopback_port()  # the forked workers connect to --master-port
        cmd += ["--processes", str(processes), "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--master-port", str(port)]
    if master:
        cmd += ["--master", "--expect-workers", str(expect_workers), "--master-bind-host", master_bind_host,
                "--master-bind-port", str(master_port or DEFAULT_PORT)]
    if metrics_port:
        cmd += ["--llmload-metrics-port", str(metrics_port), "--llmload-metrics-host", metrics_host]
    if not report:
        cmd.append("--llmload-no-report")
    return cmd


#: `analysis.exit_code`'s mapping, here so that the launcher never imports pandas (a test keeps them equal)
VERDICT_EXIT_CODES = {"pass": 0, "fail": 1, "invalid": 3, "insufficient": 3, "inconclusive": 3}


def verdict_exit_code(run_dir: Path) -> int | None:
    """0 pass, 1 fail, 3 invalid/insufficient, from `summary.json`; None if there is none."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    return VERDICT_EXIT_CODES.get(summary.get("verdict", "insufficient"), 3)



#: notes this process printed already (`say_once`)
_SAID: set[str] = set()


def say_once(line: str) -> None:
    """Print `line` on stderr unless this process printed it already (a second run of the same process,
    as in `llmload demo`, repeats no note)."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def _check_pool_covers_workers(config: Any, config_path: Path, workers: int) -> None:
    """Locust splits the pool's users (`shapes.plan.pool_size`: the client cap, or the largest closed-loop
    level) over the workers: a worker with none would never send its shard of the arrivals."""
    from llmload.errors import ConfigError
    from shapes.plan import closed_loop_levels, pool_size

    users = pool_size(config)
    if workers > users:
        key = "concurrency.levels" if closed_loop_levels(config) else "client.max_concurrency"
        raise ConfigError(f"{users} is under the {workers} worker processes, and every worker needs at least "
                          f"one user to send its share of the arrivals: raise it or run fewer workers",
                          file=str(config_path), key=key)


def run_config(config_path: Path, *, out: Path | None = None, web: bool = False, processes: int = 0,
               master: bool = False, expect_workers: int = 1, worker: bool = False,
               master_host: str = "127.0.0.1", master_port: int | None = None, skip_preflight: bool = False,
               locustfile: Path | None = None, metrics_port: int | None = None,
               metrics_host: str = "127.0.0.1", master_bind_host: str = "127.0.0.1",
               worker_token_file: Path | None = None, report: bool = True) -> int:
    """Run the load test described by `config_path`; returns the exit code (see the module docstring)."""
    clash = _role_clash(master=master, worker=worker, processes=processes) or _bad_locustfile(locustfile)
    clash = clash or _use_worker_token(worker_token_file, needed=master)
    if clash:
        print(f"llmload: error: {clash}", file=sys.stderr)
        return 2
    if worker:
        return _wait_locust(locust_command(config_path, None, worker=True, master_host=master_host,
                                           master_port=master_port, locustfile=locustfile), None)
    from llmload.config import load_config
    from llmload.errors import LLMLoadError

    if out is not None and (Path(out) / "plan.json").exists():
        print(f"llmload: error: {out} already holds a run: choose another --out", file=sys.stderr)
        return 2
    run_dir, made, child, claim, new_base = None, False, None, None, None
    try:
        notes: list[str] = []
        config = load_config(config_path, notes=notes)  # first: a config error answers before the heavy imports
        for note in notes:  # a legacy key that does nothing
            say_once(note)
        if master:
            _check_no_shared_secrets(config, config_path)
        _check_pool_covers_workers(config, config_path, expect_workers if master else processes)
        from llmload.runtime.launcher.ports import check_ports_free, run_listeners

        check_ports_free(run_listeners(master=master, master_bind_host=master_bind_host, master_port=master_port,
                                       default_master_port=DEFAULT_PORT, processes=processes, web=web,
                                       metrics_port=metrics_port, metrics_host=metrics_host))
        # the run directory first: one that cannot be written, or that another run holds, refuses the run
        # before the Locust child is started (its imports are ~1 s of CPU thrown away)
        where = ("--out", None) if out is not None else ("output", str(config_path))
        if out is not None:
            run_dir = Path(out)
            made = prepare_run_dir(run_dir, where=where)
        else:  # made here by an exclusive mkdir (unique); the write check follows
            base = _output_dir(config, config_path)
            new_base = None if base.exists() else base  # made for this run: removed with it if unused
            run_dir = new_run_dir(config, base=base)
            made = prepare_run_dir(run_dir, where=where) or _empty_dir(run_dir)
        claim = claim_run_dir(run_dir, where=where)
        child = _start_gated()  # Locust's imports go on while the checks below run (`llmload.runtime.launcher.gated_child`)
        from llmload.runtime.master.preflight import check_model_served, check_reachable
        from shapes.plan import build_plan

        build_plan(config, base_dir=Path(config_path).resolve().parent)  # trace files, shape errors
        if not skip_preflight:  # the master's pre-flight prints the warnings; a refusal is one line here
            check_model_served(config, check_reachable(config))
    except LLMLoadError as exc:
        if child is not None:
            child.discard()
        if claim is not None:
            claim.release()
        print(f"llmload: error: {exc}", file=sys.stderr)
        remove_if_unused(run_dir if made else None)
        if new_base is not None and new_base.is_dir() and not any(new_base.iterdir()):
            new_base.rmdir()  # a refused run leaves nothing on disk, not even the output folder it made
        return exc.exit_code
    except BaseException:  # e.g. Ctrl-C during the checks: the held child goes with the launcher
        if child is not None:
            child.discard()
        if claim is not None:
            claim.release()
        raise
    try:
        from llmload.envelope import check_plan_against_envelope  # warns past `llmload calibrate`'s envelope

        warning = check_plan_against_envelope(config, expect_workers if master else processes,
                                              base_dir=Path(config_path).resolve().parent)
        if warning:
            say_once(warning)  # `llmload demo` runs two configs in one process: one note
        cmd = locust_command(config_path, run_dir, web=web, processes=processes, master=master,
                             expect_workers=expect_workers, master_port=master_port, locustfile=locustfile,
                             metrics_port=metrics_port, metrics_host=metrics_host,
                             master_bind_host=master_bind_host, report=report)
        if skip_preflight:
            cmd.append("--llmload-skip-preflight")
        if web:
            port = os.environ.get("LOCUST_WEB_PORT", "8089")
            print(f"llmload: web UI at http://127.0.0.1:{port} (tab LLM: live charts, step table, verdict and "
                  "report link); press Start, then Ctrl-C here when done", flush=True)
    except BaseException:
        child.discard()
        claim.release()
        raise
    try:
        return _wait_locust(cmd, run_dir, made=made, child=child, report=report)
    finally:
        claim.release()



def _empty_dir(run_dir: Path) -> bool:
    return run_dir.is_dir() and not any(run_dir.iterdir())



def _role_clash(*, master: bool, worker: bool, processes: int) -> str | None:
    """Which of --master, --worker and --processes cannot go together (None when they can)."""
    if master and worker:
        return "--master and --worker exclude each other: a process is one or the other"
    if processes and (master or worker):
        return f"--processes cannot be combined with --{'master' if master else 'worker'}: " \
               "--processes starts a master and its local workers itself"
    return None


def _use_worker_token(path: Path | None, *, needed: bool) -> str | None:
    """Put `--worker-token-file`'s first line in `LLMLOAD_WORKER_TOKEN` for the Locust child (never on a
    command line); why not (None when done, or not needed: `--processes` makes its own)."""
    from llmload.runtime.launcher.child_env import TOKEN_ENV

    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            return f"--worker-token-file {path}: cannot read it ({getattr(exc, 'strerror', None) or 'not text'})"
        token = lines[0].strip() if lines else ""
        if len(token) < 16:
            return f"--worker-token-file {path}: the token must be at least 16 characters on its first line"
        os.environ[TOKEN_ENV] = token
    elif needed and len(os.environ.get(TOKEN_ENV, "").strip()) < 16:
        return (f"--master needs a worker token of at least 16 characters, the same on every worker: set {TOKEN_ENV} "
                "or give --worker-token-file FILE here and on each worker (docs/SECURITY.md)")
    return None


def _check_no_shared_secrets(config: Config, config_path: Path) -> None:
    """ConfigError when a run with remote workers would send them a secret header value in the config: a
    worker reads the key itself (`api_key_env` / `api_key_file` on the worker), nothing else is sent."""
    from llmload.client.auth import is_secret_header
    from llmload.errors import ConfigError

    for name, value in config.target.headers.items():
        if value and is_secret_header(name):
            raise ConfigError("a secret header is not sent to remote workers (--master): give the key with "
                              "api_key_env or api_key_file, read on each worker", file=str(config_path),
                              key=f"target.headers.{name}")


def _imports_our_users(path: Path) -> bool:
    """Whether the locustfile imports `locustfiles.llm` (its own `LLMUser` subclass: loading ours by path
    too would load that module twice). A file that does not (a shape of one's own) runs with our users."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return True  # Locust reports the file's own error
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("locustfiles"):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("locustfiles") for a in node.names):
            return True
    return False


def _bad_locustfile(locustfile: Path | None) -> str | None:
    """Why `--locustfile` cannot be loaded (None when it can, or none was given)."""
    if locustfile is None:
        return None
    if Path(locustfile).suffix != ".py":
        return f"--locustfile {locustfile}: expected a Python file (.py)"
    if not Path(locustfile).is_file():
        return f"--locustfile {locustfile}: no such file"
    return None


def _child_env() -> dict[str, str]:
    from llmload.runtime.launcher.stop_signals import LAUNCHED_ENV

    return {**os.environ, "PYTHONUNBUFFERED": "1", LAUNCHED_ENV: str(os.getpid())}


def _start_gated() -> Any:
    """The Locust child, started now and held before it parses its command line (`llmload.runtime.launcher.gated_child`)."""
    from llmload.runtime.launcher.gated_child import GatedChild

    return GatedChild(BOOT, _child_env())


def _wait_locust(cmd: list[str], run_dir: Path | None, *, made: bool = False, child: Any = None,
                 report: bool = True) -> int:
    """Run Locust in its own process group and wait for it; the stop signals go to it once
    (`llmload.runtime.launcher.stop_signals`). `child`: a `GatedChild` started earlier, released here to run `cmd`;
    `report`: whether the run writes report.html (finished: its summary, and its report unless off).
    Returns the verdict's exit code, or 128 + the signal when stopped."""
    from llmload.runtime.launcher.stop_signals import (
        StopSignals,
        end_process_group,
        interrupted_exit_code,
        say,
    )

    with StopSignals(finished=lambda: run_dir is not None and _run_finished(run_dir, report)) as stops:
        if child is not None:
            stops.child = child.release(cmd)
        else:
            stops.child = subprocess.Popen(cmd, env=_child_env(), stdin=subprocess.DEVNULL, start_new_session=True)
        stops.forward()  # a signal that came while it was starting
        code = stops.child.wait()
        end_process_group(stops.child.pid)
        remove_if_unused(run_dir if made else None)  # made for the run, never used (stopped or failed first)
        verdict = verdict_exit_code(run_dir) if run_dir is not None and stops.first is None else None
    if stops.after_run and stops.first is not None and code != interrupted_exit_code(stops.first) and run_dir is not None:
        verdict = verdict_exit_code(run_dir)  # closed after the run: its verdict, as without the signal
        if verdict is not None:
            return verdict
    if stops.first is not None:
        name, exit_code = signal.Signals(stops.first).name, interrupted_exit_code(stops.first)
        done = (f"{run_dir} finalised with the steps that ran" if run_dir is not None
                and (run_dir / "summary.json").exists() else "no summary was written")
        say(f"llmload: interrupted by {name}: {done} (exit code {exit_code})")
        return exit_code
    if run_dir is None:  # a worker: Locust's own code
        return code
    if code == DISK_FULL_EXIT:  # the Locust process said the disk is full and named this exit code: a summary
        return code             # that fitted does not make the run directory whole (its verdict's code would hide it)
    if verdict is not None:
        return verdict
    if code in (2, 3, DISK_FULL_EXIT):  # the Locust process said why (`llmload: error: ...`) before it exited
        return code
    say(f"llmload: error: {_why_no_summary(code, run_dir)}")
    return 3


def _why_no_summary(code: int, run_dir: Path) -> str:
    """One line: how the Locust process ended without writing summary.json, and what to do."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"the Locust process was killed by {name}"
    else:
        how = f"the Locust process exited with code {code}"
    if (Path(run_dir) / "plan.json").exists():
        return (f"{how} before it finalised {run_dir}: `llmload report {run_dir}` recovers what was recorded "
                "(exit code 3)")
    return f"{how} before the run started; nothing was recorded in {run_dir} (exit code 3)"


def _run_finished(run_dir: Path, report: bool = True) -> bool:
    """The run in `run_dir` has been finalised (its summary and, unless `report` is off, its report
    written: a `--web` run waits for Ctrl-C after that)."""
    return (run_dir / "summary.json").exists() and (not report or (run_dir / "report.html").exists())


def _output_dir(config, config_path: Path) -> Path:
    out = Path(config.output)
    return out if out.is_absolute() else Path.cwd() / out
