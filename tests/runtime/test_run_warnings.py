"""Every line a run prints is true: a saturated generator gets the CPU line, naming the step, with the
measured value, the limit, its key and what to do. That a quiet run prints no warning at all is
`test_a_quiet_run_prints_no_warning_and_ends_with_our_summary_in_our_style` in
tests/runtime/test_run_output.py (one run for it and the output's style)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from runtime_helpers import base_config, write_config
from support import REPO

from llmload.runtime.launcher.run import locust_command

pytestmark = pytest.mark.slow

BURN = Path(__file__).parent / "faults" / "cpu_burn_locustfile.py"


def test_a_saturated_generator_is_named_with_its_step_and_what_to_do(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    # 30 ms of CPU per request at 8 req/s: about a quarter of a core (27% measured at load average 3.9),
    # which a busy 2-core machine still gives one process; the 10% limit is crossed 2.7 times over
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                              "steps": [{"rate": 8, "duration": "4s"}]}},
                         client={"max_concurrency": 16, "max_worker_cpu": 0.1})
    # the CPU measured while sending is the point: no report afterwards
    cmd = locust_command(write_config(tmp_path, config), tmp_path / "run") + ["--llmload-skip-preflight",
                                                                             "--llmload-no-report"]
    cmd[cmd.index("-f") + 1] += f",{BURN}"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO)
    output = done.stdout + done.stderr
    line = re.search(r"^  r8\.00 invalid: worker CPU (\d+)% of a core while sending, over "
                     r"client\.max_worker_cpu 10%: run with --processes (\d+)", output, re.MULTILINE)
    assert line, output[-3000:]
    cpu, processes = int(line.group(1)), int(line.group(2))
    assert cpu >= 10 and processes >= 2, line.group(0)
    assert done.returncode == 3, output[-3000:]
