"""A server that answers most requests 429 fails its step on `reject_ratio` with exit 1 (issue 33,
item 7): 90% rejected used to pass ("last passing rate 10") and 100% gave `insufficient`. Driven by the
hostile server; its log of every request received is the ground truth. One live run (9 in 10 answered
429): the judging of every share, 100% included, is tests/analysis/test_rejections.py's."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from hostile.hostile_server import hostile_server, normal
from runtime_helpers import base_config, write_config

pytestmark = pytest.mark.timeout(120)


def _load(request) -> bool:
    """A load request (not pre-flight's, not a /tokenize probe)."""
    return (request.method == "POST" and request.path.endswith("/chat/completions")
            and not (request.request_id or "preflight").startswith("preflight"))


def _rejecting(share_in_ten: int):
    def mode(handler, request):
        load = _load(request)
        if load and handler.count("load") % 10 < share_in_ten:
            handler.respond(429, json.dumps({"error": "too many requests"}))
            return
        normal(handler, request)
    return mode


@pytest.mark.parametrize("share_in_ten", [9])
def test_a_step_where_most_requests_were_rejected_fails_on_reject_ratio(tmp_path, capfd, share_in_ten):
    from llmload.cli import main

    with hostile_server(_rejecting(share_in_ten)) as server:
        config = base_config(server.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                     "steps": [{"rate": 4, "duration": "5s"}]}},
                             slo={"ttft_p95": "1s", "min_samples": 2})
        out = tmp_path / "run"
        # the command's entry in this process (the launcher's own process is tests/runtime/test_signals.py's)
        code = main(["run", str(write_config(tmp_path, config)), "--out", str(out), "--no-report"])
        received = [r for r in server.requests(method="POST") if _load(r)]
    said = capfd.readouterr()
    assert code == 1, said.out + said.err
    step = json.loads((out / "summary.json").read_text())["steps"][0]
    assert step["verdict"] == "fail" and step["failing"][0] == "reject_ratio", step
    records = pq.read_table(out / "records.parquet", columns=["request_id", "outcome"]).to_pylist()
    assert {r["request_id"] for r in records} == {r.request_id for r in received}  # one record per request received
    rejected = sum(r["outcome"] == "rejected" for r in records)
    assert rejected >= 0.85 * len(records) and step["reject_ratio"] >= 0.85
