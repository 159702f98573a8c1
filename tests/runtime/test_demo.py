"""`llmload demo`: its configs, its decisions on them in virtual time (a knee, bursts worse than uniform),
and its live processes end to end once (shortened steps): both run directories, the answer printed."""

from __future__ import annotations

import json
import re
import urllib.request

import numpy as np
import pandas as pd
import pytest

from llmload.runtime.launcher.demo import DEMO_SCALE, answer_lines, demo_configs, run_demo


def test_demo_configs_cross_the_knee():
    configs = demo_configs("http://127.0.0.1:9")
    rates = [s["rate"] for s in configs["ladder"]["shape"]["ladder"]["steps"]]
    # the demo sim's true knee (TTFT p95 1 s) is about 4.6 req/s in the reference engine, 4x that as run
    assert rates[0] < 4.6 * DEMO_SCALE < rates[-1]
    assert configs["burst"]["shape"]["trace"]["uniform_twin"] is True


def test_demo_runs_the_knee_search_within_three_minutes_and_looks_for_no_gpu(tmp_path):
    import yaml

    from llmload.config import load_config

    configs = demo_configs("http://127.0.0.1:9")
    refine = configs["ladder"]["shape"]["ladder"]["refine"]
    assert refine["precision"] == 0.05 and "resolution" not in refine
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(configs["ladder"]))
    ladder = load_config(path).shape.ladder  # a valid config: the budget holds a refine step
    scheduled = sum(ladder.warmup + s.duration for s in ladder.steps) + ladder.refine.budget
    burst = 2 * 25.0 / DEMO_SCALE  # the trace slice and its twin, at DEMO_SCALE times its speed
    # shorter ones cost accuracy (demo.py): 60 s and 300 s in the reference engine's time, compressed
    assert ladder.refine.duration == 60 / DEMO_SCALE and ladder.refine.budget == 300 / DEMO_SCALE
    assert scheduled + burst < 3 * 60 - 60  # drains, start-up and the reports fit in what is left
    assert all(c["conditions"]["gpus"] == 0 for c in configs.values())


@pytest.mark.slow
def test_the_demos_ladder_finds_the_knee_and_its_answer_says_so(virtual_demo):
    """The demo's decisions, on its own configs and engine in virtual time: the ladder passes below the
    knee and fails above it, the search refines near it and stops by its own rule, the knee's interval
    holds its estimate, TTFT p95 binds, and the demo's answer (what it prints) says so."""
    folder, codes = virtual_demo
    assert codes["ladder"] in (0, 1), codes
    ladder = json.loads((folder / "ladder" / "summary.json").read_text())
    # the ladder's steps past its first failing one are not run (stop_after_failures: 1)
    ladder["steps"] = [s for s in ladder["steps"] if s["verdict"] != "not_run"]
    rungs = [s for s in ladder["steps"] if s["phase"] == "ladder"]
    assert all(s["verdict"] != "invalid" for s in ladder["steps"])  # virtual time: no generator lag
    judged = [s["verdict"] for s in rungs]
    assert judged[0] != "fail" and judged[-1] == "fail", [(s["label"], s["verdict"]) for s in ladder["steps"]]
    refine = [s for s in ladder["steps"] if s["phase"] == "refine"]
    passed = [s["offered_rate"] for s in rungs if s["verdict"] == "pass"]
    failed = [s["offered_rate"] for s in rungs if s["verdict"] == "fail"]
    assert passed and failed and min(failed) > max(passed)  # a knee to search: refine steps near it
    assert refine and all(0.5 * max(passed) < s["target_rate"] < 1.5 * min(failed) for s in refine)
    assert ladder["search"]["stopped"] in ("precision", "budget", "max_steps")
    knee = ladder["knee"]
    lines = answer_lines(folder)  # what `llmload demo` prints after its runs
    said = re.search(r"llmload demo: knee (\d+(\.\d+)?) req/s \((.+), 90%\): TTFT p95 binds", lines[0])
    assert said and knee["binding"] == "ttft_p95" and knee["rate"] is not None, lines
    assert float(said.group(1)) == pytest.approx(knee["rate"], abs=0.5)
    assert (knee["low"] or 0) <= knee["rate"] <= (knee["high"] or float("inf"))
    assert all(s["output_tokens_per_s"] > 0 and s["total_tokens_per_s"] > s["output_tokens_per_s"]
               for s in ladder["steps"])
    html = (folder / "ladder" / "report.html").read_text()
    assert 'id="plot-tokens"' in html and "output tok/s" in html and "remainder" in html


@pytest.mark.slow
def test_the_demos_bursts_cost_more_than_their_uniform_twin(virtual_demo):
    folder, codes = virtual_demo
    assert codes["burst"] in (0, 1), codes
    burst = json.loads((folder / "burst" / "summary.json").read_text())
    by_label = {s["label"]: s for s in burst["steps"]}
    assert by_label["burst"]["ttft_p95_s"] > by_label["uniform"]["ttft_p95_s"], by_label
    assert any(line.startswith("llmload demo: bursts: TTFT p95") for line in answer_lines(folder))


@pytest.mark.slow
@pytest.mark.quiet  # its split is checked against the sim's own log with bounds a busy machine can reach
def test_demo_runs_live_end_to_end(tmp_path, capfd):
    """`llmload demo`'s live processes once, with short steps: the sim started and stopped, both runs
    through Locust with their reports, the answer printed, each step's split against the sim's log. Its
    decisions (the knee, the search, the bursts' cost) are the tests above, on the same configs."""
    # the demo's own ladder and search with 1 s windows (4x compressed, as it runs them), the search cut
    # to two refine steps (one chained onto the other: its budget allowed four, 8 s more of this test) and
    # a short trace slice; what they decide is judged in virtual time above
    assert run_demo(out=tmp_path, step_s=4.0, trace_s=4.0, refine_steps=2) == 0
    out, err = capfd.readouterr()  # the Locust children write to the inherited descriptors
    for name in ("ladder", "burst"):
        assert (tmp_path / name / "report.html").exists()
        assert str((tmp_path / name / "report.html").resolve()) in out
    assert "NVML" not in out + err and "Aggregated" not in out + err  # gpus: 0; our summary, not Locust's
    lines = answer_lines(tmp_path)  # the knee (or why none), the bursts' cost, any stretched generator
    assert lines[0].startswith("llmload demo: ") and all(line in out for line in lines), out[-3000:]
    ladder = json.loads((tmp_path / "ladder" / "summary.json").read_text())
    ladder["steps"] = [s for s in ladder["steps"] if s["verdict"] != "not_run"]
    for name in ("ladder", "burst"):
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        for step in summary["steps"]:
            if step["verdict"] == "invalid":
                assert f"({name} step {step['label']}, judged invalid" in out, out[-3000:]
    _split_agrees_with_the_ground_truth(tmp_path, ladder)
    burst = json.loads((tmp_path / "burst" / "summary.json").read_text())
    assert [s["label"] for s in burst["steps"]] == ["burst", "uniform"]
    # the sim was stopped: nothing answers on its port any more
    url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", (tmp_path / "sim.log").read_text()).group(1)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)


def _split_agrees_with_the_ground_truth(folder, ladder: dict) -> None:
    """Every ladder step's split against the sim's own log of the same requests (issue 13): server
    queue mean within 10% or 20 ms, prefill to first token within 20 ms, the histogram p95's bucket
    holding the true p95 (nearest rank)."""
    truth = {}
    for line in (folder / "sim-ground-truth.jsonl").read_text().splitlines():
        row = json.loads(line)
        truth[row["request_id"]] = row
    records = pd.read_parquet(folder / "ladder" / "records.parquet", columns=["request_id", "step", "outcome"])
    drains = {s["label"]: s.get("drain") for s in json.loads((folder / "ladder" / "plan.json").read_text())["steps"]}
    for step in ladder["steps"]:
        if drains.get(step["label"]) is False:
            # a chained refine step (issue 27): its histogram's served period overlaps the steps beside
            # it, so its server queue is not its own requests' alone; the drained steps are checked
            continue
        mine = (records["step"] == step["label"]) & records["outcome"].isin(["ok", "quality_fail"])
        ids = records.loc[mine, "request_id"]
        rows = [truth[r] for r in ids]
        split = step["split"]
        assert split["requests"] == len(rows) > 0
        assert split["basis"] == {"client_wait": "per_request", "server_queue": "histogram",
                                  "prefill": "remainder", "decode": "per_request"}
        queue = np.array([r["queue_s"] for r in rows])
        prefill = np.array([r["first_token_at"] - r["admitted_at"] for r in rows])
        assert queue.min() >= 0
        assert split["server_queue_mean_s"] == pytest.approx(queue.mean(), rel=0.1, abs=0.02), step["label"]
        # the remainder also holds loopback and client time (~18 ms seen at load 9): 20 ms is the split test's
        # bound on a small sim (tests/analysis/test_split_truth.py); this whole-demo check allows a busy machine
        assert split["prefill_mean_s"] == pytest.approx(prefill.mean(), abs=0.05), step["label"]
        low, high = step["server_queue_p95_range_s"]
        p95 = float(np.percentile(queue, 95, method="inverted_cdf"))
        assert low < p95 and (high is None or p95 <= high), (step["label"], low, p95, high)
