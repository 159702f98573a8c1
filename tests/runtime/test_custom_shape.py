"""The example locustfile with a user-written shape (examples/locustfiles/custom_shape.py) runs
headless against the sim, and the run follows its plan, not the config's `shape:` kind."""

from __future__ import annotations

import json
import subprocess

import numpy as np
from runtime_helpers import base_config, plan, records, write_config
from support import REPO, ended_whole, run_said

from llmload.arrivals import step_offsets
from llmload.config import load_config
from llmload.runtime.launcher.run import locust_command
from shapes.plan import rate_label, unique_label
from shapes.steps import StepSpec, derive_seed

EXAMPLE = REPO / "examples" / "locustfiles" / "custom_shape.py"
USERS = REPO / "locustfiles" / "llm.py"


def _sawtooth_plan(seed: int) -> list[StepSpec]:
    """The example shape's plan as its class declares it (2, 4, 6 req/s, twice; evenly spaced; a 1 s warm-up
    and a 3 s window; a 20 s drain; each step's seed from the run's), written out here: the class itself
    imports Locust, which a test worker must not (it patches the standard library with gevent), and a
    process of its own to import it was 1.3 of this test's 4.2 s of CPU. That the master plans with the
    class is what the run shows (`plan.json`, the manifest, the note); that the class plans this is
    tests/shapes/loadshape_checks.py's (in its Locust process)."""
    steps: list[StepSpec] = []
    for i, rate in enumerate([2.0, 4.0, 6.0] * 2):
        steps.append(StepSpec(label=unique_label(rate_label(rate), (s.label for s in steps)), index=i,
                              phase="ladder", arrival="constant", target_rate=rate, warmup_s=1.0, duration_s=3.0,
                              drain_timeout_s=20.0, seed=derive_seed(seed, i)))
    return steps


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

    expected = _sawtooth_plan(load_config(path).requests.seed)
    ran = plan(run_dir)
    assert ran["shape"] == "SawtoothShape"
    fields = ("label", "phase", "arrival", "target_rate", "warmup_s", "duration_s", "drain_timeout_s", "seed")
    assert [tuple(s[f] for f in fields) + (s["status"],) for s in ran["steps"]] == [
        tuple(getattr(s, f) for f in fields) + ("run",) for s in expected]
    assert [s["target_rate"] for s in ran["steps"]] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]

    recs = records(run_dir)
    truth = {row["request_id"] for row in vllm_sim.ground_truth_rows()}  # what the server received
    assert set(recs["request_id"]) <= truth
    assert len(recs) == recs["request_id"].nunique() == sum(s["planned_arrivals"] for s in ran["steps"]) == 96
    assert (recs["outcome"] == "ok").all(), recs["outcome"].value_counts().to_dict()
    for step, row in zip(expected, ran["steps"], strict=True):
        mine = recs[recs["step"] == row["label"]].sort_values("scheduled_at")
        planned = step_offsets(step)
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
