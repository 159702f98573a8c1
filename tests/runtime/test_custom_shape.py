"""The example locustfile with a user-written shape (examples/locustfiles/custom_shape.py) runs
headless against the sim, and the run follows its plan, not the config's `shape:` kind."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from runtime_helpers import base_config, plan, records, write_config
from support import REPO, ended_whole, run_said

from llmload.arrivals import step_offsets
from llmload.config import load_config
from llmload.runtime.launcher.run import locust_command
from shapes.steps import StepSpec

EXAMPLE = REPO / "examples" / "locustfiles" / "custom_shape.py"
USERS = REPO / "locustfiles" / "llm.py"


def _custom_plan(config_path) -> list[dict]:
    """The example shape's own plan for this config (its class, imported in a process with Locust)."""
    code = ("import locust, json, sys, importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('custom_shape', {str(EXAMPLE)!r})\n"
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "from llmload.config import load_config\n"
            f"steps = mod.SawtoothShape().plan(load_config({str(config_path)!r}))\n"
            "print(json.dumps([s.to_dict() for s in steps]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_custom_shape_example_runs_its_own_plan_against_the_sim(vllm_sim, tmp_path):
    # the config names a one-step ladder: the locustfile's own shape plans the run instead
    config = base_config(vllm_sim.url, {"ladder": {"arrival": "poisson", "steps": [{"rate": 1, "duration": "2s"}]}},
                         client={"max_concurrency": 16})
    path, run_dir = write_config(tmp_path, config), tmp_path / "run"
    cmd = locust_command(path, run_dir)
    cmd[cmd.index("-f") + 1] = f"{USERS},{EXAMPLE}"  # the users and the example, as its docstring says
    cmd.append("--llmload-no-report")  # the plan, the records and the manifest are the point
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    # 3 only for a step a busy machine left unjudged (its generator behind: `invalid`); the plan is the point
    assert ended_whole(done.returncode, run_dir), done.stdout[-2000:] + done.stderr[-2000:] + run_said(run_dir)

    expected = _custom_plan(path)
    ran = plan(run_dir)
    assert ran["shape"] == "SawtoothShape"
    assert [(s["label"], s["phase"], s["target_rate"], s["status"]) for s in ran["steps"]] == [
        (s["label"], s["phase"], s["target_rate"], "run") for s in expected]
    assert [s["target_rate"] for s in ran["steps"]] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]

    recs = records(run_dir)
    truth = {row["request_id"] for row in vllm_sim.ground_truth_rows()}  # what the server received
    assert set(recs["request_id"]) <= truth
    assert len(recs) == recs["request_id"].nunique() == sum(s["planned_arrivals"] for s in ran["steps"]) == 96
    assert (recs["outcome"] == "ok").all(), recs["outcome"].value_counts().to_dict()
    for step, row in zip(expected, ran["steps"], strict=True):
        mine = recs[recs["step"] == row["label"]].sort_values("scheduled_at")
        planned = step_offsets(StepSpec.from_dict(step))
        # each arrival at its planned time from the step's start: the custom plan, released exactly
        assert np.allclose(mine["scheduled_at"].to_numpy() - row["start_at"], planned, atol=1e-6), row["label"]
        assert (mine["sent_at"] >= mine["scheduled_at"] - 1e-3).all()
    assert load_config(path).shape.kind == "ladder"  # the config itself was not what ran
    # the manifest records the shape that ran, and one line at the start said the config's was replaced
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["plan_kind"] == "SawtoothShape"
    shape = manifest["shape"]
    assert (shape["class"], shape["source"], shape["replaces_config_shape"]) == ("SawtoothShape", "locustfile", "ladder")
    assert [s["target_rate"] for s in shape["steps"]] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]
    said = [line for line in done.stdout.splitlines() if "shape" in line and "not used" in line]
    assert said == ["llmload: note: the locustfile's shape SawtoothShape plans this run (6 steps); the config's "
                    "shape (ladder) is not used"], done.stdout[-3000:]
