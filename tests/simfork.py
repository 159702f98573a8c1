"""`llmload sim` for the tests without an interpreter's boot each time: a fork of a forkserver that imported
the sim once.

Each `llmload sim` exec'd by a test paid ~0.25 s of CPU (the interpreter, typer, the sim server's modules)
before it served anything, ~150 times a suite. Here each pytest process starts one `multiprocessing`
forkserver that imports `llmload.cli` and the sim server's modules (`PRELOAD`); each sim is a fork of it
that runs `llmload.cli.main(["sim", ...])` with the arguments the command line would have had, its stdout
and stderr (fds 1 and 2) on the log file, the environment and working directory the test gave it.
`ForkedSim` answers like the `subprocess.Popen` it replaces (poll, wait, terminate, kill, send_signal,
pid, returncode; a death by signal is minus the signal, as Popen says).

What differs from an exec'd sim, and why no test sees it: the modules were imported once, in the
forkserver, under the environment of the test that started the first sim (the test's own environment is
set in the fork before the command runs; llmload reads none at import, and no test sets one a library
reads at import, such as prometheus-client's PROMETHEUS_DISABLE_CREATED_SERIES); the fork's parent is the
forkserver, not the test (it reaps the sim and passes its exit status back; its CPU is not a waited
child's of the test's process); every fork shares the forkserver's string-hash seed (`hash()` keys the
prefix cache's dict, never a draw: the sim's draws come from `random.Random(seed)`, the `random` module
reseeds itself in a fork, uuid4 reads the OS). Under the `pytest` script (not `python -m pytest` or an
xdist worker) multiprocessing also imports that script in each fork (~pytest's import). The real command
line keeps its tests:
`llmload.sim.process.start_sim_process` still execs `python -m llmload.cli sim` (tests/sim/
test_sim_reuse_port.py, the demo and calibrate tests), and `start_sim(..., forked=False)` execs too.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["ForkedSim", "PRELOAD", "start_forked_sim"]

#: what a forked sim would otherwise import after the fork (`llmload.cli.main` and `llmload.sim.server.serve`
#: import the rest lazily: prometheus-client for a vLLM sim's /metrics, the YAML reader for `--config`, what
#: typer and pydantic import when they first parse; a name a newer version lacks is skipped by the forkserver)
PRELOAD = ["llmload.cli", "llmload.startsignal", "llmload.redaction", "llmload.sim.server", "llmload.sim.metrics",
           "llmload.yamlfile", "prometheus_client", "pydantic.type_adapter", "typer._adapters",
           "typer._click.decorators", "encodings.utf_8_sig", "simfork"]

_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """This process's forkserver context, its preload set (the server starts at the first sim)."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _run_command(argv: list[str], log: str, env: dict[str, str], cwd: str) -> None:
    """In the fork: what `python -m llmload.cli <argv>` with stdout and stderr on `log`, `env` and `cwd`
    would do, ending with its exit code."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # as PYTHONUNBUFFERED=1 makes them: every write reaches the file at once
    for name, errors in (("stdout", "strict"), ("stderr", "backslashreplace")):
        stream = getattr(sys, name)  # the forkserver's: the encoding and errors the command would have
        setattr(sys, name, io.TextIOWrapper(io.FileIO(1 if name == "stdout" else 2, "w", closefd=False),
                                            encoding=getattr(stream, "encoding", None) or "utf-8",
                                            errors=getattr(stream, "errors", None) or errors, write_through=True))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    from llmload.cli import main

    sys.exit(main(argv))


class ForkedSim:
    """A forked sim as the `subprocess.Popen` of an exec'd one: `returncode` is None until `poll` or `wait`
    sees the exit; a signal to a process that has exited is not sent (its PID may be another's by then)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, args: list[str]) -> None:
        self._process = process
        self.args = args
        self.pid: int = process.pid  # type: ignore[assignment]  # started
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
            self._process.close()  # its sentinel's file descriptor
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]  # None: never here
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited since (Popen ignores this too)
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_forked_sim(argv: list[str], *, log: Path, env: dict[str, str], cwd: Path) -> ForkedSim:
    """Fork `llmload sim` (`argv` as the command line's, from "sim" on) with stdout and stderr on `log`
    (created empty here)."""
    log.write_bytes(b"")
    process = _forkserver().Process(target=_run_command, args=(argv, str(log), env, str(cwd)), daemon=True,
                                    name=f"llmload sim {log.name}")
    process.start()
    return ForkedSim(process, [sys.executable, "-m", "llmload.cli", *argv])
