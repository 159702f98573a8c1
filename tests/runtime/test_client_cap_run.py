"""The issue's client-cap case end to end (issue 33, item 8): `max_concurrency: 1`, 5 req/s offered,
answers of ~0.8 s. Offered, achieved and goodput all said 5 req/s and the step passed while the server
got ~1.3 req/s; now the step is invalid (`client_cap`), the live table and the closing lines say it in
one line each, and summary.json names the limit with the server's received rate (the hostile server's
log is the ground truth). The command's entry runs in this process (a launcher process would add only its
imports); the Locust child is a real one, writing to the descriptors it inherits."""

from __future__ import annotations

import json

import pytest
from hostile.hostile_server import hostile_server
from runtime_helpers import base_config, write_config

pytestmark = pytest.mark.timeout(120)


def test_a_step_held_back_by_the_client_cap_is_named_and_never_passes(tmp_path, capfd):
    from llmload.cli import main

    with hostile_server("normal", tokens=8, delay_s=0.1) as server:
        config = base_config(server.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                     "steps": [{"rate": 5, "duration": "3s"}]}},
                             slo={"ttft_p95": "1s", "min_samples": 2}, client={"max_concurrency": 1})
        config["target"]["model"] = "hostile-model"
        out = tmp_path / "run"
        capfd.readouterr()
        code = main(["run", str(write_config(tmp_path, config)), "--out", str(out), "--no-report"])
        done = capfd.readouterr()
        posts = [r for r in server.requests(method="POST") if r.path.endswith("/chat/completions")
                 and not (r.request_id or "preflight").startswith("preflight")]
    said = done.out + done.err
    assert code == 3, said
    # `--no-report`: the run ends (not waiting for a report) with its summary and no report.html
    assert (out / "summary.json").exists() and (out / "worksheet.csv").exists() and not (out / "report.html").exists()
    step = json.loads((out / "summary.json").read_text())["steps"][0]
    assert step["verdict"] == "invalid" and "client_cap" in step["failing"]
    ev = step["limit"]["evidence"]
    assert step["limit"]["kind"] == "client_cap" and ev["capped_share"] >= 0.5
    window = step["window_end"] - step["window_start"]
    in_window = sum(step["window_start"] <= r.at < step["window_end"] for r in posts)
    assert ev["received_rate"] < 0.5 * step["offered_rate"]
    assert abs(ev["received_rate"] - in_window / window) <= 1.0 / window  # what the server got
    lines = [ln for ln in said.splitlines() if "waited for a free slot of client.max_concurrency 1" in ln]
    assert len(lines) == 2, said  # the live table's line and the closing line
