"""The clock a runtime is handed: `now`, `sleep`, `sleep_until`, `wait_until`, `cpu_time`, `set_offset`.

Nothing in `llmload/runtime/` reads the process clock or arms a timer itself; the master, the worker
runtime and the sender each get a `Clock`:

- `RealClock` (`REAL_CLOCK`): `llmload.clock.now` (wall seconds from the monotonic clock, on the master's
  timeline once `set_offset` applied the offset it measured), gevent sleeps, and the precise wake-up of a
  Linux timerfd (`llmload.timerfd`) for an arrival's release.
- `VirtualClock`: seconds that pass only when every greenlet sleeps. A sleeping greenlet waits on its
  own wake-up; one driver greenlet lets every other greenlet run until the loop is idle (`gevent.idle`),
  then moves the clock to the earliest wake-up and wakes that sleeper (ties in the order they slept). A
  five-minute soak runs in milliseconds, in the same order every time (tests, `llmload run --virtual`).
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Protocol

import gevent
from gevent.event import Event

from llmload import clock, timerfd

__all__ = ["REAL_CLOCK", "SPIN_S", "YIELD_BELOW_S", "Clock", "RealClock", "VirtualClock"]

#: the last stretch before a release time is spent yielding to the loop rather than in a gevent timer
SPIN_S = 0.0006
#: a time closer than this is waited for by yielding to the loop: a sleep and its wake-up cost more
#: CPU (~0.25 ms per request on the 2-vCPU VMs, bench/README.md)
YIELD_BELOW_S = 0.0003


class Clock(Protocol):
    """What a runtime needs of time. `precise`: `sleep_until` wakes within ~50 us (the worker then
    learns how early to queue an arrival, `worker.scheduler.Lead`)."""

    precise: bool

    def now(self) -> float:
        """Seconds on the run's timeline (wall-clock seconds for the real clock)."""

    def sleep(self, seconds: float) -> None:
        """Block this greenlet for `seconds` (0 or less: yield), other greenlets running meanwhile."""

    def sleep_until(self, at: float) -> None:
        """One wake-up at about `at` (the scheduler's: no spinning, may be up to 1 ms late)."""

    def wait_until(self, at: float) -> None:
        """Return at `at`, never before it (a request's release)."""

    def cpu_time(self) -> float:
        """This process's CPU seconds as this clock counts them (the worker's CPU samples)."""

    def set_offset(self, offset_s: float) -> None:
        """Put `now` on the master's timeline (`offset_s`: this host's clock minus the master's)."""


class RealClock:
    """The process's clock, gevent's sleeps and a timerfd's wake-ups (see the module docstring)."""

    @property
    def precise(self) -> bool:
        return timerfd.available()

    def now(self) -> float:
        return clock.now()

    def raw_now(self) -> float:
        """This host's own clock, whatever `set_offset` applied (what the master's clock sync measures)."""
        return clock.raw_now()

    def sleep(self, seconds: float) -> None:
        gevent.sleep(max(0.0, seconds))

    def sleep_until(self, at: float) -> None:
        if at > clock.now() and not timerfd.wait(at):
            gevent.sleep(max(0.0, at - clock.now()))

    def wait_until(self, at: float) -> None:
        """A time under `YIELD_BELOW_S` away (the worker's lead is learnt to leave about that): yield to
        the loop until it. Farther: one wake-up on a Linux timerfd (within the kernel's timer slack,
        ~50 us); without one, a gevent sleep until `SPIN_S` before it (libev's timers wake up to 1 ms
        late), then the yields."""
        now = clock.now
        left = at - now()
        if left <= 0:
            return
        if left >= YIELD_BELOW_S and timerfd.wait(at):
            return
        delay = at - now() - SPIN_S
        if delay > 0:
            gevent.sleep(delay)
        while now() < at:
            gevent.sleep(0)

    def cpu_time(self) -> float:
        return time.process_time()

    def set_offset(self, offset_s: float) -> None:
        clock.set_offset(offset_s)


#: the one real clock (its state, the offset onto the master's timeline, is the process's)
REAL_CLOCK = RealClock()


class VirtualClock:
    """Seconds that pass only when every greenlet sleeps (deterministic, as fast as the CPU)."""

    precise = False

    def __init__(self, start_s: float = 1_000.0, *, limit_s: float = 86_400.0) -> None:
        self.t = float(start_s)
        #: sleeping past this much virtual time means a run that never ends: the driver raises
        self.limit_s = self.t + limit_s
        self._sleepers: list[tuple[float, int, Event]] = []
        self._seq = itertools.count()
        self._driver: gevent.Greenlet | None = None

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        """Block this greenlet for `seconds` of virtual time (0 or less: just yield)."""
        if seconds <= 0:
            gevent.sleep(0)
            return
        wake = Event()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), wake))
        if self._driver is None or self._driver.dead:
            self._driver = gevent.spawn(self._drive)
        wake.wait()

    def sleep_until(self, at: float) -> None:
        if at > self.t:
            self.sleep(at - self.t)

    wait_until = sleep_until

    def cpu_time(self) -> float:
        """0: a virtual run's generator costs no time on its clock."""
        return 0.0

    def set_offset(self, offset_s: float) -> None:
        """One process, one timeline: only a zero offset means anything here."""
        if offset_s:
            raise ValueError(f"a virtual clock has no other timeline to move onto (offset {offset_s} s)")

    def _drive(self) -> None:
        while self._sleepers:
            gevent.idle()  # every runnable greenlet ran until it blocked
            while self._sleepers and self._sleepers[0][2].ready():
                heapq.heappop(self._sleepers)  # a sleeper killed meanwhile (never woken)
            if not self._sleepers:
                return
            at, _, wake = heapq.heappop(self._sleepers)
            if at > self.limit_s:
                raise RuntimeError(f"virtual time ran past {self.limit_s:g} s: a run that never ends")
            self.t = max(self.t, at)
            wake.set()
