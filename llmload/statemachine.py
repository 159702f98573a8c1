"""`StateMachine`: one named state, its transition table, and the only place it changes.

Each piece of state with a lifecycle has one, instead of boolean flags: the run and the step controller
(`llmload.runtime.master.states`), and each step on a worker (`llmload.runtime.worker.scheduler.StepPhase`).
A transition the table does not list is a bug of ours: `to` names it in the log and keeps the state,
without stopping the run.
"""

from __future__ import annotations

import logging
from enum import Enum

__all__ = ["StateMachine"]

log = logging.getLogger("llmload.states")


class StateMachine:
    """One named state and the only place it changes."""

    def __init__(self, initial: Enum, transitions: dict, *, name: str) -> None:
        self.state = initial
        self._transitions = transitions
        self._name = name

    def to(self, new: Enum) -> bool:
        """Move to `new`; False (and the state unchanged) when it already is there or `new` is not a
        transition out of the current state (logged: such a call is a bug of ours)."""
        if new is self.state:
            return False
        if new not in self._transitions[self.state]:
            log.warning("%s: no transition %s -> %s (kept %s)", self._name, self.state.name, new.name,
                        self.state.name)
            return False
        log.debug("%s: %s -> %s", self._name, self.state.name, new.name)
        self.state = new
        return True

    def is_(self, *states: Enum) -> bool:
        return self.state in states
