"""The on-time release of a planned request (`sending.wait_until`, `llmload.runtime.alarm`): one
timerfd wake-up at the arrival's time, no yield loop, other greenlets run meanwhile, a killed waiter
leaves nothing behind (issue 20: the yield loop cost ~0.1-0.2 ms of CPU per request)."""

from __future__ import annotations

import sys

import gevent
import pytest

from llmload.clock import now
from llmload.runtime import alarm, sending

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def test_one_wake_up_at_the_time_and_no_yield_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    real_sleep = gevent.sleep
    monkeypatch.setattr(sending.gevent, "sleep", lambda s=0: (sleeps.append(s), real_sleep(s))[1])
    ticks: list[float] = []
    ticker = gevent.spawn(lambda: [ticks.append(now()) or real_sleep(0.001) for _ in range(100)])
    lags = []
    for _ in range(20):
        at = now() + 0.004
        sending.wait_until(at)
        lags.append(now() - at)
    ticker.kill()
    assert sleeps == []  # no gevent sleep, no sleep(0) spin: the timerfd is the only wait
    assert min(lags) >= 0  # never early
    assert sorted(lags)[len(lags) // 2] < 0.002  # on time (the kernel's slack is ~50 us; a loaded CI box)
    assert len(ticks) >= 20  # the loop ran other greenlets meanwhile


def test_a_waiter_killed_early_leaves_no_readable_alarm() -> None:
    waiter = gevent.spawn(sending.wait_until, now() + 0.02)
    gevent.sleep(0.001)
    waiter.kill(block=True)
    gevent.sleep(0.03)  # the killed waiter's time passes: a pooled fd must not fire for the next one
    at = now() + 0.01
    sending.wait_until(at)
    assert now() >= at


def test_concurrent_waiters_each_wake_at_their_own_time() -> None:
    base = now() + 0.005
    times = [base + 0.003 * i for i in range(6)][::-1]
    woke: dict[float, float] = {}

    def one(at: float) -> None:
        sending.wait_until(at)
        woke[at] = now()

    gevent.joinall([gevent.spawn(one, at) for at in times])
    assert all(woke[at] >= at for at in times)
    assert sorted(woke, key=woke.get) == sorted(times)


def test_the_past_returns_at_once_and_fallback_without_timerfd(monkeypatch: pytest.MonkeyPatch) -> None:
    t = now()
    sending.wait_until(t - 1.0)
    assert now() - t < 0.01
    monkeypatch.setattr(alarm, "_alarms", None)  # no timerfd: the sleep-and-yield loop, still on time
    at = now() + 0.003
    sending.wait_until(at)
    assert now() >= at
