"""The launcher's stop signals (`StopSignals`) in-process: each of SIGINT, SIGTERM and SIGHUP sent to this
process is caught, said once by name, and forwarded to the child as the one signal it gets (SIGTERM;
SIGHUP as SIGHUP), and the run's exit code is 128 + the first signal's number.

This is the part of `test_signals.py`'s real-process runs that differs between the three signals; the
real runs keep one case per signal the Locust child receives (SIGHUP, SIGTERM), and SIGINT's exit code
(130) through `test_a_signal_stops_a_web_ui_run_and_frees_its_port`.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from llmload.runtime.launcher import stop_signals
from llmload.runtime.launcher.stop_signals import StopSignals, interrupted_exit_code

#: a child that waits to be signalled (its own session, as `llmload run` starts the Locust child), dying of
#: SIGTERM and SIGHUP as the Locust child does even when the suite runs under `nohup` (SIGHUP ignored,
#: which a child would inherit)
_SLEEPER = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
            "signal.signal(signal.SIGTERM, signal.SIG_DFL); print('ready', flush=True); time.sleep(60)"]


def _sleeper() -> subprocess.Popen:
    """Start the child and wait until its signals are set."""
    child = subprocess.Popen(_SLEEPER, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.mark.parametrize("sig, forwarded", [(signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGTERM),
                                            (signal.SIGHUP, signal.SIGHUP)])
def test_a_stop_signal_is_said_by_name_and_forwarded_to_the_child_once(sig, forwarded, monkeypatch):
    detached = []  # SIGHUP would point a terminal's stdout and stderr at /dev/null (pytest -s in a terminal)
    monkeypatch.setattr(stop_signals, "detach_hung_up_terminal", detached.append)
    out = io.StringIO()
    before = signal.getsignal(sig)
    child = _sleeper()
    try:
        with StopSignals(out=out) as stops:
            stops.child = child
            os.kill(os.getpid(), sig)  # the handler runs on the main thread before kill returns here
            os.kill(os.getpid(), sig)  # a second one: said, never forwarded again
            assert child.wait(timeout=30) == -forwarded
            stops.forward()  # idempotent: nothing more is sent
        assert stops.received == [sig, sig] and stops.first == sig and not stops.after_run
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    name = signal.Signals(sig).name
    lines = out.getvalue().splitlines()
    assert lines == [f"llmload: {name}: stopping the run: in-flight requests are recorded as cancelled, then the "
                     "run directory is finalised",
                     f"llmload: {name} again: still finishing the run directory (it is written before llmload "
                     "exits)"]
    assert interrupted_exit_code(sig) == 128 + sig
    assert detached == [sig, sig]  # each signal is offered to the terminal check (it acts on SIGHUP only)
    assert signal.getsignal(sig) == before  # the previous handler is back


def test_a_stop_signal_after_the_run_has_finished_closes_and_is_not_an_interruption():
    out = io.StringIO()
    child = _sleeper()
    try:
        with StopSignals(out=out, finished=lambda: True) as stops:
            stops.child = child
            os.kill(os.getpid(), signal.SIGINT)
            assert child.wait(timeout=30) == -signal.SIGTERM
        assert stops.after_run and stops.first == signal.SIGINT
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert out.getvalue() == "llmload: SIGINT: the run has finished: closing\n"


def test_a_run_has_finished_once_its_summary_and_its_report_unless_off_are_written(tmp_path):
    """What the launcher asks before a signal (`finished`): a `--web` run waits for Ctrl-C once its run
    directory is written (tests/runtime/test_signals.py sends one to a run with no report)."""
    from llmload.runtime.launcher.run import _run_finished

    assert not _run_finished(tmp_path) and not _run_finished(tmp_path, report=False)
    (tmp_path / "summary.json").write_text("{}")
    assert _run_finished(tmp_path, report=False) and not _run_finished(tmp_path)  # the report still to come
    (tmp_path / "report.html").write_text("")
    assert _run_finished(tmp_path)


def test_a_signal_before_the_child_exists_is_forwarded_when_it_does():
    out = io.StringIO()
    with StopSignals(out=out) as stops:
        os.kill(os.getpid(), signal.SIGTERM)
        child = _sleeper()
        try:
            stops.child = child
            stops.forward()  # as `llmload run` does once the child is started
            assert child.wait(timeout=30) == -signal.SIGTERM
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
