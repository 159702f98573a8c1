"""Check a run directory that the compose bring-up left (scripts/compose_check.sh): exit 0 when complete.

Complete means: summary.json with a verdict, report.html, manifest.json, and records.parquet whose rows
come from exactly two distinct workers and together are the seeded plan: per step as many unique
requests as plan.json planned, none lost, and in order of planned time the two workers' records
interleave (worker k takes arrivals k, k+2, k+4, ... of one seeded sequence).

    python scripts/compose_run_check.py RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd


def problems(run_dir: Path) -> list[str]:
    found = []
    for name in ("summary.json", "report.html", "manifest.json", "plan.json", "records.parquet"):
        if not (run_dir / name).is_file():
            found.append(f"{name} is missing")
    if found:
        return found
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("verdict") not in ("pass", "fail", "invalid", "insufficient"):
        found.append(f"summary.json verdict is {summary.get('verdict')!r}")
    records = pd.read_parquet(run_dir / "records.parquet")
    workers = sorted(records["worker"].astype(str).unique())
    if len(workers) != 2:
        found.append(f"records come from {len(workers)} workers ({workers}), expected 2")
    if records["request_id"].duplicated().any():
        found.append("a request_id appears twice")
    lost = records["error"].astype(str).str.contains("worker lost", na=False)
    if lost.any():
        found.append(f"{int(lost.sum())} arrivals were lost with a worker")
    plan = json.loads((run_dir / "plan.json").read_text())
    for step in plan["steps"]:
        if step.get("status") != "run":
            found.append(f"step {step['label']} has status {step.get('status')}")
            continue
        own = records[records["step"].astype(str) == step["label"]].sort_values("scheduled_at")
        if len(own) != step.get("planned_arrivals"):
            found.append(f"step {step['label']}: {len(own)} records for {step.get('planned_arrivals')} planned")
        order = own["worker"].astype(str).tolist()
        if any(a == b for a, b in zip(order[:-1], order[1:], strict=True)) or len(set(order)) != min(2, len(order)):
            found.append(f"step {step['label']}: the workers' arrivals do not interleave as shards of one plan")
    return found


def main() -> int:
    run_dir = Path(sys.argv[1])
    found = problems(run_dir)
    for problem in found:
        print(f"compose_run_check: {run_dir.name}: {problem}", file=sys.stderr)
    if not found:
        records = pd.read_parquet(run_dir / "records.parquet")
        counts = records.groupby("worker").size().to_dict()
        print(f"compose_run_check: {run_dir.name}: complete; records per worker {counts}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
