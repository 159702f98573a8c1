"""A failure of the load generator itself is `client_error`: the step is invalid, and the server's
goodput, attainment and error ratio are what the server did (its ground truth), never lowered by our bug."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from runtime_helpers import base_config, records, write_config
from support import REPO

from analysis import analyze, load_run
from llmload.config import SLO

pytestmark = pytest.mark.slow

FAULTS = Path(__file__).parent / "faults" / "client_fault_locustfile.py"


def test_an_exception_in_our_client_code_is_client_error_and_never_the_servers(sim_factory, tmp_path):
    import subprocess

    from llmload.runtime.launcher.run import locust_command

    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                              "steps": [{"rate": 8, "duration": "3s"}]}},
                         client={"max_concurrency": 16}, slo={"ttft_p95": "2s", "min_samples": 5})
    run_dir = tmp_path / "run"
    cmd = locust_command(write_config(tmp_path, config), run_dir, report=False) + ["--llmload-skip-preflight"]
    at = cmd.index("-f") + 1
    cmd[at] += f",{FAULTS}"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]

    df = records(run_dir)
    faulty = df["request_id"].map(lambda rid: zlib.crc32(rid.encode()) % 4 == 0)
    assert faulty.any() and (~faulty).any(), df["request_id"].tolist()
    assert set(df.loc[faulty, "outcome"]) == {"client_error"}, df.loc[faulty, ["outcome", "error"]]
    assert df.loc[faulty, "error"].str.contains("injected fault").all()
    assert set(df.loc[~faulty, "outcome"]) == {"ok"}
    # the server answered every request in full, the faulty ones included
    truth = {row["request_id"]: row for row in sim.ground_truth_rows()}
    assert all(truth[rid].get("finished_at") is not None for rid in df["request_id"]), "server did not finish"

    summary = json.loads((run_dir / "summary.json").read_text())
    step = summary["steps"][0]
    # client_error invalidates it; on a machine so loaded that the generator also fell behind, send_lag
    # may be named beside it (the generator's fault too): never a failure of the server
    assert step["verdict"] == "invalid" and "client_error" in step["failing"], step
    assert set(step["failing"]) <= {"client_error", "send_lag"}, step
    (reason,) = [r for r in step["invalid_reasons"] if r["check"] == "client_error"]
    assert reason["measured"] == faulty.sum() and "inside llmload" in reason["message"]
    # the server's counts: every request it was given met the SLO; our bug is in neither number
    assert step["slo_attainment"] == 1.0 and step["error_ratio"] == 0.0, step
    assert step["outcomes"]["client_error"] == int(faulty.sum())
    result = analyze(load_run(run_dir), SLO.model_validate({"ttft_p95": "2s", "min_samples": 5}))
    row = result.steps.iloc[0]
    window = row["window_end"] - row["window_start"]
    in_window = result.requests[result.requests["in_window"]]
    server_ok = int((in_window["outcome"] == "ok").sum())
    assert server_ok == int((~faulty[df["request_id"].isin(in_window["request_id"])]).sum())
    assert row["goodput"] == pytest.approx(server_ok / window)
    # the live table and the end-of-run text both say why the step is invalid
    assert "r8.00 invalid: " in output and "llmload: step r8.00 invalid: " in output, output[-3000:]
