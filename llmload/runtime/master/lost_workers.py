"""Workers lost in the middle of a step: their planned arrivals that left no record.

A worker that vanished (killed, its machine gone) took its in-flight and queued requests with it. So that
the step's counts stay whole, each of its planned arrivals without a record gets one, outcome `cancelled`
("worker lost"): live (`rows`, for the step's live verdict, as the final analysis will see it) and in
`records/lost.jsonl` when the run ends (`record_arrivals`; the number goes into the step's
`lost_requests`). The plan is the one the worker ran: `plan_jobs` is seeded by the step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmload.records import RecordWriter, read_record_files
from llmload.rundir.plan_file import PlanFile
from llmload.runtime.master.step import Step
from llmload.runtime.worker.jobs import Job, plan_jobs

__all__ = ["LostStep", "LostWorkers"]

LOST = "worker lost"


@dataclass
class LostStep:
    """A step that lost workers: the step, each lost worker's shard, the shard count, its start."""

    step: Step
    shards_of: dict[str, int]
    shards: int
    start_at: float


class LostWorkers:
    """The steps of a run that lost workers, and the records their unrecorded arrivals get."""

    def __init__(self, run_dir: Path, plan: PlanFile, out: Callable[[str], None] = print) -> None:
        self.run_dir = Path(run_dir)
        self.plan = plan
        self.out = out
        self.steps: list[LostStep] = []

    def add(self, step: Step, lost: list[str], workers: list[tuple], start_at: float,
            known_rows: Iterable[dict]) -> list[dict]:
        """Note that `step` lost the workers named `lost` (of `workers`, in shard order); returns the rows
        the master was never shipped, as `record_arrivals` and the merge will write them: the lost
        workers' record files' rows of this step, then their unrecorded arrivals."""
        shards = {name: shard for shard, (_, name) in enumerate(workers)}
        label = step.label
        lost_step = LostStep(step, {name: shards[name] for name in lost}, len(workers), start_at)
        self.steps.append(lost_step)
        known = {r.get("request_id") for r in known_rows}
        extra: list[dict] = []
        for name in lost_step.shards_of:
            path = self.run_dir / "records" / f"worker-{name}.jsonl"
            for r in read_record_files([path]) if path.exists() else []:
                if r.get("step") == label and r.get("request_id") not in known:
                    known.add(r.get("request_id"))
                    extra.append(r)
        for name, job in self._jobs(lost_step):
            if job.arrival.request_id not in known:
                record = job.record(name)
                record.outcome, record.error = "cancelled", LOST
                extra.append(record.as_dict())
        return extra

    def record_arrivals(self) -> None:
        """A `cancelled` ("worker lost") record in `records/lost.jsonl` for every planned arrival of a lost
        worker that left none; each step's count goes into its `lost_requests`."""
        if not self.steps:
            return
        known = self._recorded_ids()
        writer = RecordWriter(self.run_dir / "records" / "lost.jsonl")
        try:
            for step in self.steps:
                count = 0
                for name, job in self._jobs(step):
                    if job.arrival.request_id in known:
                        continue
                    record = job.record(name)
                    record.outcome, record.error = "cancelled", LOST
                    writer.write(record)
                    count += 1
                self.plan.update(step.step, lost_requests=count)
                if count:
                    self.out(f"  {step.step.label}: {count} request(s) of lost worker(s) "
                             f"{', '.join(step.shards_of)} recorded as cancelled (worker lost)")
        finally:
            writer.close()

    @staticmethod
    def _jobs(step: LostStep) -> Iterator[tuple[str, Job]]:
        for name, shard in step.shards_of.items():
            jobs, _ = plan_jobs(step.step.spec, start_at=step.start_at, shard=shard, shards=step.shards)
            for job in jobs:
                yield name, job

    def _recorded_ids(self) -> set[str]:
        known: set[str] = set()
        for path in sorted((self.run_dir / "records").glob("*.jsonl")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        known.add(json.loads(line)["request_id"])
                    except (ValueError, KeyError, TypeError):
                        continue
        return known
