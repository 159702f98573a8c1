"""The in-process link between the master's step controller and worker runtimes in the same process.

The Locust link (`llmload.runtime.locustglue.seams.WorkerLink`) carries the typed messages
(`llmload.runtime.wire.messages`) over ZeroMQ; this one carries the same dicts by a function call each
way, read as the Locust side reads them (`read_message`, so a message one side cannot read fails the
run with its one line, as a live run would). A message is delivered in a greenlet of its own, as a
message off a socket is handled by the receiving loop, never inside the sender's call.

`lose(client_id)` makes a worker vanish as a killed worker process does: what it wrote to its record file
stays, nothing more is written or shipped, its users and their requests die (the server drops them, as a
closed connection), and the master sees it `missing` and no longer among `workers()`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
from gevent import Greenlet

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
        #: each worker's user greenlets (the run spawns them: `add_user`)
        self.users: dict[str, list[Greenlet]] = {cid: [] for cid in self.runtimes}
        #: the client ids of the workers lost (`lose`)
        self.lost: set[str] = set()

    def workers(self) -> list[tuple[str | None, str]]:
        return [(cid, runtime.worker) for cid, runtime in self.runtimes.items() if cid not in self.lost]

    def missing(self, client_id: str | None) -> bool:
        return client_id in self.lost

    def add_user(self, client_id: str, user: Greenlet) -> None:
        """`user` is one of the worker `client_id`'s users (it dies with the worker: `lose`)."""
        self.users[client_id].append(user)

    def lose(self, client_id: str) -> None:
        """The worker `client_id` vanishes now, as a killed worker process (see the module docstring)."""
        runtime = self.runtimes[client_id]
        if client_id in self.lost:
            return
        self.lost.add(client_id)
        writer, runtime.writer = runtime.writer, None  # what it flushed to its file is all it leaves
        if writer is not None:
            writer.close()
        gevent.killall(self.users.pop(client_id, []), block=True)
        runtime.close()

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        if client_id is None:
            raise ValueError("an in-process worker is named by its client id (w0, w1, ...)")
        if client_id in self.lost:  # as a message to a worker that is gone: nobody reads it
            return
        runtime = self.runtimes[client_id]
        handler = {STEP: runtime.on_step, CANCEL: runtime.on_cancel}.get(msg_type)
        if handler is None:
            raise ValueError(f"no in-process worker handler for message {msg_type!r}")
        gevent.spawn(handler, data)

    def _to_master(self, worker: str, kind: str, data: Any) -> None:
        if f"w{worker}" in self.lost:  # a lost worker sends nothing more
            return
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
