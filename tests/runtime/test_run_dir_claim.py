"""Two runs never share a run directory (issue 33, item 5): a second `llmload run` into the same `--out`
is refused with one line and exit 2, however close together they start (an exclusive lock, not a check
for `plan.json` that both pass), and the default `<UTC time>-<shape>` name is made with an exclusive
`mkdir`, so two runs started in the same second get two directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from runtime_helpers import base_config, write_config

from llmload.config import load_config
from llmload.errors import ConfigError
from llmload.rundir.layout import claim_run_dir, new_run_dir

pytestmark = pytest.mark.timeout(120)


def test_the_default_name_is_claimed_when_it_is_made(tmp_path):
    config = load_config(write_config(tmp_path, base_config("http://127.0.0.1:1", {
        "ladder": {"steps": [{"rate": 1, "duration": "1s"}]}})))
    first, second = new_run_dir(config, base=tmp_path / "runs"), new_run_dir(config, base=tmp_path / "runs")
    assert first != second and first.is_dir() and second.is_dir()  # made here: the next call sees it


def test_a_claimed_directory_is_refused_until_released(tmp_path):
    claim = claim_run_dir(tmp_path, where=("--out", None))
    with pytest.raises(ConfigError, match="another llmload run is writing this run directory"):
        claim_run_dir(tmp_path, where=("--out", None))
    claim.release()
    claim_run_dir(tmp_path, where=("--out", None)).release()
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a run"):
        claim_run_dir(tmp_path, where=("--out", None))


def test_two_launches_into_one_out_one_runs_and_the_other_is_refused(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    config = write_config(tmp_path, base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                                     "steps": [{"rate": 4, "duration": "3s"}]}}))
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "llmload.cli", "run", str(config), "--out", str(out), "--no-report"]  # records read
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = [(p.wait(timeout=100), *p.communicate()) for p in runs]
    codes = sorted(code for code, _, _ in done)
    assert codes[1] == 2 and codes[0] in (0, 1), done
    refused = next(err for code, _, err in done if code == 2)
    lines = [ln for ln in refused.splitlines() if ln.startswith("llmload: error")]
    assert len(lines) == 1 and str(out) in lines[0] and "Traceback" not in refused, refused
    assert "writing this run directory" in lines[0] or "already holds a run" in lines[0]
    # ground truth: every load request the sim received is a record of the one run that ran
    received = {row["request_id"] for row in sim.ground_truth_rows() if not row["request_id"].startswith("preflight")}
    recorded = set(pq.read_table(Path(out) / "records.parquet", columns=["request_id"]).column(0).to_pylist())
    assert received and received <= recorded
