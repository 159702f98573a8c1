"""The master's clock exchanges with its workers (llmload.runtime.wire.clocksync): NTP's offset and round trip,
the minimum-round-trip sample, a silent worker, drift over the run; and a worker's clock put on the
master's timeline (llmload.clock.set_offset). Clocks are injected: nothing here depends on timing."""

from __future__ import annotations

import gevent
import pytest

from llmload import clock
from llmload.runtime.wire.clocksync import PING, PONG, ClockSync, answer_ping, best_sample


def test_the_offset_and_round_trip_are_ntps_and_the_fastest_exchange_wins():
    # the worker's clock is 2 s ahead; out in 1 ms and back in 3 ms (asymmetric), then a 0.2 ms round trip
    slow = (10.0, 12.001, 12.0015, 10.0045)
    fast = (11.0, 13.0001, 13.0002, 11.0003)
    sample = best_sample([slow, fast])
    assert sample.rtt_s == pytest.approx(0.0002) and sample.uncertainty_s == pytest.approx(0.0001)
    assert sample.offset_s == pytest.approx(2.0, abs=sample.uncertainty_s)
    assert best_sample([slow]).offset_s == pytest.approx(2.0 - 0.001, abs=1e-9)  # half the asymmetry off...
    assert abs(best_sample([slow]).offset_s - 2.0) <= best_sample([slow]).uncertainty_s  # ...within its bound
    assert best_sample([]) is None


class _Ticks:
    """A clock that moves 0.5 ms on every reading (the master's); `skewed(d)` reads it d seconds off."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 0.0005
        return self.t

    def skewed(self, offset_s: float):
        return lambda: self() + offset_s


def _worker_pair(ticks: _Ticks, offsets: dict[str, float], silent: tuple[str, ...] = ()) -> ClockSync:
    sync: ClockSync

    def send(msg_type: str, data: dict, client_id: str | None) -> None:
        assert msg_type == PING
        if client_id in silent:
            return

        def reply(kind: str, answer: dict) -> None:
            assert kind == PONG
            sync.on_pong(answer)

        gevent.spawn(answer_ping, data, reply, clock=ticks.skewed(offsets[client_id]))

    sync = ClockSync(send, clock=ticks, timeout_s=0.05)
    return sync


def test_the_master_measures_each_workers_offset_and_its_drift_over_the_run():
    ticks = _Ticks()
    offsets = {"a": 2.0, "b": -2.0}
    sync = _worker_pair(ticks, offsets)
    sync.measure([("a", "1"), ("b", "2")])
    for name, true in (("1", 2.0), ("2", -2.0)):  # NTP's bound: within half the round trip
        sample = sync.latest(name)
        assert abs(sample.offset_s - true) <= sample.uncertainty_s + 1e-12 and sample.rtt_s < 0.01
    applied = sync.latest("1")
    ticks.t += 100.0
    offsets["a"] += 0.001  # 10 ppm over 100 s
    sync.measure([("a", "1"), ("b", "2")])
    step = sync.step_clock("1", applied)
    drift = sync.latest("1").offset_s - applied.offset_s
    assert step["offset_s"] == applied.offset_s and step["drift_s"] == drift
    assert drift == pytest.approx(0.001, abs=applied.uncertainty_s + sync.latest("1").uncertainty_s)
    assert step["error_s"] == pytest.approx(applied.uncertainty_s + abs(drift))
    record = sync.clocks_record()
    assert set(record) == {"1", "2"} and record["1"]["measurements"] == 2
    assert record["1"]["drift_s"] == drift and record["1"]["drift_ppm"] == pytest.approx(10, rel=0.1)
    assert abs(record["2"]["drift_s"]) < 0.0005
    assert record["1"]["offset_s"] == sync.latest("1").offset_s
    assert record["1"]["uncertainty_s"] == sync.latest("1").uncertainty_s


def test_a_silent_worker_is_not_measured_and_costs_one_timeout():
    ticks = _Ticks()
    sync = _worker_pair(ticks, {"a": 0.5}, silent=("b",))
    sync.measure([("a", "1"), ("b", "2")])
    assert sync.latest("2") is None and sync.silent == {"2"}
    assert sync.step_clock("2", None)["error_s"] is None
    assert set(sync.clocks_record()) == {"1"}


def test_a_worker_put_on_the_masters_timeline_keeps_its_own_clock_for_the_exchanges():
    try:
        clock.set_offset(2.0)  # this host is 2 s ahead of the master
        assert clock.now() - clock.raw_now() == pytest.approx(-2.0, abs=1e-3)
        assert clock.offset() == 2.0
        sent = []
        answer_ping({"seq": 7, "t0": 1.0}, lambda kind, data: sent.append(data))
        assert sent[0]["seq"] == 7 and sent[0]["t1"] == pytest.approx(clock.raw_now(), abs=1.0)
    finally:
        clock.set_offset(0.0)
    assert clock.now() == pytest.approx(clock.raw_now(), abs=1e-3)
