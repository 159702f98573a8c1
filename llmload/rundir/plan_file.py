"""`plan.json`: the steps as run, rewritten as the run goes (ARCHITECTURE.md "Plan").

Every planned step is listed from the start with status `not_run`; a step becomes `run` when it
drained (or `partial` when the run stopped inside it). Refine steps are appended when the knee
search chooses them (a repeat of an inconclusive step names it in `extends`); `search` says why the
search stopped and how many refine steps it ran. The file is replaced atomically so a reader never sees half of it.

The steps are the master's typed `Step`s (`llmload.runtime.master.step`), each written as its `plan_row()`;
this module only needs what `PlannedStep` names (the run directory imports nothing of the runtime).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

__all__ = ["PlanFile", "PlannedStep"]


class PlannedStep(Protocol):
    """A step as the plan keeps it (`llmload.runtime.master.step.Step`)."""

    index: int

    def set(self, **values: Any) -> None:
        """Set plan.json fields (an unknown name raises)."""

    def plan_row(self) -> dict[str, Any]:
        """The step's plan.json entry."""


class PlanFile:
    """The plan of one run, kept in memory and written to `run_dir/plan.json` on every change."""

    def __init__(self, run_dir: Path, *, kind: str, workers: int, seed: int, started_at: float) -> None:
        self.path = Path(run_dir) / "plan.json"
        #: the run's plan.json; its `steps` are `Step`s, each written as its `plan_row()` (a recovered
        #: plan, `recover.recover_run`, keeps the dicts it read)
        self.data: dict[str, Any] = {"kind": kind, "started_at": started_at, "ended_at": None,
                                     "workers": workers, "seed": seed, "steps": []}

    @property
    def steps(self) -> list[PlannedStep]:
        """The steps in plan order."""
        return self.data["steps"]

    def add(self, step: PlannedStep) -> PlannedStep:
        """Append a step (not run yet) and write the plan."""
        step.index = len(self.steps)  # a new Step is `not_run` until it is sent
        self.steps.append(step)
        self.write()
        return step

    def update(self, step: PlannedStep, **values: Any) -> None:
        """Set plan.json fields of `step` (`Step.set`: an unknown name raises) and write the plan."""
        step.set(**values)
        self.write()

    def finish(self, ended_at: float, **extra: Any) -> None:
        self.data["ended_at"] = ended_at
        self.data.update(extra)
        self.write()

    def write(self) -> None:
        """Replace plan.json with the plan now. A full disk keeps the last plan.json written (the plan stays
        in memory and the next change writes it whole), with one warning line (`llmload.diskfull`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        try:
            steps = [step if isinstance(step, dict) else step.plan_row() for step in self.data["steps"]]
            data = {**self.data, "steps": steps}
            tmp.write_text(json.dumps(data, indent=1, default=_plain), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            from llmload.diskfull import is_disk_full, warn_unwritable

            tmp.unlink(missing_ok=True)
            if not is_disk_full(exc):
                raise
            warn_unwritable(self.path, exc, "the plan is kept in memory and written at its next change")


def _plain(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
