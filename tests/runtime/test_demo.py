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


@pytest.mark.slow
def test_demo_runs_end_to_end_and_shows_the_knee(tmp_path, capsys):
    assert run_demo(out=tmp_path, step_s=5.0, trace_s=12.0) == 0
    out = capsys.readouterr().out
    for name in ("ladder", "burst"):
        assert (tmp_path / name / "report.html").exists()
        assert str((tmp_path / name / "report.html").resolve()) in out
    ladder = json.loads((tmp_path / "ladder" / "summary.json").read_text())
    # a busy machine may stretch the generator on some steps: those are invalid, and the demo says so
    judged = [s["verdict"] for s in ladder["steps"] if s["verdict"] != "invalid"]
    assert judged[0] != "fail" and judged[-1] == "fail", [(s["label"], s["verdict"]) for s in ladder["steps"]]
    assert "llmload demo: knee: last passing rate" in out
    for name in ("ladder", "burst"):
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        for step in summary["steps"]:
            if step["verdict"] == "invalid":
                assert f"({name} step {step['label']}, judged invalid" in out, out[-3000:]
    burst = json.loads((tmp_path / "burst" / "summary.json").read_text())
    by_label = {s["label"]: s for s in burst["steps"]}
    assert by_label["burst"]["ttft_p95_s"] > by_label["uniform"]["ttft_p95_s"], by_label
    assert "llmload demo: bursts: TTFT p95" in out
    # the sim was stopped: nothing answers on its port any more
    url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", (tmp_path / "sim.log").read_text()).group(1)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)
