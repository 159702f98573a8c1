"""Recovering a run directory whose master died before finalising it (kill -9, a crash, a power cut).

What a dead master leaves behind: `plan.json` (rewritten at every change), `records/*.jsonl` (every
worker's file, flushed per request, and the master's copy), the telemetry lines, `manifest.json`.
Recovery marks the steps that were running `partial` (the others stay as they were: `run` or
`not_run`), sets the run's `ended_at` (and a partial step's `drained_at`) to the last recorded
activity, notes `recovered: true` and `stopped: true` in `plan.json`, and merges the records into
`records.parquet` and the telemetry into `telemetry.parquet`. The analysis then runs as for any run.
Requests that were in flight when the processes died have no record: the recovered run says so.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmload.errors import ConfigError
from llmload.rundir.plan_file import PlanFile

__all__ = ["recover_run", "unfinished"]

log = logging.getLogger("llmload.recover")

#: record fields that say when something happened (the last one is the run's last activity)
_TIMES = ("closed_at", "last_token_at", "first_token_at", "sent_at", "scheduled_at")


def unfinished(run_dir: str | Path) -> bool:
    """A run directory the master never finalised: a plan, no `records.parquet`."""
    root = Path(run_dir)
    return (root / "plan.json").is_file() and not (root / "records.parquet").exists()


def recover_run(run_dir: str | Path) -> str:
    """Finish what the dead master left (see the module docstring); returns a one-line account."""
    root = Path(run_dir)
    try:
        data = json.loads((root / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot recover the run: plan.json unreadable ({exc})", file=str(root)) from None
    files = sorted((root / "records").glob("*.jsonl")) if (root / "records").is_dir() else []
    last = _last_activity(files)
    ended_at = data.get("ended_at") or last or data.get("started_at")
    partial = []
    for step in data.get("steps", []):
        if step.get("status") == "running":
            step["status"] = "partial"
            step["drained_at"] = step.get("drained_at") or ended_at
            partial.append(step.get("label"))
    data.update(ended_at=ended_at, stopped=True, recovered=True)
    plan = PlanFile(root, kind=data.get("kind", ""), workers=data.get("workers", 0), seed=data.get("seed", 0),
                    started_at=data.get("started_at"))
    plan.data = data
    plan.write()
    from llmload.rundir.finalise import merge_run_records

    count = merge_run_records(root)
    try:
        from llmload.telemetry import finalise_telemetry

        finalise_telemetry(root)
    except Exception as exc:  # the records are what matters; the report says telemetry is missing
        log.warning("telemetry not recovered: %s", exc)
    not_run = sum(1 for s in data.get("steps", []) if s.get("status") == "not_run")
    steps = f"step(s) {', '.join(map(str, partial))} marked partial" if partial else "no step was running"
    return (f"recovered an unfinished run (its master died before finalising): {steps}, {not_run} not run; "
            f"{count} request(s) merged from {len(files)} record file(s); requests in flight then have no record")


def _last_activity(files: list[Path]) -> float | None:
    """The latest time any record carries (None without records)."""
    last = None
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut short by the kill
                times = [row.get(k) for k in _TIMES if isinstance(row.get(k), (int, float))]
                if times:
                    last = max(last or 0.0, max(times))
    return last
