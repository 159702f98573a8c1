"""Fixtures of the capacity tests: two identical sims and the runs of a 1- and a 2-instance deployment.

The runs are shared by the instance, decision-record and compare tests (module files of this folder) so
they happen once per session. The 2-instance run is a short ladder through the real `llmload run` against
the two sims (routing over HTTP, each sim's own log). The 1-instance run's tests read only its run
directory (its records, verdicts and decision record, worked out again from records.parquet): it runs in
virtual time (`llmload run --virtual`, `tests/virtual_truth.py`) against the same sim's engine, the run's
own machinery and the same config, deterministic, a second of CPU instead of a 17 s live ladder.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from capacity_helpers import SIM, ladder_config, run_config
from support import SimServer, start_sim, stop_process
from virtual_truth import CLOSED, run_against_sim


@dataclass
class Deployments:
    sims: list[SimServer]
    one: Path      # run directory, 1 instance (1 GPU), in virtual time against the engine of a sim set as `SIM`
    two: Path      # run directory, 2 instances round robin (2 GPUs)
    outputs: dict[str, str]


@pytest.fixture(scope="session")
def deployments(tmp_path_factory) -> Iterator[Deployments]:
    tmp = tmp_path_factory.mktemp("deployments")
    sims = [start_sim(tmp, flavor="vllm", config=SIM, seed=i) for i in range(2)]
    try:
        outputs = {}
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            code_one, one = run_against_sim(tmp, ladder_config([CLOSED]), sim=SIM, name="one", report=True)
        outputs["one"] = f"exit code {code_one}\n{said.getvalue()[-3000:]}"
        # 4 s steps (the virtual run's are 6 s): constant arrivals, so 1.5 req/s gives 6 requests in the window
        # (min_samples 5) and 6 req/s 12 per instance, each at 3 req/s against ~4 req/s of capacity: no queue
        two, code_two, outputs["two"] = run_config(tmp, "two", ladder_config([s.url for s in sims], step_s=4,
                                                                            routing="round_robin"))
        yield Deployments(sims=sims, one=one, two=two, outputs=outputs)
    finally:
        for sim in sims:
            stop_process(sim.proc)
