"""Shared fixtures: servers started as subprocesses on free ports, killed by PID at the end."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmload.blas import one_blas_thread

# before numpy's first import in this process (the test modules, `support`): one OpenBLAS thread, as the
# `llmload` command has (llmload/blas.py); every process a test starts inherits it (bench scripts, the sim,
# `python -c` probes): about 0.07 s of CPU less in each of the suite's processes that imports numpy
one_blas_thread()

from support import (  # noqa: E402
    REPO,
    TRUTH_STEP_SECRET,
    SimServer,
    TruthStepRun,
    free_port,
    run_virtual_demo,
    start_sim,
    stop_process,
    truth_step_config,
    unrendered_svg,
    wait_http,
    write_config,
)

# re-exported for modules that import them from here; prefer `from support import ...`
__all__ = ["REPO", "SimServer", "free_port", "sim_factory", "start_sim",
           "stop_process", "truth_step_run", "unrendered_plots", "virtual_demo", "vllm_sim", "wait_http"]

# A suite started with SIGINT ignored (`nohup`, or a background job of a non-interactive shell) would pass
# that on to every process it starts, and the tests that stop a command with Ctrl-C would see it ignored.
# A handled signal is reset to its default action across exec, so handling it here gives every child
# Ctrl-C's usual meaning, however the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest rewrites the asserts of every test module it collects (about 320: 7 s of CPU per pytest process,
# and the README's command starts twenty: a controller and fourteen xdist workers, then a controller and four) and keeps
# the result in __pycache__ (git-ignored), but writes nothing when bytecode writing is off
# (PYTHONDONTWRITEBYTECODE, set in some images): then every process rewrites them all again. The suite's
# own process writes its cache whatever that setting (the processes it starts keep the setting).
sys.dont_write_bytecode = False

#: markers whose tests run one at a time on one xdist worker: one llama-server (CPU-bound, its figures are
#: what those tests assert), one Docker Compose project (the two modes publish the same host port and
#: check that none of the other's containers is left), one Chromium; the property tests (`hypothesis`, which
#: they import inside the test: a worker that collects a module importing it pays 0.17 s of CPU for the import
#: and 0.1 s for hypothesis' pytest plugin reading the constants of every local module, so the fourteen workers
#: paid it fourteen times, while the ten property tests fell on about half of them)
ONE_WORKER_MARKERS = ("real_engine", "docker", "browser", "hypothesis")
#: fixture scopes whose value tests share: their tests go to one worker, so the fixture is built once
SHARED_SCOPES = ("module", "package", "session")


#: each test's wall time beside two CPU hogs (`scripts/test_durations.py` writes it from a JUnit run); a
#: test not in it (new, renamed, under a second) is expected to take `DEFAULT_S` by its `slow` mark
DURATIONS: dict[str, float] = json.loads((Path(__file__).parent / "durations.json").read_text(encoding="utf-8"))
DEFAULT_S = {"slow": 5.0, "quick": 0.1}


def expected_s(item: pytest.Item) -> float:
    """How long `item` is expected to take (its node id before xdist appends its group)."""
    return DURATIONS.get(item.nodeid, DEFAULT_S["slow" if item.get_closest_marker("slow") else "quick"])


def xdist_group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test under `--dist loadgroup` (the README's test command): the first of
    ONE_WORKER_MARKERS it carries, else the shared fixture of ours it uses (its module's path for a
    module-scoped one), else None (the test goes to any worker)."""
    for name in ONE_WORKER_MARKERS:
        if item.get_closest_marker(name) is not None:
            return name
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        fixturedef = defs[-1]
        if fixturedef.scope in SHARED_SCOPES and Path(fixturedef.func.__code__.co_filename).is_relative_to(
                REPO / "tests"):
            return item.nodeid.split("::")[0] if fixturedef.scope == "module" else fixturedef.baseid + "::" + name
    return None


#: words the text of a test module holds if any of its tests can be quiet: its own mark, or the
#: real_engine one (`pytest_collection_modifyitems` makes those quiet)
QUIET_WORDS = ("quiet", "real_engine")


def quiet_only(config: pytest.Config) -> bool:
    """The README's quiet part (`-m quiet`): only quiet tests are wanted."""
    return (config.option.markexpr or "").strip() == "quiet"


def may_hold_quiet_tests(path: Path) -> bool:
    text = path.read_text(encoding="utf-8", errors="replace")
    return any(word in text for word in QUIET_WORDS)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m quiet`, a test module whose text names neither mark is not imported: it holds no quiet
    test, and importing the 190 such modules was 10 of the 12 s each of the quiet part's four pytest
    processes spent collecting (beside two CPU hogs, 14 s before its first test). A full collection
    checks that no quiet test hides from these words (`pytest_collection_modifyitems`)."""
    if (quiet_only(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_")
            and not may_hold_quiet_tests(collection_path)):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("real_engine") is not None:
            item.add_marker(pytest.mark.quiet)  # llama.cpp's speed is what they measure: few neighbours
    if isinstance(config, pytest.Config) and not quiet_only(config):  # a full collection
        hidden = sorted({str(item.path) for item in items if item.get_closest_marker("quiet") is not None
                         and not may_hold_quiet_tests(item.path)})
        if hidden:
            raise pytest.UsageError(f"quiet tests in modules whose text names neither of {QUIET_WORDS}: "
                                    f"`-m quiet` would not collect them: {hidden}")
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):
        # an xdist worker: the work units (a group, or one test) in order of their expected time, longest
        # first: xdist hands them out in this order (`pytest_configure`), so that no two-minute test
        # starts last while the other workers are idle (the quiet part's demo did: 346 s where 290 would do)
        unit = {item: xdist_group_of(item) or item.nodeid for item in items}
        total: dict[str, float] = {}
        for item in items:
            total[unit[item]] = total.get(unit[item], 0.0) + expected_s(item)
        items.sort(key=lambda item: (-total[unit[item]], unit[item]))  # stable: a unit's tests keep their order


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection left alive (the libraries the test modules import: pandas, pyarrow, matplotlib,
    hypothesis, ~140,000 objects) is moved out of the garbage collector's sight (`gc.freeze`): those objects
    live to the end anyway, and every full collection during the tests (about one per two tests that build
    frames) and pytest's five at its end (`unraisableexception`) traversed them all again, ~0.05 s each.
    Objects the tests make are collected as before."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter's summary, which comes after every sessionfinish
def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker that ran no property test (`hypothesis` never imported) drops hypothesis' pytest plugin
    before its terminal summary: the plugin's summary imports hypothesis (0.13 s of CPU) to say whether it wrote
    observations, and there is nothing of hypothesis' to report (the controller's summary still runs it)."""
    if hasattr(session.config, "workerinput") and "hypothesis" not in sys.modules:
        plugin = session.config.pluginmanager.get_plugin("hypothesispytest")
        if plugin is not None:
            session.config.pluginmanager.unregister(plugin)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "dist", "no") == "loadgroup":
        # the order the workers collected (longest unit first), not xdist's default: most tests first
        config.option.loadscopereorder = False


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator:
    """Start simulated servers: `sim_factory(flavor="ollama", config={...})`; all killed at the end."""
    started: list[SimServer] = []

    def factory(**kwargs) -> SimServer:
        server = start_sim(tmp_path, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        stop_process(server.proc)


@pytest.fixture
def unrendered_plots(monkeypatch) -> None:
    """Every report plot built as usual (its data, axes and lines) but not drawn: a placeholder SVG. For a
    test that reads a report's text, not its plots: matplotlib's savefig is most of a report's CPU.
    (`limits_view` imports `plots._svg` where it draws, so it draws this placeholder too.)"""
    from llmload.report import plots

    monkeypatch.setattr(plots, "_svg", unrendered_svg)


@pytest.fixture
def vllm_sim(sim_factory) -> SimServer:
    return sim_factory(flavor="vllm")


@pytest.fixture(scope="session")
def virtual_demo(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """`llmload demo`'s two runs whole in virtual time (`support.run_virtual_demo`) into a folder, once for the
    session: (folder, each run's exit code). tests/runtime/test_demo.py judges the demo's decisions on them,
    tests/runtime/test_virtual_run.py runs the ladder once more for the same summary. Their reports' plots
    are built but not drawn (`unrendered_plots`): their text is read; the live demo draws both reports."""
    from llmload.report import plots

    folder = tmp_path_factory.mktemp("virtual-demo")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "_svg", unrendered_svg)
        return folder, run_virtual_demo(folder)


@pytest.fixture(scope="session")
def truth_step_run(tmp_path_factory) -> Iterator[TruthStepRun]:
    """One `support.truth_step_config` step through Locust against a vLLM sim, the target's key read from
    an environment variable, no report.html: the run that tests/runtime/test_runs.py (the client's times
    and the key) and tests/analysis/test_sim_ground_truth.py (the step's numbers) check against the sim's
    log. One run for both (they ran the same step each: 9 s of a quiet worker); its tests share a worker."""
    from llmload.runtime.launcher.run import locust_command

    tmp = tmp_path_factory.mktemp("truth-step")
    sim = start_sim(tmp, flavor="vllm")
    try:
        config = truth_step_config(sim.url)
        config["target"]["api_key_env"] = "LLMLOAD_TEST_KEY"
        run_dir = tmp / "run"
        done = subprocess.run(locust_command(write_config(tmp, config), run_dir, report=False), capture_output=True, text=True,
                              timeout=120, env={**os.environ, "LLMLOAD_TEST_KEY": TRUTH_STEP_SECRET})
        yield TruthStepRun(sim=sim, run_dir=run_dir, returncode=done.returncode,
                           output=(done.stdout + done.stderr)[-3000:])
    finally:
        stop_process(sim.proc)
