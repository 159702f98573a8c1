"""Distributed runs that end badly (issue 44, item 8), with real processes.

A master SIGKILLed mid-step: its worker used to send the rest of the step to the server and exit 0 some
60 s later with only Locust's "Didn't get heartbeat from master". Now it stops sending within seconds,
every request the server finished (the sim's own log) is in its record file, it prints one line naming
the lost master and exits 3. A second master on a port already in use used to run the 12 s pre-flight,
print two tracebacks and exit 3 with an empty run directory; now it is one line naming the port and the
flag that sets it, exit 2, and no run directory (those refusals run the command's entry in this process,
with the Locust child's start patched to fail the test: nothing starts before them).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from runtime_helpers import base_config, wait_step_running, write_config
from support import free_port

from llmload.records import read_record_files
from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue.master_watch import LOST_EXIT, PROBE_TIMEOUT_S, SILENT_S

pytestmark = pytest.mark.slow

TOKEN = "worker-token-for-this-test-0123"


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _llmload(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmload.cli", *args]


def _llmload_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("llmload")]


def _refused_in_process(monkeypatch, capfd, *args: str) -> tuple[int, str]:
    """`llmload run ...` through its entry (`llmload.cli.main`) in this process, for a refusal that comes
    before anything starts (a launcher process would add only its imports): the exit code and all it said."""
    from llmload.cli import main

    monkeypatch.setattr("llmload.runtime.launcher.run._start_gated", lambda: pytest.fail("Locust was started"))
    capfd.readouterr()
    code = main(["run", *args])
    said = capfd.readouterr()
    return code, said.out + said.err


@pytest.mark.timeout(180)
def test_a_worker_whose_master_is_killed_stops_keeps_its_records_and_exits_3(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                              "steps": [{"rate": 4, "duration": "40s"}]}})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 16}  # ~0.5 s a request: some in flight
    path = write_config(tmp_path, config)
    run_dir, port = tmp_path / "run", free_port()
    env = {**os.environ, "LLMLOAD_WORKER_TOKEN": TOKEN}
    master = subprocess.Popen(locust_command(path, run_dir, master=True, expect_workers=1, master_port=port),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen(_llmload("run", str(path), "--worker", "--master-port", str(port)), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_step_running(run_dir, after_s=3.0, proc=master)
        master.send_signal(signal.SIGKILL)
        master.wait()
        killed_at = time.time()
        out, err = worker.communicate(timeout=60)  # Locust's own give-up is 60 s after the last heartbeat
        ended_at = time.time()
    finally:
        _stop(master)
        _stop(worker)
    said = out + err
    assert worker.returncode == LOST_EXIT, said[-3000:]
    assert ended_at - killed_at < SILENT_S + PROBE_TIMEOUT_S + 15, said[-3000:]  # seconds, not a minute
    lines = _llmload_lines(said)
    assert len(lines) == 1 and lines[0].startswith(f"llmload: error: lost the master at 127.0.0.1:{port}"), said
    assert f"(exit code {LOST_EXIT})" in lines[0] and "Traceback" not in said, said
    # it stopped sending: the sim received nothing of the step's last ~30 s
    received = [r for r in sim.ground_truth_rows() if not r["request_id"].startswith("preflight")]
    assert received, "the step never started"
    last = max(r["received_at"] for r in received)
    assert last < killed_at + SILENT_S + PROBE_TIMEOUT_S + 5, f"sent {last - killed_at:.1f} s after the kill"
    assert len(received) < 4 * 20, len(received)
    # every request the server received is in the worker's record file (finished ok, or cancelled in flight)
    files = sorted((run_dir / "records").glob("worker-*.jsonl"))
    rows = {r["request_id"]: r for r in read_record_files(files)}
    assert {r["request_id"] for r in received} <= set(rows), said
    finished = [r for r in received if r.get("finished_at") is not None and r["outcome"] == "ok"]
    assert all(rows[r["request_id"]]["outcome"] in ("ok", "cancelled") for r in finished)
    assert f"its {len(rows)} record(s) are in {run_dir / 'records'}" in lines[0], lines[0]


@pytest.mark.timeout(120)
def test_a_second_master_on_a_port_in_use_is_one_line_exit_2_and_leaves_no_run_directory(tmp_path, monkeypatch,
                                                                                      capfd):
    """The port is held by a listening socket, as a first master's holds it (a whole Locust master only to
    listen cost 1.3 s of CPU): the refusal comes before anything runs. The target is the discard port: a
    pre-flight before the refusal would end in exit 3 and "unreachable", not this one line."""
    config = base_config("http://127.0.0.1:9", {"ladder": {"arrival": "constant", "warmup": "0s",
                                                           "steps": [{"rate": 2, "duration": "30s"}]}})
    path = write_config(tmp_path, config)
    monkeypatch.setenv("LLMLOAD_WORKER_TOKEN", TOKEN)
    with socket.socket() as first:
        first.bind(("127.0.0.1", 0))
        first.listen()
        port = first.getsockname()[1]
        code, said = _refused_in_process(monkeypatch, capfd, str(path), "--master", "--master-port", str(port),
                                         "--out", str(tmp_path / "second"))
    assert code == 2, said[-3000:]
    assert _llmload_lines(said) == [line for line in said.splitlines() if line.strip()], said  # nothing else
    lines = _llmload_lines(said)
    assert lines == [f"llmload: error: --master-port {port}: cannot listen on 127.0.0.1:{port}: "
                     "Address already in use"], said
    assert not (tmp_path / "second").exists()


@pytest.mark.timeout(60)
def test_a_web_port_in_use_names_locust_web_port(tmp_path, monkeypatch, capfd):
    config = base_config("http://127.0.0.1:9", {"ladder": {"arrival": "constant", "warmup": "0s",
                                                           "steps": [{"rate": 2, "duration": "3s"}]}})
    path = write_config(tmp_path, config)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv("LOCUST_WEB_PORT", str(port))
        code, said = _refused_in_process(monkeypatch, capfd, str(path), "--web", "--out", str(tmp_path / "run"))
    lines = _llmload_lines(said)
    assert code == 2 and len(lines) == 1, said
    assert lines[0] == f"llmload: error: LOCUST_WEB_PORT {port}: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert not (tmp_path / "run").exists()
