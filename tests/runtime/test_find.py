"""`llmload find URL --slo NAME=VALUE ...`: its SLO flags, its config, the model read from the server, the
one-line errors (exit 2, within seconds, before any load), and one whole run against a fast sim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, free_port, start_sim

from llmload.config import parse_config
from llmload.errors import ConfigError
from llmload.runtime.launcher.find import find_config, parse_slo_flags


def find(*args: str, cwd: Path, timeout_s: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "llmload.cli", "find", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout_s)


def test_slo_flags_become_the_slo_section():
    assert parse_slo_flags(["ttft_p95=800ms", "tpot_p99=0.1s", "max_reject_ratio=0.01"]) == {
        "ttft_p95": "800ms", "tpot_p99": "0.1s", "max_reject_ratio": "0.01"}


@pytest.mark.parametrize(("flag", "says"), [
    ("ttft=1s", "unknown SLO name 'ttft'"),
    ("latency_p95=1s", "unknown SLO name 'latency_p95'"),
    ("ttft_p95=800", "give the target with a unit"),
    ("ttft_p95", "expected NAME=VALUE"),
    ("ttft_p95=", "expected NAME=VALUE"),
])
def test_bad_slo_flags_are_one_line_config_errors(flag, says):
    with pytest.raises(ConfigError) as err:
        parse_slo_flags([flag])
    assert says in str(err.value) and err.value.key == "--slo" and "\n" not in str(err.value)


def test_the_config_is_an_auto_run_with_the_flags_sizes():
    data = find_config("http://127.0.0.1:9", {"ttft_p95": "800ms"}, model="m", input_tokens=64, output_tokens=32,
                       budget="5m", precision=0.1, seed=7)
    config = parse_config(data)
    assert config.shape.kind == "auto" and config.shape.auto.budget == 300.0 and config.shape.auto.precision == 0.1
    assert config.requests.input_tokens.value == 64 and config.requests.seed == 7
    assert [t.key for t in config.slo.thresholds] == ["ttft_p95"]


@pytest.mark.parametrize(("args", "says", "own_process"), [
    (["--slo", "ttft=1s"], "unknown SLO name 'ttft'", False),
    (["--slo", "ttft_p95=800"], "give the target with a unit", False),
    (["--slo", "ttft_p95=800ms"], "is unreachable", True),
])
def test_mistakes_answer_in_one_line_with_exit_2_within_seconds(tmp_path, capsys, args, says, own_process):
    """The flags' mistakes are `run_find`'s (the command's body: the command passes its flags to it, as
    test_no_report_reaches_the_run_as_it_does_for_run shows) in this process; the unreachable URL runs the
    whole command in a process of its own: its exit code and stderr, the reach timeout and the interpreter's
    start inside the time."""
    from llmload.runtime.launcher.find import run_find

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    if own_process:
        done = find(url, *args, "--output", str(tmp_path / "runs"), cwd=tmp_path)
        code, stderr = done.returncode, done.stderr
    else:
        code, stderr = run_find(url, args[1:], output=tmp_path / "runs"), capsys.readouterr().err
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmload: error: ") and says in lines[0]
    assert time.monotonic() - started < 30  # seconds (a loaded machine's interpreter start included)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*-auto"))


def test_a_model_the_server_does_not_list_is_one_line_naming_the_flag(tmp_path, capsys):
    """`--model` against a vLLM-like model list without it: exit 2 before any load and before the config is
    written, the line names `--model` and what the server serves (the run's pre-flight would say
    `target.model`, which a find user never wrote)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from llmload.runtime.launcher.find import run_find

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps({"object": "list", "data": [{"id": "served-a", "owned_by": "vllm"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code = run_find(url, ["ttft_p95=1s"], model="wrong-model", output=tmp_path / "runs")
    finally:
        server.shutdown()
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "does not serve model 'wrong-model'; it serves served-a: give --model one of them" in lines[0]
    assert not list((tmp_path / "runs").glob("*"))


@pytest.mark.parametrize(("flags", "report"), [([], True), (["--no-report"], False)])
def test_no_report_reaches_the_run_as_it_does_for_run(monkeypatch, flags, report):
    from typer.testing import CliRunner

    import llmload.runtime.launcher.find as find_module
    from llmload.cli import app

    calls: list[dict] = []
    monkeypatch.setattr(find_module, "run_find", lambda *args, **kwargs: calls.append(kwargs) or 0)
    result = CliRunner().invoke(app, ["find", "http://127.0.0.1:9", "--slo", "ttft_p95=1s", *flags])
    assert result.exit_code == 0, result.output
    assert [c["report"] for c in calls] == [report]


#: a fast sim (the bench's `auto-mid` compressed 2x: knee about 11 req/s, TPOT binds). Not 4x (22 req/s): the
#: run is as long either way (the budget's), and its CPU (client, sim) goes with the requests and the sim's steps:
#: 9.3 -> 5.6 s. What this live run proves is the wiring (the flags' config, the model read from the server,
#: the probe's closed-loop levels run by Locust's workers, then the steps the search places, into one run
#: directory); where the knee lies and when the search stops are tests/shapes/test_auto.py's, in virtual time
FAST_SIM = {"max_num_seqs": 16, "step_base_s": "12.5ms", "decode_cost_s": "0.5ms", "prefill_cost_s": "0.05ms",
            "load_time_s": "0.2s"}


@pytest.mark.slow
def test_find_runs_the_probe_placement_and_search_into_one_run_directory(tmp_path):
    sim = start_sim(tmp_path, config=FAST_SIM)
    try:
        done = find(sim.url, "--slo", "ttft_p95=500ms", "--slo", "tpot_p95=19ms", "--input-tokens", "64",
                    "--output-tokens", "32", "--budget", "60s", "--no-report", "--out", str(tmp_path / "run"), cwd=tmp_path,
                    timeout_s=280)
    finally:
        sim.proc.terminate()
        sim.proc.wait(10)
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr  # pass, fail, or invalid on a busy machine
    run = tmp_path / "run"
    plan = json.loads((run / "plan.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    phases = [s["phase"] for s in plan["steps"]]
    assert phases[0] == "probe" and phases.count("probe") >= 2 and "ladder" in phases
    assert phases.index("ladder") > max(i for i, p in enumerate(phases) if p == "probe")
    auto = plan["search"]["auto"]
    assert auto["range"]["saturation_rps"] > 5 and auto["probe_steps"] == phases.count("probe")
    assert "knee" in summary and not (run / "report.html").exists()  # --no-report, as for `llmload run`
    ladder = [s for s in plan["steps"] if s["phase"] == "ladder"]
    # (refine steps, when the budget leaves time for one, follow on undrained: test_controller_virtual_time's)
    assert all(s["drain"] for s in ladder) and all(not s["drain"] for s in plan["steps"] if s["phase"] == "refine")
    assert "llmload: knee" in done.stdout + done.stderr
    # no --model: the first model the server lists (the sim lists one)
    assert f"llmload find: sim-model at {sim.url}," in done.stdout, done.stdout[-2000:]
    assert list(tmp_path.glob("runs/find-*.yaml")) or list(Path(tmp_path).glob("**/find-*.yaml"))


def test_find_virtual_runs_the_same_search_against_the_sim_without_contacting_the_url(tmp_path):
    """`find --virtual --sim`: the whole search in this process against FAST_SIM's engine in virtual time; the URL is
    a port nothing listens on (a live find would stop there: exit 2, "is unreachable"), the model is `sim-model`,
    and the run directory holds what the live run's test above asks of it, marked a simulation."""
    import yaml
    from typer.testing import CliRunner

    from llmload.cli import app

    sim_yaml = tmp_path / "sim.yaml"
    sim_yaml.write_text(yaml.safe_dump(FAST_SIM))
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(app, ["find", url, "--slo", "ttft_p95=500ms", "--slo", "tpot_p95=19ms",
                                      "--input-tokens", "64", "--output-tokens", "32", "--budget", "4m",
                                      "--output", str(tmp_path / "runs"), "--out", str(tmp_path / "run"),
                                      "--no-report", "--virtual", "--sim", str(sim_yaml)])
    out = result.output
    assert result.exit_code in (0, 1), out[-2000:]
    run = tmp_path / "run"
    plan = json.loads((run / "plan.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    phases = [s["phase"] for s in plan["steps"]]
    assert phases[0] == "probe" and phases.count("probe") >= 2 and "ladder" in phases and "refine" in phases
    assert plan["search"]["auto"]["range"]["saturation_rps"] > 5
    assert summary["simulation"]["server"] == str(sim_yaml) and summary["warnings"][0].startswith("SIMULATION:")
    assert summary["knee"]["rate"] is not None and not (run / "report.html").exists()
    assert f"llmload find: sim-model at {url}," in out and "llmload: SIMULATION summary" in out
    written = yaml.safe_load(next((tmp_path / "runs").glob("find-*.yaml")).read_text())
    assert written["target"] == {"url": url, "api": "openai-chat", "model": "sim-model"}


def test_a_budget_too_short_for_a_slow_server_says_so(tmp_path):
    """A server of four slow slots (a request takes 3.5 s) and a one-minute budget: the probe and one rate step
    fit, the step completes too few requests for a verdict, and the answer says the budget was too short for
    this server (not only "no step gave a verdict")."""
    import yaml
    from typer.testing import CliRunner

    from llmload.cli import app

    sim_yaml = tmp_path / "sim.yaml"
    sim_yaml.write_text(yaml.safe_dump({"max_num_seqs": 4, "step_base_s": "50ms", "decode_cost_s": "2ms",
                                        "prefill_cost_s": "0.5ms"}))
    result = CliRunner().invoke(app, ["find", "http://127.0.0.1:9", "--slo", "ttft_p95=2s", "--slo", "tpot_p95=300ms",
                                      "--input-tokens", "256", "--output-tokens", "64", "--budget", "1m",
                                      "--out", str(tmp_path / "run"), "--output", str(tmp_path / "runs"),
                                      "--no-report", "--virtual", "--sim", str(sim_yaml)])
    assert result.exit_code == 3, result.output[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["knee"] is None and summary["search"]["stopped"] == "no_verdict"
    assert "too few completions" in result.output and "--budget" in result.output, result.output[-2000:]


def test_find_sim_without_virtual_is_refused():
    from typer.testing import CliRunner

    from llmload.cli import app

    result = CliRunner().invoke(app, ["find", "http://127.0.0.1:9", "--slo", "ttft_p95=1s", "--sim", "x.yaml"])
    assert result.exit_code == 2 and "--sim goes with --virtual" in result.output
