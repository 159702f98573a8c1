"""`llmload report RUN_DIR [--slo FILE]` on a hand-built run directory: new SLO, new verdicts, new exit code."""

from __future__ import annotations

import json

import pytest
from report_fakes import write_run_dir

from llmload.cli import main
from llmload.errors import ConfigError
from llmload.report import rereport

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run-b"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=2, cost_per_hour=3.0,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    return root


def test_own_slo_passes_and_writes_outputs(run_dir, capsys):
    assert rereport(run_dir) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "pass" and summary["last_passing_rate"] == 2.0
    assert (run_dir / "worksheet.csv").exists()
    assert 'id="run-verdict">pass<' in (run_dir / "report.html").read_text()
    out = capsys.readouterr().out
    assert "r2.00" in out and "highest passing step: 2 req/s offered (step r2.00)" in out


def test_stricter_slo_file_flips_verdict_and_exit_code(run_dir, tmp_path, capsys):
    strict = tmp_path / "strict.yaml"
    strict.write_text("ttft_p95: 300ms\nmin_samples: 50\n")
    assert rereport(run_dir) == 0  # the run's own analysis first
    own = {name: (run_dir / name).read_bytes() for name in ("summary.json", "worksheet.csv", "report.html")}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--slo", str(strict)]) == 1
    # beside the run's own files, which stay as the run judged itself (issue 43)
    assert {name: (run_dir / name).read_bytes() for name in own} == own
    out = capsys.readouterr().out
    assert "report-slo-strict.html, summary-slo-strict.json, worksheet-slo-strict.csv" in out
    assert (run_dir / "worksheet-slo-strict.csv").exists()
    summary = json.loads((run_dir / "summary-slo-strict.json").read_text())
    verdicts = {s["label"]: s["verdict"] for s in summary["steps"]}
    assert verdicts == {"r1.00": "pass", "r2.00": "fail"}
    assert summary["last_passing_rate"] == 1.0
    assert "ttft_p95" in {s["label"]: s["failing"] for s in summary["steps"]}["r2.00"]
    html = (run_dir / "report-slo-strict.html").read_text()
    assert "First failing step: 2 req/s offered (step r2.00)" in html and "ttft_p95 (400 ms &gt; 300 ms)" in html
    assert "Knee " in html and "TTFT p95 binds" in html  # recomputed from the steps judged with this SLO
    assert "fail" in out


def test_missing_run_dir_or_records_is_one_line_config_error(tmp_path, capsys):
    with pytest.raises(ConfigError, match="run directory not found"):
        rereport(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "records.parquet" in err and str(tmp_path / "empty") in err


def test_bad_slo_file_names_file_and_key(run_dir, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ttft_p95: fast\n")
    assert main(["report", str(run_dir), "--slo", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:1" in err and "ttft_p95" in err


def test_slo_and_client_from_a_dumped_config():
    from llmload.report.reanalyse import client_from_manifest, slo_from_manifest

    manifest = {"config": {"slo": {"thresholds": [{"metric": "ttft", "percentile": 95.0, "value_s": 0.5}],
                                   "max_reject_ratio": 0.0, "allow_oom": None, "min_samples": 100},
                           "client": {"max_concurrency": 8, "max_send_lag_p99": 0.05}}}
    slo = slo_from_manifest(manifest)
    assert slo.threshold("ttft").value_s == 0.5 and slo.min_samples == 100 and slo.max_reject_ratio == 0.0
    assert client_from_manifest(manifest).max_send_lag_p99 == 0.05
    assert slo_from_manifest({}).thresholds == [] and client_from_manifest({}) is None
    with pytest.raises(ConfigError, match="config.slo.min_samples"):
        slo_from_manifest({"config": {"slo": {"min_samples": "many"}}})
