"""A request runs in its user's greenlet (no child greenlet per request, issue 20); a drain timeout
still cancels exactly the in-flight requests of its step, records them `cancelled`, and the users go on
to the next arrivals."""

from __future__ import annotations

import json

import gevent
import gevent.event

from llmload.clock import now
from llmload.runtime.wire.messages import StepMessage
from llmload.runtime.worker import scheduler as worker_mod
from llmload.runtime.worker.scheduler import StepPhase, WorkerRuntime
from shapes.steps import StepSpec


class SlowSender:
    """Answers at once, except the arrivals of step `slow`, which hang until killed."""

    def send(self, record, job, user=None) -> None:
        record.sent_at = now()
        if job.label == "slow":
            gevent.sleep(30)
        record.outcome = "ok"


def _message(tmp_path, label: str, rate: float, duration: float) -> dict:
    step = StepSpec(label=label, index=0, phase="ladder", arrival="constant", target_rate=rate,
                    duration_s=duration, seed=1)
    return StepMessage(worker="0", run_dir=str(tmp_path), config={}, shard=0, shards=1, seed=1, step=step,
                       start_at=now() + 0.02).to_dict()


def test_a_drain_timeout_cancels_in_place_and_the_users_go_on(tmp_path, monkeypatch) -> None:
    spawned = []
    real_spawn = gevent.spawn
    drained = {}
    events = {"slow": gevent.event.Event(), "fast": gevent.event.Event()}

    def to_master(kind, data):
        if kind == "llmload:drained":
            drained[data["label"]] = data
            events[data["label"]].set()

    runtime = WorkerRuntime(to_master, build_sender=lambda *a, **k: SlowSender())
    users = [real_spawn(lambda: [runtime.run(runtime.take()) for _ in iter(int, 1)]) for _ in range(6)]
    monkeypatch.setattr(worker_mod.gevent, "spawn", lambda *a, **k: (spawned.append(a), real_spawn(*a, **k))[1])
    runtime.on_step(_message(tmp_path, "slow", 20, 0.2))  # 4 arrivals, each hangs
    assert runtime.steps["slow"].phase is StepPhase.SCHEDULING
    gevent.sleep(0.35)
    assert len(runtime.steps["slow"].inflight) == 4
    assert runtime.steps["slow"].phase is StepPhase.QUEUED  # every arrival queued, none finished
    runtime.on_cancel({"label": "slow"})
    assert events["slow"].wait(5) and drained["slow"]["cancelled"]
    assert not runtime.steps["slow"].inflight and runtime.steps["slow"].phase is StepPhase.CANCELLED
    runtime.on_step(_message(tmp_path, "fast", 50, 0.2))  # the same users take the next step's arrivals
    assert events["fast"].wait(5)
    assert runtime.steps["fast"].phase is StepPhase.DRAINED and drained["fast"]["cancelled"] is False
    assert all(not u.dead for u in users)
    gevent.killall(users)
    runtime.close()
    rows = [json.loads(line) for line in (tmp_path / "records" / "worker-0.jsonl").read_text().splitlines()]
    assert sorted(r["outcome"] for r in rows if r["step"] == "slow") == ["cancelled"] * 4
    assert [r["outcome"] for r in rows if r["step"] == "fast"] == ["ok"] * 10
    assert len(spawned) == 3  # the schedulers of the two steps, the shipper: no greenlet per request


def test_a_cancel_that_crosses_the_drained_notice_changes_nothing(tmp_path, caplog) -> None:
    notices = []
    runtime = WorkerRuntime(lambda kind, data: notices.append((kind, data)) if kind == "llmload:drained" else None,
                            build_sender=lambda *a, **k: SlowSender())
    users = [gevent.spawn(lambda: [runtime.run(runtime.take()) for _ in iter(int, 1)]) for _ in range(2)]
    runtime.on_step(_message(tmp_path, "fast", 50, 0.1))
    with gevent.Timeout(5):
        while not notices:
            gevent.sleep(0.01)
    # the master's drain deadline fell as the notice was on its way: its cancel finds the step drained
    with caplog.at_level("WARNING", logger="llmload.states"):
        runtime.on_cancel({"label": "fast"})
    assert runtime.steps["fast"].phase is StepPhase.DRAINED
    assert [d["cancelled"] for _, d in notices] == [False] and caplog.records == []
    gevent.killall(users)
    runtime.close()


def test_the_phases_move_only_along_their_table(caplog) -> None:
    from llmload.runtime.worker.scheduler import STEP_PHASES, StepState

    state = StepState(label="s", shard=0, shards=1)
    with caplog.at_level("WARNING", logger="llmload.states"):
        assert not state.to(StepPhase.DRAINED)  # nothing drains before its arrivals are queued
    assert state.phase is StepPhase.SCHEDULING and "no transition SCHEDULING -> DRAINED" in caplog.text
    assert state.to(StepPhase.QUEUED) and state.to(StepPhase.CANCELLING) and state.to(StepPhase.CANCELLED)
    assert STEP_PHASES[StepPhase.CANCELLED] == set() == STEP_PHASES[StepPhase.DRAINED]
    # what the step's old flags said, each now read off the phase
    assert [p.arrivals_queued for p in StepPhase] == [False, True, True, True, True]
    assert [p.cancelled for p in StepPhase] == [False, False, True, False, True]
    assert [p.drained for p in StepPhase] == [False, False, False, True, True]
