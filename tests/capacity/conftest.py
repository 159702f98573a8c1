"""Fixtures of the capacity tests: two identical sims and the runs of a 1- and a 2-instance deployment.

The runs are shared by the instance and compare tests (module files of this folder) so the slow part,
two short ladders through the real `llmload run`, happens once per session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from capacity_helpers import SIM, ladder_config, run_config
from support import SimServer, start_sim, stop_process


@dataclass
class Deployments:
    sims: list[SimServer]
    one: Path      # run directory, 1 instance (1 GPU)
    two: Path      # run directory, 2 instances round robin (2 GPUs)
    outputs: dict[str, str]


@pytest.fixture(scope="session")
def deployments(tmp_path_factory) -> Iterator[Deployments]:
    tmp = tmp_path_factory.mktemp("deployments")
    sims = [start_sim(tmp, flavor="vllm", config=SIM, seed=i) for i in range(2)]
    try:
        outputs = {}
        one, code_one, outputs["one"] = run_config(tmp, "one", ladder_config([sims[0].url]))
        two, code_two, outputs["two"] = run_config(tmp, "two", ladder_config([s.url for s in sims],
                                                                            routing="round_robin"))
        yield Deployments(sims=sims, one=one, two=two, outputs=outputs)
    finally:
        for sim in sims:
            stop_process(sim.proc)
