"""A web run's finalisation (merge, analysis, matplotlib report: seconds of CPU) runs off the gevent loop,
so the web UI's greenlets keep answering meanwhile (issue 20; a test of a second web run timed out
under load while the report was drawn). Headless runs finalise in place, as before.
"""

from __future__ import annotations

import time

import gevent
import pytest
from virtual_time import FakeHost

import llmload.rundir.finalise as finish
from llmload.runtime.master.lifecycle import RunLifecycle, RunOptions
from llmload.runtime.master.states import RunState


def _busy_finalise(ticks: list[int]):
    def finalise_run(run_dir, config, *, report=True, outcome=None, finished=None, closing=None):  # noqa: ARG001
        seen = len(ticks)
        deadline = time.perf_counter() + 0.4
        while time.perf_counter() < deadline:  # CPU-bound, never yields to gevent (like matplotlib)
            pass
        return 7 if len(ticks) > seen else 0  # 7: the loop ran while this worked
    return finalise_run


def _session(tmp_path, *, web: bool) -> RunLifecycle:
    """A lifecycle whose run is under way, finalised by the test (no Locust)."""
    life = RunLifecycle(FakeHost(web=web))
    life.config, life.run_dir, life.options = object(), tmp_path, RunOptions(report=False)
    life._to(RunState.PREFLIGHT)
    life._to(RunState.RUNNING)
    return life


@pytest.mark.parametrize("web, loop_ran", [(True, True), (False, False)])
def test_web_finalisation_leaves_the_gevent_loop_running(tmp_path, monkeypatch, web, loop_ran):
    ticks: list[int] = []
    monkeypatch.setattr(finish, "finalise_run", _busy_finalise(ticks))

    def ticker():
        while True:
            ticks.append(1)
            gevent.sleep(0.01)

    other = gevent.spawn(ticker)
    gevent.sleep(0.02)
    try:
        session = _session(tmp_path, web=web)
        session.finalise()
    finally:
        other.kill()
    assert (session.exit_code == 7) is loop_ran
    assert session.state is RunState.DONE


_FRESH_FONTS = """
from gevent import monkey
monkey.patch_all()
import sys
from types import SimpleNamespace
import llmload.rundir.finalise as finish
from llmload.runtime.master.lifecycle import RunLifecycle, RunOptions
from llmload.runtime.master.states import RunState

def finalise_run(run_dir, config, *, report=True, outcome=None, finished=None, closing=None):  # noqa: ARG001
    from matplotlib.figure import Figure  # the report's first matplotlib import, as in a fresh container
    Figure()
    (run_dir / "report.html").write_text("ok")
    return 0

finish.finalise_run = finalise_run
session = RunLifecycle(SimpleNamespace(web=True, launched=False, exit_note=lambda code: f" (exit code {code})",
                                          set_exit_code=lambda code: None))
session.config, session.run_dir = object(), __import__("pathlib").Path(sys.argv[1])
session.options = RunOptions(report=True)
session._to(RunState.PREFLIGHT)
session._to(RunState.RUNNING)
session.finalise()
print("exit", session.exit_code)
"""


def test_a_web_run_reports_with_an_empty_font_cache(tmp_path):
    """matplotlib's first import lists the system fonts with a subprocess; gevent's patched subprocess
    cannot start one from the finalisation thread (a fresh container's web run lost its report so)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}
    done = subprocess.run([sys.executable, "-c", _FRESH_FONTS, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert "exit 0" in done.stdout, done.stderr[-2000:]
    assert f"llmload: report {tmp_path / 'report.html'}" in done.stdout
