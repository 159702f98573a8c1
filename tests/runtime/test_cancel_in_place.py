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
from llmload.runtime.worker.scheduler import WorkerRuntime
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
    gevent.sleep(0.35)
    assert len(runtime.steps["slow"].inflight) == 4
    runtime.on_cancel({"label": "slow"})
    assert events["slow"].wait(5) and drained["slow"]["cancelled"]
    assert not runtime.steps["slow"].inflight
    runtime.on_step(_message(tmp_path, "fast", 50, 0.2))  # the same users take the next step's arrivals
    assert events["fast"].wait(5)
    assert all(not u.dead for u in users)
    gevent.killall(users)
    runtime.close()
    rows = [json.loads(line) for line in (tmp_path / "records" / "worker-0.jsonl").read_text().splitlines()]
    assert sorted(r["outcome"] for r in rows if r["step"] == "slow") == ["cancelled"] * 4
    assert [r["outcome"] for r in rows if r["step"] == "fast"] == ["ok"] * 10
    assert len(spawned) == 3  # the schedulers of the two steps, the shipper: no greenlet per request
