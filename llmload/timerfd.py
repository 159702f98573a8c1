"""A precise, cheap wake-up at a wall time for a gevent greenlet: one Linux `timerfd` per waiter.

The real clock's wake-up (`llmload.clocks.RealClock`; nothing else arms one). libev's epoll backend
rounds every timer's wait up to whole milliseconds, so a gevent timer wakes up to 1 ms late.
`RealClock.wait_until` used to sleep to 0.6 ms before the time and then yield to the loop
until it: on time, but a busy loop of `epoll_wait(0)` calls for the last stretch (~0.1-0.2 ms of CPU
per request). A `timerfd` armed at the absolute `CLOCK_MONOTONIC` time (the clock of
`time.perf_counter`, which `llmload.clock.now` maps to wall time) makes the fd readable within the
kernel's timer slack (~50 us): the greenlet waits on it like on a socket, one wake-up, no spinning.

`wait(at)` returns False where this is not available (not Linux, no libc `timerfd_*`, another clock
behind `perf_counter`); the caller falls back to the sleep-and-yield loop. The fds are pooled per
process (a forked child makes its own) and per event loop, one per greenlet waiting at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import time
from typing import Any

from gevent.hub import get_hub

from llmload.clock import wall_base

__all__ = ["available", "wait"]

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Alarm:
    """One timerfd and its libev read watcher."""

    __slots__ = ("fd", "watcher", "loop", "spec")

    def __init__(self, fd: int, loop: Any) -> None:  # gevent's libev loop (gevent has no type information)
        self.fd, self.loop = fd, loop
        self.watcher = loop.io(fd, 1)
        self.spec = _Itimerspec()


class _Alarms:
    def __init__(self, libc: ctypes.CDLL) -> None:
        self.create, self.settime = libc.timerfd_create, libc.timerfd_settime
        self.create.argtypes, self.create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        self.settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        self.settime.restype = ctypes.c_int
        self.pid = os.getpid()
        self.free: list[_Alarm] = []

    def take(self, loop: object) -> _Alarm | None:
        if self.pid != os.getpid():  # a forked child: the parent's fds are shared with it, never reuse them
            self.pid, self.free = os.getpid(), []
        for i in range(len(self.free) - 1, -1, -1):
            if self.free[i].loop is loop:
                return self.free.pop(i)
        fd = self.create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        return _Alarm(fd, loop) if fd >= 0 else None

    def arm(self, alarm: _Alarm, ns: int) -> bool:
        value = alarm.spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        return self.settime(alarm.fd, _TFD_TIMER_ABSTIME, ctypes.byref(alarm.spec), None) == 0

    def give_back(self, alarm: _Alarm, *, fired: bool) -> None:
        if not fired:  # killed while waiting: disarm, so the fd is not left readable for the next waiter
            alarm.spec.it_value.tv_sec = alarm.spec.it_value.tv_nsec = 0
            self.settime(alarm.fd, 0, ctypes.byref(alarm.spec), None)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(alarm.fd, 8)
        self.free.append(alarm)


def _load() -> _Alarms | None:
    if not sys.platform.startswith("linux"):
        return None
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return None
    try:
        return _Alarms(ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True))
    except (OSError, AttributeError):
        return None


_alarms: _Alarms | None = None  # None: not loaded yet, or not available (`_loaded` says which)
_loaded = False


def _get() -> _Alarms | None:
    global _alarms, _loaded
    if not _loaded:
        _alarms, _loaded = _load(), True
    return _alarms


def available() -> bool:
    """Whether `wait` can wake precisely here (Linux, a timerfd, `perf_counter` on CLOCK_MONOTONIC)."""
    return _get() is not None


def wait(at: float) -> bool:
    """Block this greenlet until wall time `at` (llmload.clock), other greenlets running meanwhile.
    False: no timerfd here (nothing waited; the caller waits its own way)."""
    alarms = _get()
    if alarms is None:
        return False
    hub = get_hub()
    alarm = alarms.take(hub.loop)
    if alarm is None:
        return False
    if not alarms.arm(alarm, int((at - wall_base()) * 1e9)):
        alarms.free.append(alarm)
        return False
    fired = False
    try:
        hub.wait(alarm.watcher)
        fired = True
    finally:
        alarms.give_back(alarm, fired=fired)
    return True
