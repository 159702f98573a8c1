"""`llmload calibrate`: the envelope rules, the plan check, its work folder and processes after a run.
The envelope of a --quick run against the built-in sim is checked on bench/calibration.py --quick's run
(the same `run_calibrate` call as the command's, below), in tests/test_bench_smoke.py: one live run, not two.

No timing is asserted: the figures depend on the machine (bench/README.md has them).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import free_port
from typer.testing import CliRunner

import llmload.calibrate
from llmload.calibrate import (
    RULE,
    UNCALIBRATED,
    CalibrationStep,
    check_plan_against_envelope,
    envelope_from_steps,
    load_envelope,
)
from llmload.cli import app
from llmload.config import parse_config


def _step(ramp: str, rate: float, holds: bool, streams: float = 10.0) -> CalibrationStep:
    return CalibrationStep(ramp=ramp, label=f"r{rate}", offered_rate=rate, achieved_rate=rate, requests=100,
                           failed=0, send_lag_p50_s=0.0005, send_lag_p99_s=0.001, ttft_error_p50_s=0.0002,
                           ttft_error_p99_s=0.0005, token_error_p99_s=0.0005, in_flight_mean=streams,
                           events_per_s=rate * 32, worker_cpu=0.1, holds=holds)


def test_envelope_stops_at_the_first_step_that_does_not_hold():
    steps = [_step("rates", 10, True, 5), _step("rates", 50, True, 20), _step("rates", 100, False, 40),
             _step("rates", 200, True, 80), _step("streams", 20, True, 60), _step("streams", 40, False, 120)]
    assert envelope_from_steps(steps) == {"max_rate_per_process": 50, "max_streams_per_process": 60}


def test_envelope_is_empty_when_nothing_holds():
    assert envelope_from_steps([_step("rates", 10, False)]) == {"max_rate_per_process": None,
                                                               "max_streams_per_process": None}


def _config(shape: dict):
    return parse_config({"target": {"url": "http://127.0.0.1:9", "model": "m"}, "shape": shape})


def test_plan_check_warns_per_process_and_only_beyond_the_envelope():
    envelope = {"version": 2, "max_rate_per_process": 100.0, "max_streams_per_process": 50.0}
    ladder = _config({"ladder": {"steps": [{"rate": 50, "duration": "10s"}, {"rate": 150, "duration": "10s"}]}})
    warning = check_plan_against_envelope(ladder, 1, envelope=envelope)
    assert warning is not None and "150 req/s per process" in warning
    assert check_plan_against_envelope(ladder, 2, envelope=envelope) is None
    closed = _config({"concurrency": {"levels": [10, 80]}})
    assert "80 streams per process" in check_plan_against_envelope(closed, 0, envelope=envelope)
    assert RULE in warning and "2 ms" not in warning


def test_an_uncalibrated_machine_gets_one_note_never_a_warning_and_only_for_a_heavy_plan():
    ladder = _config({"ladder": {"steps": [{"rate": 2, "duration": "10s"}, {"rate": 60, "duration": "10s"}]}})
    assert check_plan_against_envelope(ladder, 1, envelope={}) == UNCALIBRATED  # 60 req/s in one process
    nothing_held = {"version": 2, "max_rate_per_process": None, "max_streams_per_process": None}
    assert check_plan_against_envelope(ladder, 1, envelope=nothing_held) == UNCALIBRATED
    assert "warning" not in UNCALIBRATED
    assert check_plan_against_envelope(ladder, 2, envelope={}) is None  # 30 req/s per process: light
    light = _config({"ladder": {"steps": [{"rate": 2, "duration": "10s"}]}})
    assert check_plan_against_envelope(light, 1, envelope={}) is None
    assert check_plan_against_envelope(_config({"concurrency": {"levels": [8, 40]}}), 1, envelope={}) == UNCALIBRATED
    assert check_plan_against_envelope(_config({"concurrency": {"levels": [8, 32]}}), 1, envelope={}) is None


def test_a_step_holds_by_the_run_steps_validity_rule():
    from llmload.calibrate import _judge

    # 10 req/s per process: 100 ms between arrivals, so a 20 ms lag p99 (never a 2 ms one) holds
    step = _step("rates", 10, False)
    step.send_lag_p99_s, step.worker_cpu = 0.020, 0.3
    _judge(step, 1)
    assert step.holds, step.why_not
    # at 200 req/s per process over 2 processes (400 req/s: 2.5 ms apart), 3 ms is too late
    step = _step("rates", 200, True)
    step.send_lag_p99_s = 0.003
    _judge(step, 2)
    assert not step.holds and step.why_not == "send lag"
    step = _step("rates", 10, True)
    step.worker_cpu, step.achieved_rate = 0.95, 9.0
    _judge(step, 1)
    assert step.why_not == "rate shortfall, worker cpu"


def test_load_envelope_ignores_missing_and_foreign_files(tmp_path):
    assert load_envelope(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert load_envelope(tmp_path / "bad.json") is None
    (tmp_path / "old.json").write_text(json.dumps({"version": 1}))  # judged by the old 2 ms rule
    assert load_envelope(tmp_path / "old.json") is None


def test_cli_passes_its_options_and_returns_the_exit_code(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(llmload.calibrate, "run_calibrate", lambda **kw: calls.append(kw) or 0)
    result = CliRunner().invoke(app, ["calibrate", "--processes", "3", "--target", "http://127.0.0.1:9",
                                      "--out", str(tmp_path / "e.json"), "--quick"])
    assert result.exit_code == 0
    assert calls == [{"processes": 3, "target": "http://127.0.0.1:9", "out": tmp_path / "e.json", "quick": True}]


def _calibrate_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("llmload-calibrate-*"))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_calibrate_removes_its_work_folder_after_a_run_against_a_dead_target(tmp_path):
    """Issue 17: `llmload calibrate` left `/tmp/llmload-calibrate-*` behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run([sys.executable, "-m", "llmload.cli", "calibrate", "--quick", "--target", dead,
                           "--out", str(tmp_path / "e.json")], capture_output=True, text=True, timeout=140,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "llmload-calibrate-" in proc.stdout  # it did make one
    assert _calibrate_folders(tmp) == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_calibrate_interrupted_removes_its_work_folder_and_its_processes(tmp_path):
    import psutil

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log = tmp_path / "calibrate.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "calibrate", "--quick", "--out",
                                 str(tmp_path / "e.json")], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 90
        # interrupted once its ramp's generator (the Locust child) runs: its run directory has a plan (not a
        # fixed second after the ramp's line; a child still importing could die of its closed pipe alone)
        while not list(tmp.glob("llmload-calibrate-*/*/plan.json")) and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children and _calibrate_folders(tmp), log.read_text()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    for p in alive:
        p.kill()
    assert not alive, alive
    assert _calibrate_folders(tmp) == [], log.read_text()


def test_an_envelope_where_every_step_held_is_called_a_lower_bound():
    from llmload.calibrate import envelope_sentence, every_step_held

    held = [_step("rates", 10, True, 5), _step("rates", 50, True, 20)]
    envelope = {**envelope_from_steps(held), "lower_bound": every_step_held(held), "ttft_error_p99_s": 0.0005}
    said = envelope_sentence(envelope, lowest_rate=10)
    assert envelope["lower_bound"] and "at least 50 req/s" in said and "lower bound" in said
    stopped = [*held, _step("rates", 100, False, 40)]
    envelope = {**envelope_from_steps(stopped), "lower_bound": every_step_held(stopped), "ttft_error_p99_s": None}
    said = envelope_sentence(envelope, lowest_rate=10)
    assert not envelope["lower_bound"] and "50 req/s" in said and "lower bound" not in said and "at least" not in said
    # `llmload run` past a lower bound is told so, not warned of invalid steps
    ladder = _config({"ladder": {"steps": [{"rate": 80, "duration": "10s"}]}})
    note = check_plan_against_envelope(ladder, 1, envelope={"version": 2, "max_rate_per_process": 50.0,
                                                            "max_streams_per_process": None, "lower_bound": True})
    assert note.startswith("llmload: note:") and "lower bound" in note


def test_the_step_lines_show_no_slo_verdict_and_every_column_has_its_unit():
    from llmload.calibrate import format_table, progress_line
    from llmload.runtime.master.live_table import format_row

    row = {"label": "r10.00", "offered_rate": 10.0, "achieved_rate": 10.0, "ttft_p95_s": 0.021}
    echoed = progress_line(format_row({**row, "verdict": "insufficient"}))
    assert echoed.startswith("r10.00") and "21ms" in echoed and "insufficient" not in echoed
    assert echoed.endswith("-")  # the row's last figure, no verdict after it
    invalid = progress_line(format_row({**row, "verdict": "invalid (send_lag)"}))
    assert invalid.endswith("invalid (send_lag)")  # why the ramp stops there
    head = format_table([_step("rates", 10, True)]).splitlines()[0]
    for column in ("offered/s", "achieved/s", "lag p99 ms", "TTFT err p99 ms", "tok err p99 ms", "CPU %"):
        assert column in head, column
