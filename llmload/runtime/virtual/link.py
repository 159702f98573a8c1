"""The in-process link between the master's step controller and worker runtimes in the same process.

The Locust link (`llmload.runtime.locustglue.seams.WorkerLink`) carries the typed messages
(`llmload.runtime.wire.messages`) over ZeroMQ; this one carries the same dicts by a function call each
way, read as the Locust side reads them (`read_message`, so a message one side cannot read fails the
run with its one line, as a live run would). A message is delivered in a greenlet of its own, as a
message off a socket is handled by the receiving loop, never inside the sender's call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gevent

from llmload.runtime.wire.messages import (
    CANCEL,
    DRAINED,
    RESULTS,
    STEP,
    DrainedMessage,
    ResultsMessage,
    read_message,
)
from llmload.runtime.worker.scheduler import WorkerRuntime

__all__ = ["InProcessLink"]


class InProcessLink:
    """A master's `WorkerLink` over `WorkerRuntime`s in this process (client ids `w0`, `w1`, ...)."""

    local = False

    def __init__(self, make_worker: Callable[[Callable[[str, Any], None]], WorkerRuntime], workers: int) -> None:
        #: the controller the workers' messages go to (set once it is made)
        self.controller: Any = None
        self.runtimes: dict[str, WorkerRuntime] = {}
        for i in range(workers):
            name = str(i)
            runtime = make_worker(partial(self._to_master, name))
            runtime.worker = name
            self.runtimes[f"w{i}"] = runtime

    def workers(self) -> list[tuple[str | None, str]]:
        return [(cid, runtime.worker) for cid, runtime in self.runtimes.items()]

    def missing(self, client_id: str | None) -> bool:
        return False

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        if client_id is None:
            raise ValueError("an in-process worker is named by its client id (w0, w1, ...)")
        runtime = self.runtimes[client_id]
        handler = {STEP: runtime.on_step, CANCEL: runtime.on_cancel}.get(msg_type)
        if handler is None:
            raise ValueError(f"no in-process worker handler for message {msg_type!r}")
        gevent.spawn(handler, data)

    def _to_master(self, worker: str, kind: str, data: Any) -> None:
        gevent.spawn(self._deliver, worker, kind, data)

    def _deliver(self, worker: str, kind: str, data: Any) -> None:
        controller = self.controller
        if controller is None:
            return
        if kind == RESULTS:
            results = read_message(ResultsMessage, data, worker=worker, fail=controller.fail)
            if results is not None:
                controller.on_results(results)
        elif kind == DRAINED:
            drained = read_message(DrainedMessage, data, worker=worker, fail=controller.fail)
            if drained is not None:
                controller.on_drained(drained)
