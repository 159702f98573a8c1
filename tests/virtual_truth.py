"""Helpers for tests that compare a run's analysis with the simulated server's truth in virtual time.

`run_against_sim(tmp_path, config, flavor=..., sim=...)` runs a config whole in virtual time
(`llmload run --virtual`, `llmload.runtime.virtual`) against the engine of `llmload sim --flavor FLAVOR
--config SIM.yaml`; the run directory then holds what a live run against that sim would have (records,
`telemetry.jsonl` scraped from the sim's pages, the manifest's probe) and the sim's ground-truth log
(`truth_rows`). `scraped(run_dir, name)` is the sim's /metrics series `name` as last scraped, after
the last step drained (what a test asked the live sim's /metrics once the run was over).

Import as `from virtual_truth import ...` (tests/ is on sys.path).
"""

from __future__ import annotations

from pathlib import Path

import yaml

#: the discard port: a virtual run never contacts its target (one that did would fail its requests)
CLOSED = "http://127.0.0.1:9"


def run_against_sim(tmp_path: Path, config: dict, *, flavor: str = "vllm", sim: dict | None = None,
                    name: str = "run", report: bool = False) -> tuple[int, Path]:
    """(exit code, run directory) of `config` run in virtual time against a sim with settings `sim`
    (`target.url` is set to `CLOSED`, `target.server` to `flavor`)."""
    from llmload.runtime.virtual.run import run_virtual

    config = {**config, "target": {**config["target"], "url": CLOSED, "server": flavor}}
    sim_path = tmp_path / f"{name}-sim.yaml"
    sim_path.write_text(yaml.safe_dump(sim or {}), encoding="utf-8")
    config_path = tmp_path / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    run_dir = tmp_path / name
    code = run_virtual(config_path, out=run_dir, sim_path=sim_path, report=report)
    return code, run_dir


def truth_rows(run_dir: Path) -> list[dict]:
    """The simulated server's ground-truth log of a virtual run (one row per request)."""
    from llmload.runtime.virtual.run import GROUND_TRUTH
    from llmload.sim.groundtruth import read_ground_truth

    return list(read_ground_truth(Path(run_dir) / GROUND_TRUTH).values())


def scraped(run_dir: Path, name: str) -> float:
    """The sim's raw /metrics series `name` summed over its labels, as last scraped in the run."""
    from llmload.telemetry.sink import read_telemetry

    df = read_telemetry(run_dir)
    rows = df[df["metric"] == name]
    assert not rows.empty, f"{name} was never scraped"
    return float(rows.groupby(["source", "labels"])["value"].last().sum())
