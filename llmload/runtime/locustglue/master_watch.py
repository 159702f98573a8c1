"""A worker whose master is gone stops (issue 44, item 8): no more requests, its records closed, one line,
exit code 3.

A master SIGKILLed mid-step used to leave its remote worker sending the rest of the step to a server
nobody was measuring for, then exiting 0 some 60 s later with only Locust's "Didn't get heartbeat from
master". Locust's master answers each worker heartbeat (one a second), so `MasterWatch` checks the
time of the last answer; silence over `SILENT_S` alone is not enough (a master busy finalising a large
run answers late, and a worker that left it then would be wrong), so the master's port is also tried:
a master whose process is gone refuses the connection, while a busy one still accepts it (ZeroMQ's I/O
thread listens for it). Any other failure (no answer within `PROBE_TIMEOUT_S`, no route to the host: a
link cut, a host down) is not taken as proof that the master died: a network partition may heal, and the worker then
goes on (tests/runtime/test_netns.py cuts a worker's link for 6 s). Only `UNREACHABLE_S` of silence
with no answer, Locust's own heartbeat timeout, loses the master then.

Then the worker stops sending at once (`WorkerRuntime.abandon`: queued arrivals and in-flight requests
recorded `cancelled`, the record file closed), prints one `llmload: error:` line naming the master and
where its records are, and exits with code 3: no conclusion (docs/USAGE.md's exit codes).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent

__all__ = ["LOST_EXIT", "MasterWatch", "PROBE_TIMEOUT_S", "SILENT_S"]

log = logging.getLogger("llmload.worker")

#: the master's heartbeats (one a second) missed before its port is tried
SILENT_S = 3.0
#: how long a connection to the master's port may take before the master counts as unreachable
PROBE_TIMEOUT_S = 2.0
#: silence with a port that does not answer (no refusal: a cut link, a host down) that loses the master:
#: Locust's own heartbeat timeout (a partition shorter than this heals, and the worker goes on)
UNREACHABLE_S = 60.0
#: what `unreachable` says of a refused connection: the master's host is there, its process is not
REFUSED = os.strerror(errno.ECONNREFUSED).lower()
#: how often the watch looks
CHECK_EVERY_S = 0.5
#: a worker's exit code once its master is lost: no conclusion
LOST_EXIT = 3


class MasterWatch:
    """Watches a Locust `WorkerRunner`'s master; `run` returns once it is lost (then the process ends)."""

    def __init__(self, runner: Any, worker: Any, *, clock: Callable[[], float] = time.time,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.runner = runner
        self.worker = worker
        self._clock = clock
        self._exit = exit

    @property
    def master(self) -> str:
        return f"{self.runner.master_host}:{self.runner.master_port}"

    def silent_s(self) -> float | None:
        """Seconds since the master's last heartbeat (None before the first: not joined yet)."""
        last = getattr(self.runner, "last_heartbeat_timestamp", None)
        return None if last is None else self._clock() - last

    def unreachable(self) -> str | None:
        """Why the master's port cannot be reached now (None: it accepts connections)."""
        try:
            with socket.create_connection((self.runner.master_host, int(self.runner.master_port)),
                                          timeout=PROBE_TIMEOUT_S):
                return None
        except TimeoutError:
            return f"no answer within {PROBE_TIMEOUT_S:.0f} s"
        except OSError as exc:
            return (exc.strerror or type(exc).__name__).lower()

    def lost(self) -> str | None:
        """Why the master counts as lost now (None: it is there, has not been heard from yet, or cannot be
        reached for less than `UNREACHABLE_S`: the module docstring)."""
        silent = self.silent_s()
        if silent is None or silent < SILENT_S:
            return None
        why = self.unreachable()
        if why is None or (why != REFUSED and silent < UNREACHABLE_S):
            return None
        return f"no heartbeat for {silent:.0f} s and its port says: {why}"

    def run(self) -> None:
        while True:
            gevent.sleep(CHECK_EVERY_S)
            why = self.lost()
            if why is not None:
                self.stop(why)
                return

    def stop(self, why: str) -> None:
        """Stop sending, close the records, say it in one line, exit `LOST_EXIT`."""
        kept = None
        try:
            kept = self.worker.abandon()
        except Exception:
            log.exception("the worker could not stop cleanly")
        where = f": its {kept} record(s) are in {self.worker.run_dir / 'records'}" if kept is not None and \
            self.worker.run_dir is not None else ""
        with contextlib.suppress(OSError, ValueError):
            print(f"llmload: error: lost the master at {self.master} ({why}): this worker stopped sending, "
                  f"its in-flight requests recorded as cancelled{where} (exit code {LOST_EXIT})",
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
        self._exit(LOST_EXIT)
