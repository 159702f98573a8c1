"""`llmload run`: validate the config, check the target, start Locust with our users and shape.

The command line built here is what a user could type themselves:

    python -m locust -f <locustfiles/llm.py>,<shapes/llm.py> --headless --llmload-config CONFIG
        --llmload-run-dir RUN_DIR [--processes N | --master --expect-workers N | --worker --master-host H]

(`--locustfile PATH`: the user's own locustfile. One that imports `locustfiles.llm` (its own `LLMUser`
subclass) replaces `locustfiles/llm.py`; one that does not (a shape of one's own) is loaded between the
two, and its shape plans the run.)

(`llmload run` starts it as `python -c BOOT ...`, which is `python -m locust` with our packages imported
before Locust puts the working directory first on the import path: a folder named `llmload` there, as
in the parent of a clone, must not shadow the package.)

Config errors, bad flag combinations and a run directory that cannot be written are caught before
Locust starts (one line, exit 2) and an unreachable target gives one line and exit 3. Once the config
has validated, the Locust child is started and held before it reads its command line while the other
checks run (`llmload.runtime.gate`: its ~1 s of imports no longer follow them); it gets the command
line above when they pass, and is ended, having said nothing, when one fails. With
`--processes N` the master and its local workers talk over a free loopback port (not Locust's fixed
5557, so two runs on one machine do not collide) unless a port is asked for. The exit code afterwards
is the run's verdict from `summary.json` (0 pass, 1 fail, 3 invalid), or Locust's own code when no
summary was written. SIGINT, SIGTERM or SIGHUP stop the run (`llmload.runtime.signals`): the run
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

if TYPE_CHECKING:
    from llmload.config import Config

__all__ = ["BOOT", "free_loopback_port", "locust_command", "new_run_dir", "prepare_run_dir", "run_config",
           "verdict_exit_code"]

#: the Locust child's entry point: `python -m locust`, with our packages imported first and without
#: the working directory on the import path (see the module docstring)
BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p != '']; import locust, llmload, shapes, analysis; "
        "from locust.main import main; main()")

REPO_FILES = Path(__file__).resolve().parents[2]
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
                   locustfile: Path | None = None) -> list[str]:
    """The Locust command line for one run (see the module docstring); `master_port` None: Locust's
    5557 for `master` / `worker`, a free loopback port for `processes`; `locustfile` the user's own
    instead of ours."""
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
        cmd += ["--master", "--expect-workers", str(expect_workers), "--master-bind-port",
                str(master_port or DEFAULT_PORT)]
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


def new_run_dir(config: Config, *, base: str | Path | None = None) -> Path:
    """`<output>/<UTC timestamp>-<shape kind>/`, made unique if two runs start in the same second."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(base if base is not None else config.output)
    path = root / f"{stamp}-{config.shape.kind}"
    n = 2
    while path.exists():
        path, n = root / f"{stamp}-{config.shape.kind}-{n}", n + 1
    return path


def run_config(config_path: Path, *, out: Path | None = None, web: bool = False, processes: int = 0,
               master: bool = False, expect_workers: int = 1, worker: bool = False,
               master_host: str = "127.0.0.1", master_port: int | None = None, skip_preflight: bool = False,
               locustfile: Path | None = None) -> int:
    """Run the load test described by `config_path`; returns the exit code (see the module docstring)."""
    clash = _role_clash(master=master, worker=worker, processes=processes) or _bad_locustfile(locustfile)
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
    run_dir, made, child = None, False, None
    try:
        config = load_config(config_path)  # first: a config error answers before the heavy imports
        child = _start_gated()  # Locust's imports go on while the checks below run (`llmload.runtime.gate`)
        from llmload.runtime.preflight import check_reachable
        from shapes.plan import build_plan

        build_plan(config, base_dir=Path(config_path).resolve().parent)  # trace files, shape errors
        run_dir = Path(out) if out is not None else new_run_dir(config, base=_output_dir(config, config_path))
        made = prepare_run_dir(run_dir, where=("--out", None) if out is not None else ("output", str(config_path)))
        if not skip_preflight:
            check_reachable(config)
    except LLMLoadError as exc:
        if child is not None:
            child.discard()
        print(f"llmload: error: {exc}", file=sys.stderr)
        _remove_if_empty(run_dir if made else None)
        return exc.exit_code
    except BaseException:  # e.g. Ctrl-C during the checks: the held child goes with the launcher
        if child is not None:
            child.discard()
        raise
    try:
        from llmload.envelope import check_plan_against_envelope  # warns past `llmload calibrate`'s envelope

        warning = check_plan_against_envelope(config, expect_workers if master else processes,
                                              base_dir=Path(config_path).resolve().parent)
        if warning:
            print(warning, file=sys.stderr)
        cmd = locust_command(config_path, run_dir, web=web, processes=processes, master=master,
                             expect_workers=expect_workers, master_port=master_port, locustfile=locustfile)
        if skip_preflight:
            cmd.append("--llmload-skip-preflight")
        if web:
            port = os.environ.get("LOCUST_WEB_PORT", "8089")
            print(f"llmload: web UI at http://127.0.0.1:{port} (tab LLM: live charts, step table, verdict and "
                  "report link); press Start, then Ctrl-C here when done", flush=True)
    except BaseException:
        child.discard()
        raise
    return _wait_locust(cmd, run_dir, made=made, child=child)


def prepare_run_dir(run_dir: Path, *, where: tuple[str, str | None]) -> bool:
    """Create `run_dir` and check that it takes files, before anything starts; a ConfigError naming
    the flag or key (`where`: name, config file) when it cannot. Returns whether it was made here."""
    from llmload.errors import ConfigError

    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".llmload-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot write the run directory {run_dir}: {reason}", file=where[1],
                          key=where[0]) from None
    return made


def _remove_if_empty(run_dir: Path | None) -> None:
    if run_dir is not None and run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


def _role_clash(*, master: bool, worker: bool, processes: int) -> str | None:
    """Which of --master, --worker and --processes cannot go together (None when they can)."""
    if master and worker:
        return "--master and --worker exclude each other: a process is one or the other"
    if processes and (master or worker):
        return f"--processes cannot be combined with --{'master' if master else 'worker'}: " \
               "--processes starts a master and its local workers itself"
    return None


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
    from llmload.runtime.signals import LAUNCHED_ENV

    return {**os.environ, "PYTHONUNBUFFERED": "1", LAUNCHED_ENV: str(os.getpid())}


def _start_gated() -> Any:
    """The Locust child, started now and held before it parses its command line (`llmload.runtime.gate`)."""
    from llmload.runtime.gate import GatedChild

    return GatedChild(BOOT, _child_env())


def _wait_locust(cmd: list[str], run_dir: Path | None, *, made: bool = False, child: Any = None) -> int:
    """Run Locust in its own process group and wait for it; the stop signals go to it once
    (`llmload.runtime.signals`). `child`: a `GatedChild` started earlier, released here to run `cmd`.
    Returns the verdict's exit code, or 128 + the signal when stopped."""
    from llmload.runtime.signals import StopSignals, end_process_group, interrupted_exit_code, say

    with StopSignals() as stops:
        if child is not None:
            stops.child = child.release(cmd)
        else:
            stops.child = subprocess.Popen(cmd, env=_child_env(), stdin=subprocess.DEVNULL, start_new_session=True)
        stops.forward()  # a signal that came while it was starting
        code = stops.child.wait()
        end_process_group(stops.child.pid)
        _remove_if_empty(run_dir if made else None)  # made for the run, never used (stopped or failed first)
        verdict = verdict_exit_code(run_dir) if run_dir is not None and stops.first is None else None
    if stops.first is not None:
        name, exit_code = signal.Signals(stops.first).name, interrupted_exit_code(stops.first)
        done = (f"{run_dir} finalised with the steps that ran" if run_dir is not None
                and (run_dir / "summary.json").exists() else "no summary was written")
        say(f"llmload: interrupted by {name}: {done} (exit code {exit_code})")
        return exit_code
    if run_dir is None:  # a worker: Locust's own code
        return code
    if verdict is not None:
        return verdict
    return code if code in (2, 3) else 3


def _output_dir(config, config_path: Path) -> Path:
    out = Path(config.output)
    return out if out.is_absolute() else Path.cwd() / out
