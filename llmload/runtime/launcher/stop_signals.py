"""`llmload run`'s side of a stop: signals to the parent reach the Locust child, once, and nothing outlives it.

The Locust child runs in its own session (process group), so a terminal's Ctrl-C reaches only the
parent. The parent catches SIGINT, SIGTERM and SIGHUP while the child runs and sends the child one
signal (SIGTERM; SIGHUP as SIGHUP, so the child lets go of the closing terminal too): the child
cancels what is queued or in flight (recorded `cancelled`), marks the current step `partial` and the
rest `not_run`, finalises the run directory and exits. Further signals only say that finalisation is
under way: nothing abandons it. When the child has exited, whatever is left of its process group
(the workers `--processes` forked) gets a grace period, then SIGTERM, then SIGKILL.

The exit code of an interrupted run is 128 + the first signal's number (130 SIGINT, 143 SIGTERM,
129 SIGHUP), whatever the verdict of the steps that ran (`summary.json` holds it). A signal after the
run has finished (`--web`: the UI stays up until Ctrl-C) interrupts nothing: it closes the UI, says
nothing about cancelling, and the exit code is the run's verdict.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from llmload.errors import interrupted_exit_code  # re-exported: the launcher's code for a signal

__all__ = ["LAUNCHED_ENV", "ORPHAN_GRACE_S", "STOP_SIGNALS", "StopSignals", "detach_hung_up_terminal", "end_process_group",
           "follow_parent", "interrupted_exit_code", "say"]

#: set in the Locust child's environment by `llmload run` to its PID (the child then leaves the first stop
#: message to it, and follows it: `follow_parent`)
LAUNCHED_ENV = "LLMLOAD_LAUNCHED"
#: the signals that stop a run (and finalise it)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """While active, the stop signals are caught: the first is forwarded to `child` (SIGTERM; SIGHUP as is).

        with StopSignals() as stops:
            stops.child = subprocess.Popen(cmd, start_new_session=True)
            stops.child.wait()
        if stops.first is not None: ...
    """

    def __init__(self, *, out=None, finished: Callable[[], bool] | None = None) -> None:
        self.received: list[int] = []
        self.child: subprocess.Popen | None = None
        #: tells whether the run has already finished (a `--web` run's UI stays up after it)
        self.finished = finished
        #: the first stop signal came after the run had finished: a close, not an interruption
        self.after_run = False
        self._forwarded = False
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._out = out or sys.stderr

    @property
    def first(self) -> int | None:
        """The first stop signal received, or None."""
        return self.received[0] if self.received else None

    def __enter__(self) -> StopSignals:
        for signo in STOP_SIGNALS:
            self._previous[signo] = signal.signal(signo, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signo, handler in self._previous.items():
            signal.signal(signo, handler)

    def _on_signal(self, signo: int, frame: FrameType | None) -> None:
        self.received.append(signo)
        detach_hung_up_terminal(signo)
        name = signal.Signals(signo).name
        if len(self.received) == 1 and self.finished is not None and self.finished():
            self.after_run = True  # nothing to cancel: the exit code is the run's verdict
            self._say(f"llmload: {name}: the run has finished: closing")
        elif len(self.received) == 1:
            self._say(f"llmload: {name}: stopping the run: in-flight requests are recorded as cancelled, "
                      "then the run directory is finalised")
        else:
            self._say(f"llmload: {name} again: still finishing the run directory (it is written before "
                      "llmload exits)")
        self.forward()

    def forward(self) -> None:
        """Send the child its one signal, if a stop signal came and the child runs (idempotent)."""
        if self._forwarded or not self.received or self.child is None or self.child.poll() is not None:
            return
        self._forwarded = True
        # SIGHUP stays SIGHUP (the child then lets go of the closing terminal too); SIGINT becomes
        # SIGTERM, whose default action (before Locust's init) ends the child without a traceback
        forwarded = signal.SIGHUP if self.received[0] == signal.SIGHUP else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child.pid, forwarded)

    def _say(self, line: str) -> None:
        say(line, self._out)


#: how long a Locust child may go on finalising once its launcher is gone, before its process group is killed
ORPHAN_GRACE_S = 60.0


def follow_parent(*, grace_s: float = ORPHAN_GRACE_S) -> None:
    """In a Locust process started by `llmload run` (`LAUNCHED_ENV` holds the parent's PID): get
    SIGTERM when that parent dies, even by SIGKILL (Linux `PR_SET_PDEATHSIG`), so the run still stops
    and finalises instead of running on as an orphan; at once if the parent is already gone. A stop that
    cannot finish (a hung finalisation, SIGTERM ignored) does not keep it alive: `grace_s` after the
    parent is gone, a watchdog thread (a real one, beside gevent's hub) kills its process group (it and
    the workers `--processes` forked), so no orphan keeps the master port or the load going."""
    parent = os.environ.get(LAUNCHED_ENV, "")
    if not parent.isdigit() or os.getsid(0) != os.getpid():  # only the process `llmload run` started
        return  # (it leads its own session; the workers Locust forks from it do not)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    _start_orphan_watchdog(int(parent), grace_s)
    if os.getppid() != int(parent):  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _start_orphan_watchdog(parent: int, grace_s: float, *, poll_s: float = 0.25) -> None:
    """A daemon OS thread (not a greenlet: it must run while the hub is stuck) that kills this process's
    group `grace_s` after `parent` stopped being its parent."""
    import _thread

    monkey = sys.modules.get("gevent.monkey")  # a Locust process is patched: take the real thread and sleep
    if monkey is not None:  # (looked up, not imported: the launcher never loads gevent)
        start_thread, sleep = monkey.get_original("_thread", "start_new_thread"), monkey.get_original("time", "sleep")
    else:
        start_thread, sleep = _thread.start_new_thread, time.sleep

    def watch() -> None:
        while os.getppid() == parent:
            sleep(poll_s)
        sleep(grace_s)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    start_thread(watch, ())


def say(line: str, out=None) -> None:
    """Print a line; a closed terminal, or a signal arriving mid-print, must not break a stop."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        print(line, file=out or sys.stderr, flush=True)


def detach_hung_up_terminal(signo: int) -> None:
    """On SIGHUP the terminal is going away: stdout and stderr, where they are that terminal, go to
    /dev/null so that writing the run's last lines cannot fail the finalisation."""
    if signo != signal.SIGHUP:
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            if os.isatty(fd):
                os.dup2(devnull, fd)
        os.close(devnull)


def end_process_group(pgid: int, *, grace_s: float = 5.0, term_s: float = 5.0) -> None:
    """End what is left of process group `pgid` once its leader has exited (and been reaped): wait
    `grace_s` for it to empty, then SIGTERM, wait `term_s`, then SIGKILL. Each leftover is signalled by
    its PID (never the group: a new process could have been given the leader's number since)."""
    for sig, wait_s in ((None, grace_s), (signal.SIGTERM, term_s), (signal.SIGKILL, 2.0)):
        left = _group_members(pgid)
        if not left:
            return
        if sig is not None:  # the first pass only waits
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_members(pgid):
            time.sleep(0.05)


def _group_members(pgid: int) -> list[int]:
    """The live processes of group `pgid` other than its (gone) leader; zombies, which only wait to
    be reaped, do not count."""
    try:  # signal 0 sends nothing: whether any process is left in the group, without psutil (~0.015 s of CPU)
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except OSError:
        pass
    import psutil  # a dependency of Locust

    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.pid != pgid and proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members
