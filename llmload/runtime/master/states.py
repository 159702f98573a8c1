"""The named states of a run (`Session`) and of its steps (`StepController`), and their transitions.

    run:    IDLE -> PREFLIGHT -> RUNNING [-> STOPPING] -> FINALISING -> DONE      (FAILED from anywhere)
    steps:  WAITING -> RUNNING [-> STOPPING] -> DONE | STOPPED | FAILED

A run is STOPPING once a stop from outside (the web UI, Locust's own shutdown) froze its controller;
its steps are STOPPING when a stop signal arrived (its time is noted, so workers that die of the same
signal end the step as `partial`, not lost) and STOPPED once what is queued or in flight is cancelled.
Every change goes through `llmload.statemachine.StateMachine.to`, which names an unexpected transition in
the log (a bug of ours) without stopping the run.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RUN_TRANSITIONS", "CONTROLLER_TRANSITIONS", "RunState", "ControllerState"]


class RunState(Enum):
    """Where one run of this Locust process (master or local runner) is."""

    IDLE = "idle"  # no run yet, or a new shaped run is about to start (web UI: Start again)
    PREFLIGHT = "preflight"  # run directory made; pre-flight checks, manifest, plan
    RUNNING = "running"  # the step controller runs the steps
    STOPPING = "stopping"  # a stop from outside froze the controller; the run is finalised on test_stop
    FINALISING = "finalising"  # merging records, analysis, report
    DONE = "done"  # finalised (or stopped before anything ran): the shape's tick ends Locust
    FAILED = "failed"  # a configuration or run error ended it (one line said why, exit code set)

    @property
    def over(self) -> bool:
        """The run ended: the shape's tick returns None (`finished`)."""
        return self in (RunState.DONE, RunState.FAILED)


class ControllerState(Enum):
    """Where the step controller is."""

    WAITING = "waiting"  # made, not started
    RUNNING = "running"
    STOPPING = "stopping"  # a stop signal arrived (`mark_stopping`): no later step starts
    STOPPED = "stopped"  # stopped from outside (`stop`): queued and in-flight requests are cancelled
    DONE = "done"  # every step ran (and the knee search's refine steps)
    FAILED = "failed"  # a greenlet of the run failed: the run ended with that error

    @property
    def stopping(self) -> bool:
        return self in (ControllerState.STOPPING, ControllerState.STOPPED)


_R = RunState
RUN_TRANSITIONS: dict[RunState, set[RunState]] = {
    _R.IDLE: {_R.PREFLIGHT, _R.DONE, _R.FAILED},
    _R.PREFLIGHT: {_R.RUNNING, _R.DONE, _R.FAILED},
    _R.RUNNING: {_R.STOPPING, _R.FINALISING, _R.FAILED},
    _R.STOPPING: {_R.FINALISING, _R.FAILED},
    _R.FINALISING: {_R.DONE, _R.FAILED},
    _R.DONE: {_R.IDLE, _R.PREFLIGHT, _R.FAILED},
    _R.FAILED: {_R.IDLE, _R.PREFLIGHT},
}
_S = ControllerState
CONTROLLER_TRANSITIONS: dict[ControllerState, set[ControllerState]] = {
    _S.WAITING: {_S.RUNNING, _S.STOPPING, _S.STOPPED, _S.FAILED},
    _S.RUNNING: {_S.STOPPING, _S.STOPPED, _S.DONE, _S.FAILED},
    _S.STOPPING: {_S.STOPPED, _S.DONE, _S.FAILED},
    _S.STOPPED: set(),  # stays: the plan says `stopped` (an error on the way is kept in `error`)
    _S.DONE: set(),
    _S.FAILED: set(),
}

