"""Command-line flags and start-up: every numeric flag bounded (one line, exit 2, nothing started), `--help`
fast and without pandas, no `<bool>` metavar (issue 19 item 17, issue 17 "Start-up and text")."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest
from support import REPO

from llmload.cli import main

CONFIG = "target: {url: 'http://127.0.0.1:8000'}\nshape: {ladder: {steps: [{rate: 1, duration: 5s}]}}\n"


@pytest.fixture
def nothing_starts(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("a bad flag was accepted: something started")

    for target in ("llmload.runtime.master.preflight.check_reachable", "llmload.runtime.launcher.run.locust_command",
                   "llmload.sim.server.SimServer", "llmload.calibrate.run_calibrate", "llmload.llama_server.engine_command",
                   "llmload.telemetry.gpu_agent.serve_gpu_agent"):
        monkeypatch.setattr(target, started)


@pytest.mark.parametrize("args,flag", [
    (["run", "{config}", "--processes", "-5"], "--processes"),
    (["run", "{config}", "--processes", "100000"], "--processes"),
    (["run", "{config}", "--master-port", "99999"], "--master-port"),
    (["run", "{config}", "--master-port", "0"], "--master-port"),
    (["run", "{config}", "--master", "--expect-workers", "0"], "--expect-workers"),
    (["sim", "--port", "99999"], "--port"),
    (["sim", "--port", "-1"], "--port"),
    (["sim", "--seed", "-1"], "--seed"),
    (["calibrate", "--processes", "-1"], "--processes"),
    (["calibrate", "--processes", "0"], "--processes"),
    (["calibrate", "--target", "http://127.0.0.1:99999"], "--target"),
    (["calibrate", "--target", "http://[::1"], "--target"),
    (["engine", "serve", "--port", "70000"], "--port"),
    (["engine", "serve", "--parallel", "0"], "--parallel"),
    (["engine", "serve", "--threads", "-2"], "--threads"),
    (["gpu-agent", "--port", "70000"], "--port"),
    (["gpu-agent", "--interval", "0"], "--interval"),
    (["gpu-agent", "--interval", "nan"], "--interval"),
    (["gpu-agent", "--interval", "inf"], "--interval"),
    (["plan", "{run}", "--users", "-3", "--think-time", "30s"], "--users"),
])
def test_bad_numeric_flag_is_one_line_exit_2(tmp_path, capsys, nothing_starts, args, flag):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    argv = [a.replace("{config}", str(config)).replace("{run}", str(tmp_path)) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("llmload: error: ") and flag in err, err


def test_usage_error_names_the_subcommand_help(capsys):
    assert main(["run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "llmload: error: Missing argument 'config'. (see llmload run --help)"


PROBE = """
import json, sys
from llmload.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = [m for m in ("pandas", "pyarrow", "numpy", "locust", "gevent", "matplotlib") if m in sys.modules]
print("\\nHEAVY=" + json.dumps(heavy))
"""


#: runs each command line given as a JSON list in turn, in one process, and after each prints what it
#: had loaded of the heavy modules: a module loaded by one help shows from that help on
PROBE_EACH = """
import json, sys
from llmload.cli import main
for args in json.loads(sys.argv[1]):
    try:
        main(args)
    except SystemExit:
        pass
    heavy = [m for m in ("pandas", "pyarrow", "numpy", "locust", "gevent", "matplotlib") if m in sys.modules]
    print("\\nHEAVY=" + json.dumps(heavy), flush=True)
"""


def test_help_imports_no_heavy_module():
    """One process for the four helps (a process each cost 0.2 s of CPU to start the same imports): the
    first help to load a heavy module is named."""
    helps = [["--help"], ["run", "--help"], ["sim", "--help"], ["report", "--help"]]
    done = subprocess.run([sys.executable, "-c", PROBE_EACH, json.dumps(helps)], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    outputs = done.stdout.split("\nHEAVY=")
    assert len(outputs) == len(helps) + 1, done.stdout + done.stderr
    for args, output, after in zip(helps, outputs[:-1], outputs[1:], strict=True):
        heavy = json.loads(after.splitlines()[0])
        assert heavy == [], f"`llmload {' '.join(args)}` imported {heavy}"
        assert "Usage" in output, f"llmload {' '.join(args)}: {output}"


def _cpu_seconds(args: list[str], cwd) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "llmload.cli", *args], capture_output=True, cwd=cwd, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("args", [["run", "--help"], ["run", "{bad}"]])
def test_help_and_config_errors_answer_within_half_a_second_of_cpu(tmp_path, args):
    """Target (issue 17): half a second of CPU; measured 0.38-0.47 s on a quiet 2-core VM, 0.94-0.99 s
    before the lazy imports. CPU seconds still grow on a machine whose cores are shared (caches,
    frequency), so the assertion leaves room for that and still fails the old eager-import CLI."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG + "shape: {}\n")  # a duplicate key
    argv = [a.replace("{bad}", str(bad)) for a in args]
    # the best of up to three tries (CPU time, not wall: a busy machine adds little); the first under the
    # limit answers, so a healthy command starts once rather than three times
    tries = []
    while len(tries) < 3 and (not tries or min(tries) >= 0.75):
        tries.append(_cpu_seconds(argv, REPO))
    best = min(tries)
    assert best < 0.75, f"llmload {' '.join(args)} took {best:.2f} s of CPU (target 0.5 s on a quiet machine)"


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["sim", "--help"], ["calibrate", "--help"]])
def test_no_bool_metavar(capsys, args):
    main(args)
    out = capsys.readouterr().out
    assert "--help" in out and "<bool>" not in out


def test_calibrate_against_a_dead_target_is_exit_3(capsys, tmp_path, monkeypatch):
    from support import free_port

    monkeypatch.setattr("llmload.calibrate.tempfile.mkdtemp", lambda prefix="": str(tmp_path))
    assert main(["calibrate", "--target", f"http://127.0.0.1:{free_port()}", "--quick"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "target unreachable" in err, err


def test_version_prints_the_package_version_and_exits_0(capsys):
    from llmload import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"llmload {__version__}"
    done = subprocess.run([sys.executable, "-c", PROBE, "--version"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert f"llmload {__version__}" in done.stdout and done.stdout.rsplit("HEAVY=", 1)[1].strip() == "[]"


@pytest.mark.parametrize(("args", "usage"), [(["run", "--help"], "[OPTIONS] CONFIG"),
                                             (["plan", "--help"], "[OPTIONS] RUN_DIR"),
                                             (["report", "--help"], "[OPTIONS] RUN_DIR")])
def test_usage_lines_name_arguments_in_capitals(capsys, args, usage):
    main(args)
    out = capsys.readouterr().out
    assert usage in out and "{" not in out.split("Usage:")[1].splitlines()[0]


def test_every_command_s_line_in_the_help_is_one_whole_sentence(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    plan = out[out.index(" plan "):out.index(" calibrate ")]
    assert "passing" in plan and "run." in plan and "steady state" not in plan  # its first paragraph only


@pytest.mark.parametrize("extra,flags,key", [
    ("client: {max_concurrency: 1}\n", ["--processes", "2"], "client.max_concurrency"),
    ("client: {max_concurrency: 3}\n", ["--master", "--expect-workers", "4"], "client.max_concurrency"),
])
def test_more_workers_than_the_pools_users_is_one_line_exit_2(tmp_path, capsys, monkeypatch, nothing_starts, extra,
                                                             flags, key):
    """Locust splits the pool's users over the workers: a worker with none would never send its share."""
    monkeypatch.setenv("LLMLOAD_WORKER_TOKEN", "a-worker-token-of-32-characters!")
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG + extra)
    assert main(["run", str(config), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("llmload: error: ") and key in err, err
    assert not (tmp_path / "runs").exists()


def test_the_app_builds_its_command_once_and_again_for_a_command_added_later(capsys):
    """`FlagsApp` keeps the click command it built on its first call; a command registered afterwards
    still runs."""
    from llmload.cliparams import FlagsApp

    app = FlagsApp(pretty_exceptions_enable=False)

    @app.command()
    def first() -> None:
        print("first ran")

    @app.command()
    def second() -> None:
        print("second ran")

    app(["first"], standalone_mode=False)
    built = app._built
    app(["second"], standalone_mode=False)
    assert app._built is built  # not built again

    @app.command()
    def third() -> None:
        print("third ran")

    app(["third"], standalone_mode=False)
    assert capsys.readouterr().out.split() == ["first", "ran", "second", "ran", "third", "ran"]

