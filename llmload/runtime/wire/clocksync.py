"""One clock across hosts: the master measures each worker's clock NTP-style over Locust's messages.

An exchange: the master sends `llmload:clock_ping` stamped `t0` on its clock; the worker stamps its
receipt `t1` and its answer `t2` on its own clock (`RealClock.raw_now`, `llmload.clocks`) and sends
`llmload:clock_pong`; the master stamps the answer's receipt `t3`. Then, as in NTP,

    offset = ((t1 - t0) + (t2 - t3)) / 2        (the worker's clock minus the master's)
    rtt    = (t3 - t0) - (t2 - t1)              (the round trip, less the worker's own time)

and the true offset lies within `rtt / 2` of the estimate whatever the split of the round trip between
the two directions. A measurement is `EXCHANGES` exchanges, one at a time, keeping the one with the
smallest round trip (the least queueing in ZeroMQ, gevent or the network).

The master measures every worker when the run starts (`ClockSync.measure`), a worker first seen at a
step's launch then, and every worker again when each step has drained. Each step message carries the
worker's latest offset; the worker applies it (`Clock.set_offset`, `llmload.clocks`), so it schedules on the
master's timeline and writes its records on the master's clock. A step's clock error on one worker is
the uncertainty of the offset it ran with plus how far the offset moved by the step's end (`drift_s`):
`StepClock` in plan.json, judged by `analysis.validity` (check `clock`). manifest.json's `clocks`
(`clocks_record`) has each worker's offset, uncertainty and drift over the run.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult

from llmload.clocks import REAL_CLOCK
from llmload.errors import MessageError
from llmload.runtime.wire.messages import CLOCK_PING, CLOCK_PONG, ClockPing, ClockPong

__all__ = ["EXCHANGES", "PING", "PONG", "ClockSample", "ClockSync", "WorkerClock", "answer_ping", "best_sample"]

log = logging.getLogger("llmload.clocksync")

PING = CLOCK_PING
PONG = CLOCK_PONG
#: exchanges per measurement (the smallest round trip is kept)
EXCHANGES = 8
#: how long the master waits for one answer before it gives the exchange up
PONG_TIMEOUT_S = 1.0


@dataclass(slots=True, frozen=True)
class ClockSample:
    """One measurement of a worker's clock: at master time `at`, its offset and round trip (seconds)."""

    at: float
    offset_s: float
    rtt_s: float

    @property
    def uncertainty_s(self) -> float:
        """The true offset is within this of `offset_s` (half the round trip)."""
        return self.rtt_s / 2


def best_sample(exchanges: list[tuple[float, float, float, float]]) -> ClockSample | None:
    """The min-round-trip sample of `(t0, t1, t2, t3)` exchanges (module docstring), None if none."""
    best: ClockSample | None = None
    for t0, t1, t2, t3 in exchanges:
        rtt = max(0.0, (t3 - t0) - (t2 - t1))
        if best is None or rtt < best.rtt_s:
            best = ClockSample(at=(t0 + t3) / 2, offset_s=((t1 - t0) + (t2 - t3)) / 2, rtt_s=rtt)
    return best


@dataclass
class WorkerClock:
    """Every measurement of one worker's clock during a run."""

    samples: list[ClockSample] = field(default_factory=list)

    @property
    def latest(self) -> ClockSample | None:
        return self.samples[-1] if self.samples else None

    def record(self) -> dict[str, Any]:
        """manifest.json's entry: latest offset and uncertainty, drift over the run (first to last)."""
        first, last = self.samples[0], self.samples[-1]
        span = last.at - first.at
        drift = last.offset_s - first.offset_s
        return {"offset_s": last.offset_s, "uncertainty_s": last.uncertainty_s,
                "uncertainty_max_s": max(s.uncertainty_s for s in self.samples),
                "first_offset_s": first.offset_s, "drift_s": drift,
                "drift_ppm": drift / span * 1e6 if span > 0 else None, "span_s": span,
                "measurements": len(self.samples)}


def answer_ping(data: dict, send: Callable[[str, dict], None], *, clock: Callable[[], float] = REAL_CLOCK.raw_now) -> None:
    """The worker's side of an exchange (`ClockPing` in, `ClockPong` out): stamp the receipt and the
    answer on this host's own clock. A ping it cannot read is logged and left unanswered."""
    t1 = clock()
    try:
        ping = ClockPing.from_dict(data)
    except MessageError as exc:
        log.error("%s", exc)
        return
    send(PONG, ClockPong(seq=ping.seq, t0=ping.t0, t1=t1, t2=clock()).to_dict())


class ClockSync:
    """The master's measurements of its workers' clocks (module docstring).

    `send(msg_type, data, client_id)` reaches one worker; `on_pong` takes the answers."""

    def __init__(self, send: Callable[[str, dict, str | None], None], *, clock: Callable[[], float] = REAL_CLOCK.now,
                 exchanges: int = EXCHANGES, timeout_s: float = PONG_TIMEOUT_S) -> None:
        self._send = send
        self._clock = clock
        self.exchanges = exchanges
        self.timeout_s = timeout_s
        self.clocks: dict[str, WorkerClock] = {}
        #: workers that answered no exchange of a measurement (said once each)
        self.silent: set[str] = set()
        self._pending: dict[int, AsyncResult] = {}
        self._seq = itertools.count(1)

    def reset(self) -> None:
        """A new run (the web UI starts runs one after another): its own measurements only."""
        self.clocks, self.silent = {}, set()

    def on_pong(self, data: dict) -> None:
        """A worker's answer (`ClockPong`): resolves the exchange waiting for it (a late one is dropped;
        one that cannot be read is logged and its exchange times out)."""
        try:
            pong = ClockPong.from_dict(data)
        except MessageError as exc:
            log.error("%s", exc)
            return
        waiting = self._pending.pop(pong.seq, None)
        if waiting is not None:
            waiting.set((float(pong.t0), float(pong.t1), float(pong.t2), self._clock()))

    def _exchange(self, client_id: str | None) -> tuple[float, float, float, float] | None:
        seq = next(self._seq)
        waiting = self._pending[seq] = AsyncResult()
        self._send(PING, ClockPing(seq=seq, t0=self._clock()).to_dict(), client_id)
        try:
            return waiting.get(timeout=self.timeout_s)
        except gevent.Timeout:
            return None
        finally:
            self._pending.pop(seq, None)

    def measure_one(self, client_id: str | None, name: str) -> ClockSample | None:
        """One measurement of worker `name` (`EXCHANGES` exchanges, the min-round-trip one kept)."""
        exchanges: list[tuple[float, float, float, float]] = []
        for _ in range(self.exchanges):
            answer = self._exchange(client_id)
            if answer is None and not exchanges:
                break  # the first exchange went unanswered: a missing or silent worker, not worth a wait each
            if answer is not None:
                exchanges.append(answer)
        sample = best_sample(exchanges)
        if sample is None:
            if name not in self.silent:
                self.silent.add(name)
                log.warning("worker %s answered no clock exchange: its records stay on its own clock", name)
            return None
        self.clocks.setdefault(name, WorkerClock()).samples.append(sample)
        return sample

    def measure(self, workers: list[tuple[str | None, str]]) -> None:
        """Measure every worker of `workers` ((client id, name)), all at once."""
        gevent.joinall([gevent.spawn(self.measure_one, cid, name) for cid, name in workers])

    def latest(self, name: str) -> ClockSample | None:
        clock = self.clocks.get(name)
        return clock.latest if clock is not None else None

    def clocks_record(self) -> dict[str, dict]:
        """manifest.json's `clocks`: per worker name, `WorkerClock.record`."""
        return {name: clock.record() for name, clock in sorted(self.clocks.items()) if clock.samples}

    def step_clock(self, name: str, applied: ClockSample | None) -> dict[str, Any]:
        """plan.json's clock entry of one worker for a step that ran with offset `applied`, now that the
        step drained and the worker was measured again: its uncertainty, the drift since, their sum."""
        if applied is None:
            return {"offset_s": None, "uncertainty_s": None, "drift_s": None, "error_s": None}
        latest = self.latest(name)
        drift = latest.offset_s - applied.offset_s if latest is not None and latest is not applied else 0.0
        return {"offset_s": applied.offset_s, "uncertainty_s": applied.uncertainty_s, "drift_s": drift,
                "error_s": applied.uncertainty_s + abs(drift)}
