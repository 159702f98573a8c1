"""A truncated telemetry.parquet (a full disk, a kill while writing) never makes `llmload report` exit 1
("an SLO failed") with a traceback: one warning line, and the run is analysed without telemetry
(issue 33, item 22)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from report_fakes import write_run_dir

from llmload.cli import main

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")


def test_truncated_telemetry_is_one_line_and_the_verdict_comes_from_the_records(tmp_path, capsys):
    root = tmp_path / "run"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=1, cost_per_hour=1.0,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    tel = pd.DataFrame({"t": [0.0, 1.0], "source": "server:a", "metric": "waiting", "value": [0.0, 1.0],
                        "step": "r1.00", "labels": ""})
    tel.to_parquet(root / "telemetry.parquet")
    whole = (root / "telemetry.parquet").read_bytes()
    (root / "telemetry.parquet").write_bytes(whole[: len(whole) // 2])
    assert main(["report", str(root)]) == 0  # the records pass: the verdict, not a crash
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if "telemetry.parquet" in line]
    assert len(lines) == 1 and "analysed without telemetry" in lines[0] and "Traceback" not in captured.err
    summary = json.loads((root / "summary.json").read_text())
    assert summary["verdict"] == "pass" and any("telemetry.parquet" in w for w in summary["warnings"])
