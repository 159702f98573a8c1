"""Pre-flight and quality: a failing required case stops the run; sampled cases under load are checked."""

from __future__ import annotations

import json

import pytest
from runtime_helpers import base_config, records, run_locust, write_config

from llmload.cli import main

pytestmark = pytest.mark.slow

NEVER = {"contains": "this-text-is-never-in-an-answer"}


def test_a_failing_required_quality_case_stops_the_run(sim_factory, tmp_path, capfd):
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"steps": [{"rate": 1, "duration": "2s"}]}},
                         quality={"required": True, "cases": [{"prompt": "Hello", "expect": NEVER}]})
    run_dir = tmp_path / "run"
    assert main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir)]) == 3
    said = capfd.readouterr()
    assert f"the answers are in {run_dir / 'preflight.json'}" in said.out + said.err  # the one file left, named
    preflight = json.loads((run_dir / "preflight.json").read_text())
    assert preflight["quality"][0]["passed"] is False
    assert preflight["cold_load"]["outcome"] == "ok"
    assert not (run_dir / "records.parquet").exists()  # no load was sent


def test_sampled_cases_are_checked_under_load_a_right_answer_passes_a_wrong_one_fails(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    cases = [{"prompt": "What is 2+2? Answer with a number.", "expect": {"contains": "4"}, "max_tokens": 6},
             {"prompt": "What is 2+2? Answer with a number.", "expect": {"contains": "banana"}, "max_tokens": 6}]
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                              "steps": [{"rate": 20, "duration": "3s"}]}},
                         quality={"required": False, "sample_under_load": 0.3, "cases": cases},
                         client={"max_concurrency": 16})
    run_dir = tmp_path / "run"
    done = run_locust(write_config(tmp_path, config), run_dir, report=False)
    assert (run_dir / "records.parquet").exists(), done.stderr[-2000:]
    df = records(run_dir)
    checked = df[df["quality_checked"]]
    assert len(df) == 60 and set(df["step"]) == {"r20.00"}  # every arrival, in its own step
    assert 8 <= len(checked) <= 30  # a seeded 30 % of 60 (binomial, far outside 4 sigma otherwise)
    assert (checked["planned_output_tokens"] == 6).all()  # the case's request replaced the synthetic one
    # the sim answers the sum first: the "4" case passes, the "banana" case is a quality failure
    assert set(checked["outcome"]) == {"ok", "quality_fail"}
    assert set(df.loc[~df["quality_checked"], "outcome"]) == {"ok"}
    assert (df.loc[df["outcome"] == "quality_fail", "quality_checked"]).all()
    # the wrong case failed at the pre-flight too, where a case not `required` is a warning, not a stop
    assert "quality" in json.loads((run_dir / "preflight.json").read_text())["warnings"][-1]
