"""The named states of a run (`RunLifecycle`) and of its steps (`StepController`), and their transitions.

    run:    IDLE -> PREFLIGHT -> RUNNING [-> STOPPING] -> FINALISING -> DONE      (FAILED from anywhere;
            PREFLIGHT -> DONE: stopped before anything ran)
    steps:  WAITING -> RUNNING [-> STOPPING] -> DONE | STOPPED | FAILED

A run is STOPPING once a stop from outside (the web UI's Stop, Locust's test_stop, a stop signal) froze its
controller; why it was stopped is the `RunStop` its `RunMachine` keeps beside the state (the first
`StopReason`, the stop signal, Locust quitting): the one answer to "is the run stopping, and why". Its
steps are STOPPING when a stop signal arrived (its time is noted, so workers that die of the same signal
end the step as `partial`, not lost) and STOPPED once what is queued or in flight is cancelled. Every
change goes through `llmload.statemachine.StateMachine.to`, which names an unexpected transition in the
log (a bug of ours) without stopping the run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import gevent.event

from llmload.statemachine import StateMachine

__all__ = ["RUN_TRANSITIONS", "CONTROLLER_TRANSITIONS", "ControllerState", "RunMachine", "RunState", "RunStop",
           "StopReason"]


class StopReason(Enum):
    """Why a run is stopped from outside (the Locust event or signal that `Session` turned into it)."""

    #: Locust's `test_stopping`: the web UI's Stop (also a lost last worker, `runner.stop()`). The
    #: controller stops before the users do: the current step is `partial`, no later step starts, what is
    #: queued or in flight is cancelled with `llmload:cancel` (remote workers' records reach the master)
    WEB_STOP = "web_stop"
    #: Locust's `test_stop`: the users are stopped. What ran is kept and the run is finalised (unless it
    #: ended and finalised itself); a stop that did not announce itself stops the controller first
    USERS_STOPPED = "users_stopped"
    #: Locust's `quitting`: it shuts down (its SIGTERM handler, the end of a run). The users are stopped
    #: first (their in-flight requests recorded as cancelled) and the run finalised before the exit code
    #: is read
    QUITTING = "quitting"
    #: SIGINT, SIGTERM or SIGHUP: the run is stopped, finalised, and the process ends with 128 + the
    #: signal number; once the run is over, the process ends with the run's own exit code
    SIGNAL = "signal"


class RunState(Enum):
    """Where one run of this Locust process (master or local runner) is."""

    IDLE = "idle"  # no run yet, or a new shaped run is about to start (web UI: Start again)
    PREFLIGHT = "preflight"  # run directory made; pre-flight checks, manifest, plan
    RUNNING = "running"  # the step controller runs the steps
    STOPPING = "stopping"  # a stop from outside froze the controller (`RunMachine.stop`: why); it finalises
    FINALISING = "finalising"  # merging records, analysis, report
    DONE = "done"  # finalised (or stopped before anything ran): the shape's tick ends Locust
    FAILED = "failed"  # a configuration or run error ended it (one line said why, exit code set)

    @property
    def over(self) -> bool:
        """The run ended: the shape's tick returns None (`finished`)."""
        return self in (RunState.DONE, RunState.FAILED)

    @property
    def settled(self) -> bool:
        """No run is under way or being finalised: a stop waits for this before Locust exits, so the run
        directory is always complete."""
        return self in (RunState.IDLE, RunState.DONE, RunState.FAILED)


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


@dataclass(frozen=True)
class RunStop:
    """Why a run was stopped from outside, as `RunMachine.stopped` notes it."""

    #: the first stop of the run (noted while the run is not over; after it, only Locust's quitting)
    reason: StopReason
    #: the stop signal (SIGINT, SIGTERM, SIGHUP) that stopped the run: the process ends with 128 + it;
    #: None when no signal stopped it
    signo: int | None = None
    #: Locust's `quitting` came: it shuts down and closes its web UI itself
    quitting: bool = False


class RunMachine:
    """The run's state (`RunState`) and why it was stopped from outside (`stop`): the one place both
    change. `settled` mirrors the state for greenlets that wait on it (`wait_settled`)."""

    def __init__(self) -> None:
        self._machine = StateMachine(RunState.IDLE, RUN_TRANSITIONS, name="run")
        self._stop: RunStop | None = None
        #: set exactly while `state.settled` (kept by `to`): what `wait_settled` waits on
        self._at_rest = gevent.event.Event()
        self._at_rest.set()

    @property
    def state(self) -> RunState:
        state = self._machine.state
        assert isinstance(state, RunState)  # `StateMachine` holds the states it was made with
        return state

    @property
    def stop(self) -> RunStop | None:
        """Why the run was stopped from outside; None while it was not (a new run starts with None)."""
        return self._stop

    @property
    def settled(self) -> bool:
        return self.state.settled

    @property
    def signo(self) -> int | None:
        """The stop signal that stopped the run, None while none did."""
        return self.stop.signo if self.stop is not None else None

    @property
    def quitting(self) -> bool:
        """Locust is shutting down (its `quitting` came)."""
        return self.stop is not None and self.stop.quitting

    def to(self, state: RunState) -> bool:
        """Move to `state` (`StateMachine.to`: an unlisted transition is logged and refused). A new run
        (PREFLIGHT) starts with no stop noted."""
        if not self._machine.to(state):
            return False
        if state is RunState.PREFLIGHT:
            self._stop = None
        if state.settled:
            self._at_rest.set()
        else:
            self._at_rest.clear()
        return True

    def stopped(self, reason: StopReason, *, signo: int | None = None) -> RunStop | None:
        """Note a stop from outside: its `reason` if it is the run's first while the run is not over (once
        it is over, only Locust's quitting is noted); `signo`, the stop signal that stops the run; whether
        Locust is quitting. Returns the record (None: nothing to note)."""
        quitting, noted = reason is StopReason.QUITTING, self._stop
        if noted is None:
            if not self.state.over or quitting or signo is not None:
                self._stop = RunStop(reason, signo=signo, quitting=quitting)
        else:
            self._stop = replace(noted, signo=noted.signo if noted.signo is not None else signo,
                                 quitting=noted.quitting or quitting)
        return self._stop

    def wait_settled(self) -> None:
        """Block this greenlet until no run is under way or being finalised (`RunState.settled`)."""
        self._at_rest.wait()
