"""`llmload demo` end to end (shortened steps): both run directories, a knee, bursts worse than uniform."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from llmload.runtime.demo import demo_configs, run_demo


def test_demo_configs_cross_the_sims_capacity():
    configs = demo_configs("http://127.0.0.1:9")
    rates = [s["rate"] for s in configs["ladder"]["shape"]["ladder"]["steps"]]
    assert rates[0] < 6 < rates[-1]  # the demo sim holds about 6 req/s
    assert configs["burst"]["shape"]["trace"]["uniform_twin"] is True


def test_demo_shows_the_boundary_search_and_looks_for_no_gpu():
    configs = demo_configs("http://127.0.0.1:9")
    assert configs["ladder"]["shape"]["ladder"]["refine"] == {"resolution": 0.5, "max_steps": 2}
    assert all(c["conditions"]["gpus"] == 0 for c in configs.values())


@pytest.mark.slow
def test_demo_runs_end_to_end_and_shows_the_knee(tmp_path, capfd):
    assert run_demo(out=tmp_path, step_s=5.0, trace_s=12.0) == 0
    out, err = capfd.readouterr()  # the Locust children write to the inherited descriptors
    for name in ("ladder", "burst"):
        assert (tmp_path / name / "report.html").exists()
        assert str((tmp_path / name / "report.html").resolve()) in out
    assert "NVML" not in out + err and "Aggregated" not in out + err  # gpus: 0; our summary, not Locust's
    ladder = json.loads((tmp_path / "ladder" / "summary.json").read_text())
    rungs = [s for s in ladder["steps"] if s["phase"] == "ladder"]
    verdicts = [s["verdict"] for s in rungs]
    assert verdicts[0] != "fail" and verdicts[-1] == "fail"
    refine = [s for s in ladder["steps"] if s["phase"] == "refine"]
    passed = [s["target_rate"] for s in rungs if s["verdict"] == "pass"]
    failed = [s["target_rate"] for s in rungs if s["verdict"] == "fail"]
    if passed and min(failed) > max(passed):  # a knee to search: the boundary search ran between
        assert refine and all(max(passed) < s["target_rate"] < min(failed) for s in refine)
    burst = json.loads((tmp_path / "burst" / "summary.json").read_text())
    by_label = {s["label"]: s for s in burst["steps"]}
    assert by_label["burst"]["ttft_p95_s"] > by_label["uniform"]["ttft_p95_s"]
    # the sim was stopped: nothing answers on its port any more
    url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", (tmp_path / "sim.log").read_text()).group(1)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)
