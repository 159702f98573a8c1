"""Signals to `llmload run` (issue 19 items 7-8, issue 17 "Lifecycle"): real processes against the sim.

Each test starts `llmload run` as a subprocess, waits until the first step has run a few seconds, sends
signals to the parent process alone (never its group), and checks that every process of the tree is
gone, the ports are free, the run directory is complete, the exit code is 128 + the signal and no
output holds a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from runtime_helpers import base_config, plan, records, summary, wait_step_running, write_config
from support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FINAL_FILES = ("records.parquet", "summary.json", "report.html", "plan.json", "manifest.json")
#: what a run started with `--no-report` finalises (the report after a stop: the repeated-signals test's run)
UNREPORTED_FILES = tuple(name for name in FINAL_FILES if name != "report.html")


def _ladder(sim_url: str) -> dict:
    config = base_config(sim_url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                              "steps": [{"rate": 4, "duration": "20s"},
                                                        {"rate": 6, "duration": "20s"}]}},
                         client={"max_concurrency": 32})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 100}  # ~3 s streams: some in flight
    return config


#: `llmload` started the way its console script starts it: the working directory is not on its import path
CONSOLE_SCRIPT = [sys.executable, "-c", "import sys; del sys.path[0]; from llmload.cli import main; sys.exit(main())"]


def _start(tmp_path: Path, config: dict, *flags: str, env: dict | None = None,
           cwd: Path | None = None) -> tuple[subprocess.Popen, Path, Path]:
    """Start `llmload run` on `config` (from `cwd` as the console script does, else as `python -m`)."""
    run_dir, log = tmp_path / "run", tmp_path / "llmload.log"
    entry = CONSOLE_SCRIPT if cwd is not None else [sys.executable, "-m", "llmload.cli"]
    cmd = [*entry, "run", str(write_config(tmp_path, config)), "--out", str(run_dir), *flags]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                env={**os.environ, **(env or {})})
    return proc, run_dir, log


def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children(recursive=True)


def _listening_ports(procs: list[psutil.Process]) -> set[int]:
    ports = set()
    for p in procs:
        try:
            ports |= {c.laddr.port for c in p.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue
    return ports


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _signal_and_check(proc: subprocess.Popen, run_dir: Path, log: Path, signals: list[int], *,
                      gap_s: float = 0.3, expect_children: int = 1, files: tuple[str, ...] = FINAL_FILES) -> str:
    """Send `signals` to the parent alone, then check what every test checks; returns the output."""
    children = _tree(proc)
    assert len(children) >= expect_children, children
    ports = _listening_ports(children)
    try:
        for i, sig in enumerate(signals):
            if i:
                time.sleep(gap_s)
            proc.send_signal(sig)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            for p in [*_tree(proc), psutil.Process(proc.pid)]:
                p.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    for p in alive:
        p.kill()
    output = log.read_text(errors="replace")
    assert not alive, f"processes outlived llmload run: {alive}\n{output[-3000:]}"
    assert all(_port_free(port) for port in ports), (ports, output[-3000:])
    assert code == 128 + signals[0], output[-3000:]
    assert "Traceback" not in output, output[-5000:]
    for name in files:
        assert (run_dir / name).exists(), (name, output[-3000:])
    return output


def _check_stopped_in_first_step(run_dir: Path) -> None:
    steps = plan(run_dir)["steps"]
    assert [s["status"] for s in steps] == ["partial", "not_run"]
    assert plan(run_dir).get("stopped") is True
    assert [s["verdict"] for s in summary(run_dir)["steps"]][1] == "not_run"
    df = records(run_dir)
    assert set(df["step"]) == {steps[0]["label"]}  # the second step never sent anything
    assert (df["outcome"] == "cancelled").sum() >= 3  # ~10 streams were in flight (2 s into the step)
    assert len(df) < steps[0]["planned_arrivals"]  # stopped: the rest of the step's arrivals never came


# one real run per signal the Locust child gets: SIGHUP here (forwarded as is), SIGTERM (what SIGINT and
# SIGTERM become) in the web UI's test below; what differs between the three in the parent (the line said,
# the signal forwarded, the exit code) is tests/runtime/test_stop_signals.py, in-process
def test_repeated_signals_stop_a_run_with_local_worker_processes_and_never_break_finalisation(sim_factory,
                                                                                              tmp_path):
    """One run for the mechanisms of the process tree: a SIGHUP to the parent reaches the Locust child as
    SIGHUP, the master's forked workers are stopped (not lost) with it, and the two SIGINTs that follow
    while it finalises never break the finalisation (its report included).

    The run is started from a directory holding a folder named `llmload` (issue 17): the Locust child
    put the working directory first on its import path, so that folder (the parent of a clone) shadowed
    the package and no manifest.json was written. An empty folder shadows an editable install (a
    namespace package wins over it); one with an empty `__init__.py` shadows any install: that one is
    used (both are kept out by the same removal of the working directory from the import path,
    `launcher.run.BOOT`, which the forked workers inherit)."""
    sim = sim_factory(flavor="vllm")
    cwd = tmp_path / "cwd"
    (cwd / "llmload").mkdir(parents=True)
    (cwd / "llmload" / "__init__.py").write_text("")
    proc, run_dir, log = _start(tmp_path, _ladder(sim.url), "--processes", "2", cwd=cwd)
    wait_step_running(run_dir, after_s=2.0, proc=proc)  # ~10 streams of ~3 s in flight at the stop
    started = time.monotonic()
    output = _signal_and_check(proc, run_dir, log, [signal.SIGHUP, signal.SIGINT, signal.SIGINT],
                               expect_children=3)
    assert time.monotonic() - started < 60  # not the 37 s left of the ladder, plus finalisation
    _check_stopped_in_first_step(run_dir)
    assert "still finishing the run directory" in output
    assert "interrupted by SIGHUP" in output
    steps = plan(run_dir)["steps"]
    assert not steps[0].get("lost_workers")  # the workers were stopped, not lost
    assert "cannot import" not in output, output[-3000:]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["client"]["llmload"], manifest.get("client")


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_a_signal_stops_a_web_ui_run_and_frees_its_port(sim_factory, tmp_path, sig):
    """Issue 17: `llmload run --web` then `kill $!` left Locust serving the UI with parent PID 1, and
    SIGINT waited over 40 s. SIGTERM (`kill $!`) reaches the child as the same SIGTERM
    (tests/runtime/test_stop_signals.py): one real run for both."""
    sim = sim_factory(flavor="vllm")
    port = free_port()
    proc, run_dir, log = _start(tmp_path, _ladder(sim.url), "--web", "--no-report",
                                env={"LOCUST_WEB_PORT": str(port), "LOCUST_AUTOSTART": "true"})
    wait_step_running(run_dir, after_s=2.0, proc=proc)  # ~10 streams of ~3 s in flight at the stop
    assert port in _listening_ports(_tree(proc))
    started = time.monotonic()
    _signal_and_check(proc, run_dir, log, [sig], files=UNREPORTED_FILES)
    assert time.monotonic() - started < 40
    assert _port_free(port)
    _check_stopped_in_first_step(run_dir)


@pytest.mark.timeout(150)
def test_ctrl_c_after_a_web_run_has_finished_exits_with_its_verdict(sim_factory, tmp_path):
    """Issue 32: the run says to press Ctrl-C when done; after the run had finished, Ctrl-C printed
    "stopping the run: in-flight requests are recorded as cancelled" and exited 130. Nothing is left to
    cancel: it closes the UI and exits with the run's verdict."""
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                              "steps": [{"rate": 4, "duration": "3s"}]}},
                         slo={"ttft_p95": "5s", "min_samples": 5})
    port = free_port()
    # no report.html (0.8 s of CPU): the closing line names summary.json instead
    proc, run_dir, log = _start(tmp_path, config, "--web", "--no-report",
                                env={"LOCUST_WEB_PORT": str(port), "LOCUST_AUTOSTART": "true"})
    deadline = time.monotonic() + 90
    # the closing line is printed once the run directory is written: then the run is over
    while time.monotonic() < deadline and "llmload: summary " not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    verdict = summary(run_dir)["verdict"]
    children = _tree(proc)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            for p in [*_tree(proc), psutil.Process(proc.pid)]:
                p.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    output = log.read_text(errors="replace")
    assert not alive and _port_free(port), output[-3000:]
    assert code == {"pass": 0, "fail": 1}.get(verdict, 3), (code, verdict, output[-3000:])
    tail = output[output.index("llmload: summary "):]
    assert "cancel" not in tail and "stopping the run" not in tail and "interrupted" not in tail, tail
    assert "the run has finished" in tail and "Traceback" not in output
    assert summary(run_dir)["verdict"] == verdict  # nothing was redone or rewritten


def test_report_recovers_a_run_whose_master_was_killed(sim_factory, tmp_path, capsys, unrendered_plots):
    """Issue 19 item 9: kill -9 of the Locust master left a directory `llmload report` refused. The kill
    is real; `llmload report` runs in this process (its entry, `llmload.cli.main`): a second interpreter
    would only add its imports. Its plots are built but not drawn (`unrendered_plots`): the recovery is
    the point, not the drawing."""
    sim = sim_factory(flavor="vllm")
    proc, run_dir, log = _start(tmp_path, _ladder(sim.url), "--processes", "2")
    wait_step_running(run_dir, after_s=4.0, proc=proc)  # some requests finished: worker files hold records
    children = _tree(proc)
    master = next(p for p in children if p.ppid() == proc.pid)
    master.kill()
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=15)  # the forked workers do not outlive llmload run
    for p in alive:
        p.kill()
    assert not alive, alive
    assert not (run_dir / "records.parquet").exists()
    files = sorted((run_dir / "records").glob("worker-*.jsonl"))
    assert files
    from llmload.records import read_record_files

    written = {row["request_id"] for row in read_record_files(files)}
    from llmload.cli import main

    capsys.readouterr()
    code = main(["report", str(run_dir)])
    said = capsys.readouterr()
    output = said.out + said.err
    assert code in (0, 1, 3), output[-3000:]
    assert "recovered an unfinished run" in output and "Traceback" not in output, output[-3000:]
    for name in ("records.parquet", "summary.json", "report.html"):
        assert (run_dir / name).exists(), name
    data = plan(run_dir)
    assert [s["status"] for s in data["steps"]] == ["partial", "not_run"] and data["recovered"] is True
    assert set(records(run_dir)["request_id"]) >= written  # every record a worker wrote is kept
    assert [s["verdict"] for s in summary(run_dir)["steps"]][1] == "not_run"


@pytest.mark.timeout(30)
def test_what_outlives_the_group_leader_is_ended_even_when_it_ignores_sigterm():
    from llmload.runtime.launcher.stop_signals import _group_members, end_process_group

    code = ("import os, signal, time\n"
            "if os.fork() == 0:\n    signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)\n"
            "else:\n    time.sleep(0.5)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    leader.wait(timeout=10)
    assert len(_group_members(leader.pid)) == 1  # the forked child is left, as a forked worker would be
    end_process_group(leader.pid, grace_s=0.5, term_s=0.5)
    assert _group_members(leader.pid) == []


def test_kill_9_of_the_parent_still_stops_and_finalises_the_run(sim_factory, tmp_path):
    """Nothing can catch SIGKILL, but the Locust child follows its parent (PR_SET_PDEATHSIG): it stops,
    finalises and exits instead of running the rest of the ladder as an orphan."""
    sim = sim_factory(flavor="vllm")
    proc, run_dir, log = _start(tmp_path, _ladder(sim.url), "--processes", "2", "--no-report")
    wait_step_running(run_dir, after_s=2.0, proc=proc)  # ~10 streams of ~3 s in flight at the stop
    children = _tree(proc)
    assert len(children) >= 3
    proc.kill()
    proc.wait(timeout=10)
    _, alive = psutil.wait_procs(children, timeout=60)
    for p in alive:
        p.kill()
    assert not alive, alive
    output = log.read_text(errors="replace")
    assert "Traceback" not in output, output[-3000:]
    for name in UNREPORTED_FILES:
        assert (run_dir / name).exists(), (name, output[-3000:])
    _check_stopped_in_first_step(run_dir)


@pytest.mark.parametrize("entry", ["script", "module"])
def test_ctrl_c_while_the_command_is_still_importing_is_one_line(tmp_path, entry):
    """A SIGINT while `llmload` still imports typer (before any command runs) used to print a
    KeyboardInterrupt traceback from inside the import; now it is one line and exit 130. `-X importtime`
    says when typer's first submodule has loaded, so the signal lands inside the imports every time."""
    import shutil

    script = shutil.which("llmload")
    if entry == "script" and script is None:
        pytest.skip("no llmload script on PATH")
    launcher = [sys.executable, "-X", "importtime"] + ([script] if entry == "script" else ["-m", "llmload.cli"])
    proc = subprocess.Popen(launcher + ["--help"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "| typer." in line or "|   typer." in line or "typer.colors" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    code = proc.wait(timeout=30)
    said = [x for x in lines + rest.splitlines(keepends=True) if not x.startswith("import time:")]
    assert code == 130, "".join(said)
    assert "".join(said).strip() == "llmload: interrupted", "".join(said)
