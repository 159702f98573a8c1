"""What a run prints (issues 17 and 21): one style for every message, our summary last, no GPU line for a
config that says there is no GPU, and a live view whose numbers carry their units."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from runtime_helpers import base_config, write_config
from support import REPO, ended_whole

from llmload.config import parse_config
from llmload.runtime.locustglue.console import configure_logging
from llmload.runtime.master.live_table import (
    ProgressStats,
    format_header,
    format_progress,
    format_row,
    quick_stats,
    window_ttft_p95,
)
from llmload.telemetry.collector import TelemetryCollector

LOCUST_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \S+/[A-Z]+/")


def _config(url: str, **sections) -> dict:
    shape = {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                        "steps": [{"rate": 4, "duration": "2s"}]}}
    return base_config(url, shape, **sections)


def _nvml_missing() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return True
    pynvml.nvmlShutdown()
    return False


def test_collector_looks_for_no_gpu_when_the_config_has_none(tmp_path):
    shape = {"ladder": {"steps": [{"rate": 1, "duration": 1}]}}
    none = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": shape, "conditions": {"gpus": 0}})
    unknown = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": shape})
    forced = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": shape, "conditions": {"gpus": 0},
                           "telemetry": {"gpu": "nvml"}})
    assert TelemetryCollector(none, tmp_path).nvml is None
    assert TelemetryCollector(unknown, tmp_path).nvml is not None
    assert TelemetryCollector(forced, tmp_path).nvml is not None  # asked for by name: looked for


def test_log_records_come_out_in_our_style():
    stream = io.StringIO()
    logger, root = logging.getLogger("llmload.test_console"), logging.getLogger("llmload")
    handlers, propagate, level = list(root.handlers), root.propagate, root.level
    try:
        configure_logging(stream)
        configure_logging(stream)  # idempotent: one handler, one line per record
        logger.warning("no GPU telemetry (%s)", "NVML found no GPU")
    finally:  # leave the test process's logging as it was (caplog reads through the root logger)
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.propagate, root.level = propagate, level
    assert stream.getvalue() == "llmload: warning: no GPU telemetry (NVML found no GPU)\n"


def test_live_view_numbers_carry_units_and_progress_says_draining():
    header = format_header()
    row = format_row({"label": "r2.00", "offered_rate": 1.8, "server_waiting": 5.62, "verdict": "pass"})
    assert "srv wait " not in header + " " and "srv waiting" in header
    assert "5.6 req" in row
    stats = {"done": 7, "failed": 0, "ttft_p95_s": 0.058}
    sending = format_progress("r2.00", 5.2, 12.0, 23, stats, 1, 0.0)
    draining = format_progress("r2.00", 15.2, 12.0, 23, stats, 1, 2.0)
    assert "5s of 12s" in sending and "done 7 of 23" in sending and "server waiting 0 req" in sending
    assert "15s/12s" not in draining and "draining, 3s after its 12s of arrivals" in draining


def test_progress_line_leaves_the_warm_up_out_of_its_ttft():
    """The progress TTFT p95 is the measurement window's, as the step's result; the warm-up's slow
    first answers are not in it, and the line says so."""
    from shapes.steps import StepBounds

    def row(at: float, ttft: float) -> dict:
        return {"scheduled_at": at, "sent_at": at, "first_token_at": at + ttft, "last_token_at": at + ttft + 1,
                "output_tokens": 10, "outcome": "ok"}

    rows = [row(100.0 + i * 0.1, 0.426) for i in range(20)] + [row(103.0 + i * 0.1, 0.085) for i in range(20)]
    bounds = StepBounds(100.0, 103.0, 112.0, 120.0)  # 3 s of warm-up, then the window
    stats = quick_stats(rows)
    assert stats["ttft_p95_s"] == pytest.approx(0.426)  # what the line used to show
    window = window_ttft_p95(rows, bounds)
    assert window == pytest.approx(0.085)
    line = format_progress("r4.00", 5.0, 12.0, 40, stats, 0, 0.0, window_ttft_p95_s=window)
    assert "TTFT p95 85ms (warm-up left out)" in line and "426" not in line
    warming = format_progress("r4.00", 2.0, 12.0, 40, stats, 0, 0.0, window_ttft_p95_s=None, in_warmup=True)
    assert "TTFT p95 - (warm-up, not counted)" in warming and "426" not in warming


def test_the_progress_figures_fold_in_only_the_new_summaries_and_agree_with_a_full_pass():
    """Issue 29 (bench/fan_in.py): the progress line (and the web UI's running row) re-read every summary
    of the step each time, seconds of the master's CPU at 10,000 req/s; `ProgressStats` reads each once
    and gives the same counts, and percentiles within its sketches' 0.5% (issue 46: a size that does
    not grow with the step)."""
    from shapes.steps import StepBounds

    def row(i: int) -> dict:
        at, ttft = 100.0 + i * 0.01, 0.05 + (i % 37) * 0.01
        ok = i % 11 != 0
        return {"scheduled_at": at, "sent_at": at, "first_token_at": at + ttft if ok else None,
                "last_token_at": at + ttft + 1 if ok else None, "output_tokens": 10,
                "outcome": "ok" if ok else "http_error"}

    bounds = StepBounds(100.0, 103.0, 112.0, 120.0)
    running, rows = ProgressStats(bounds), []
    for batch in range(6):
        rows.extend(row(i) for i in range(batch * 250, (batch + 1) * 250))
        rows.append({**rows[-1], "first_token_at": float("nan")})  # a NaN is left out, as quick_stats does
        stats, full = running.update(rows), quick_stats(rows)
        assert (stats["done"], stats["ok"], stats["failed"]) == (full["done"], full["ok"], full["failed"])
        want = window_ttft_p95(rows, bounds)  # None until a summary lies in the window (the first batch)
        assert stats["window_ttft_p95_s"] is None if want is None else (
            stats["window_ttft_p95_s"] == pytest.approx(want, rel=0.006))
        assert want is not None or batch == 0
        assert running.seen == len(rows)
    whole = ProgressStats().update(rows)  # no window: every quick_stats figure (the web UI's running row)
    assert whole["window_ttft_p95_s"] == pytest.approx(quick_stats(rows)["ttft_p95_s"], rel=0.006)
    for key, value in quick_stats(rows).items():
        assert whole[key] == pytest.approx(value, rel=0.006), key


@pytest.mark.slow
def test_a_quiet_run_prints_no_warning_and_ends_with_our_summary_in_our_style(vllm_sim, tmp_path, capfd,
                                                                             monkeypatch):
    """One `llmload run` of a quiet ladder (2 req/s, Poisson) for what every run prints: no warning at all
    (every line a run prints is true; tests/runtime/test_run_warnings.py has the lines a saturated
    generator gets), our step table and summary in our style and nothing of Locust's, no GPU line for a
    config that says there is no GPU, and how long the run will take, said once before the first step.
    The command's entry runs in this process (a launcher process would add only its imports); the Locust
    child is a real one, writing to the descriptors it inherits."""
    from llmload.cli import main

    config = base_config(vllm_sim.url, {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "10s",
                                                   "steps": [{"rate": 2, "duration": "4s"}]}},
                         telemetry={"gpu": "auto"}, conditions={"gpus": 0})
    monkeypatch.chdir(REPO)
    capfd.readouterr()
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(tmp_path / "run")])
    stdout, stderr = capfd.readouterr()
    output = stdout + stderr
    assert code == 0, output[-3000:]
    assert re.search(r"^r2\.00 .* pass", output, re.MULTILINE), output[-3000:]
    # the run directory's path is said too: a test directory's name may hold "warn"
    assert not re.search(r"warn|invalid", output.replace(str(tmp_path), ""), re.IGNORECASE), output
    assert "Aggregated" not in output and "req/s" not in stderr
    assert "GPU" not in output and "NVML" not in output  # gpus: 0: no GPU looked for, nothing said
    assert not [line for line in output.splitlines() if LOCUST_LOG_LINE.match(line)]
    last = [line for line in stdout.splitlines() if line.strip()][-1]
    assert last.startswith("llmload: report ") and "(exit code" in last
    shape = json.loads((tmp_path / "run" / "manifest.json").read_text())["shape"]  # the config's shape ran
    assert (shape["source"], shape["replaces_config_shape"], len(shape["steps"])) == ("config", None, 1)
    assert "is not used" not in output
    # said once before the first step: 1 s of warm-up and 4 s of arrivals, a drain of up to 10 s
    assert stdout.count("llmload: plan: 1 step, about 15 s (steps 5 s, a drain 10 s)") == 1, stdout
    assert stdout.index("llmload: plan:") < stdout.index("r2.00")


class _HeldChild:
    """The Locust child `llmload run` starts during its checks, never started here (`discard` only)."""

    def discard(self) -> None:
        pass


def test_a_legacy_key_is_noted_before_the_run_starts(tmp_path, monkeypatch, capsys):
    """The command's entry in this process: the note is said by the launcher, before its pre-flight (the
    target: nothing listens, the run stops there), with the Locust child's start stubbed."""
    from support import free_port

    from llmload.cli import main
    from llmload.runtime.launcher import run

    monkeypatch.setattr(run, "_SAID", set())  # notes this process said already (`say_once`)
    monkeypatch.setattr(run, "_start_gated", _HeldChild)
    config = _config(f"http://127.0.0.1:{free_port()}")
    config["shape"]["ladder"]["refine"] = {"resolution": 0.5}
    capsys.readouterr()
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 3, err
    notes = [line for line in err.splitlines() if line.startswith("llmload: note:") and "resolution" in line]
    assert len(notes) == 1 and "refine.budget" in notes[0], err


def _plain_locust(config_path, run_dir, *extra: str) -> list[str]:
    """`locust -f locustfiles/llm.py,shapes/llm.py --headless --llmload-config ...` as the README writes it
    (none of the flags `llmload run` adds)."""
    import sys

    from llmload.runtime.launcher.run import LOCUSTFILE, SHAPEFILE

    return [sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{SHAPEFILE}", "--headless",
            "--llmload-config", str(config_path), "--llmload-run-dir", str(run_dir), *extra]


@pytest.mark.slow
def test_plain_locust_prints_our_table_not_locusts_and_gpu_absence_is_one_line(vllm_sim, tmp_path):
    import subprocess

    config = _config(vllm_sim.url, telemetry={"gpu": "auto"})
    config["shape"]["ladder"]["steps"].append({"rate": 2, "duration": "3s"})  # 5 s of steps: 2 Locust tables
    config["shape"]["ladder"]["stop_after_failures"] = None
    done = subprocess.run(_plain_locust(write_config(tmp_path, config), tmp_path / "run",
                                        "--llmload-no-report"),  # what is printed while it runs is the point
                          capture_output=True, text=True, timeout=120)
    assert ended_whole(done.returncode, tmp_path / "run", codes=(0, 1)), done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "Aggregated" not in output and "# reqs" not in output, output[-3000:]  # no Locust table, none at the end
    header = format_header()
    assert header in done.stdout and "r4.00" in done.stdout and "r2.00" in done.stdout  # our step table instead
    if _nvml_missing():
        gpu_lines = [line for line in output.splitlines() if "GPU" in line]
        assert len(gpu_lines) == 1 and gpu_lines[0].startswith("llmload: warning: no GPU telemetry"), gpu_lines
    assert not [line for line in output.splitlines() if LOCUST_LOG_LINE.match(line) and "llmload" in line]


@pytest.mark.slow
def test_plain_locust_prints_its_own_table_when_asked(vllm_sim, tmp_path):
    import subprocess

    config = _config(vllm_sim.url, conditions={"gpus": 0})
    done = subprocess.run(_plain_locust(write_config(tmp_path, config), tmp_path / "run", "--print-stats",
                                        "--llmload-no-report"),  # Locust's table is the point, not the report
                          capture_output=True, text=True, timeout=120)
    assert ended_whole(done.returncode, tmp_path / "run", codes=(0, 1)), done.stderr[-2000:]
    assert "Aggregated" in done.stdout + done.stderr  # --print-stats: Locust's table is back
