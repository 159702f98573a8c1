"""The step controller's timing in virtual time (`virtual_time.VirtualClock`, `FakeLink`): drains,
drain deadlines and their cancel, stop cuts, lost workers, soak slices and the knee search's elapsed
time, each asserted to the exact virtual second. Minutes of steps run in milliseconds."""

from __future__ import annotations

import json

import gevent
import pytest
from virtual_time import FakeLink, VirtualClock, WorkerPlan

from llmload.config import parse_config
from llmload.runtime.master.controller import LEAD_S, StepController
from llmload.runtime.master.states import ControllerState
from llmload.runtime.master.step_run import CANCEL_GRACE_S
from shapes.plan import build_plan

T0 = 1_000.0


def make(tmp_path, shape_args: dict, plans: list[WorkerPlan] | None = None, **kwargs):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": shape_args})
    clock = VirtualClock(T0)
    link = FakeLink(clock, plans or [WorkerPlan()])
    lines: list[str] = []
    controller = StepController(config, tmp_path, link, build_plan(config), out=lines.append, clock=clock.now,
                                sleep=clock.sleep, **kwargs)
    link.controller = controller
    return controller, link, clock, lines


def plan_json(tmp_path) -> dict:
    """plan.json as the controller wrote it (the steps' rows, `search`, `stopped`)."""
    return json.loads((tmp_path / "plan.json").read_text())


def steps_of(tmp_path) -> list[dict]:
    return plan_json(tmp_path)["steps"]


def ladder(*durations_s: float, drain_timeout_s: float = 5.0, **extra) -> dict:
    return {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": f"{drain_timeout_s}s",
                       "steps": [{"rate": 2, "duration": f"{d}s"} for d in durations_s], **extra}}


def test_the_virtual_clock_wakes_sleepers_in_time_order():
    clock, woke = VirtualClock(0.0), []

    def sleeper(name: str, s: float) -> None:
        clock.sleep(s)
        woke.append((name, clock.now()))

    gevent.joinall([gevent.spawn(sleeper, n, s) for n, s in (("c", 3.0), ("a", 1.0), ("b", 2.0), ("a2", 1.0))])
    assert woke == [("a", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]


def test_a_ladder_step_waits_for_its_drain_before_the_next_is_sent(tmp_path):
    controller, link, _, _ = make(tmp_path, ladder(60, 60), [WorkerPlan(tail_s=2.5)])
    controller.run()
    first, second = steps_of(tmp_path)
    assert first["start_at"] == T0 + LEAD_S
    assert first["drained_at"] == first["window_end"] + 2.5 == T0 + LEAD_S + 62.5
    # the second step is sent when the first drained, and starts one lead later
    assert [t for t, _ in link.steps_sent()] == [T0, first["drained_at"]]
    assert second["start_at"] == first["drained_at"] + LEAD_S
    assert [s["status"] for s in (first, second)] == ["run", "run"]
    assert not first["cancelled"] and not link.cancels()
    assert controller.state is ControllerState.DONE and controller.done.is_set()


def test_a_step_not_drained_by_its_deadline_is_cancelled_then_judged(tmp_path):
    controller, link, _, lines = make(tmp_path, ladder(30, drain_timeout_s=7.0), [WorkerPlan(tail_s=None)])
    controller.run()
    (step,) = steps_of(tmp_path)
    deadline = step["start_at"] + 30 + 7.0
    assert step["drain_deadline"] == pytest.approx(deadline)
    assert link.cancels() == [(pytest.approx(deadline, abs=0.51), step["label"])]  # polled at most every 0.5 s
    assert link.cancels()[0][0] >= deadline
    assert step["cancelled"] is True and step["status"] == "run" and step["lost_workers"] == []
    assert step["drained_at"] == pytest.approx(link.cancels()[0][0] + 0.05, abs=0.21)  # the worker's answer
    assert f"  {step['label']}: drain timeout (7s): cancelling queued and in-flight requests" in lines


def test_a_worker_that_never_answers_the_cancel_is_given_up_after_the_grace(tmp_path):
    controller, link, _, _ = make(tmp_path, ladder(10, drain_timeout_s=2.0),
                                  [WorkerPlan(tail_s=None, cancel_s=None)])
    controller.run()
    (step,) = steps_of(tmp_path)
    (cancel_at, _), = link.cancels()
    assert cancel_at >= step["start_at"] + 12.0
    assert step["drained_at"] == pytest.approx(cancel_at + CANCEL_GRACE_S, abs=0.21)
    assert step["lost_workers"] == ["0"] and step["cancelled"] is True


def test_a_drained_notice_the_master_cannot_read_ends_the_step_at_once_not_at_its_deadline(tmp_path):
    """The notice with a renamed field fails the run with one line naming it; the step waits for no
    notice that will never come: it cancels at once and gives the worker up after the grace."""
    controller, link, _, lines = make(tmp_path, ladder(30, 30, drain_timeout_s=120.0),
                                      [WorkerPlan(tail_s=0.5, cancel_s=None, garbled=True)])
    controller.run()
    first, second = steps_of(tmp_path)
    arrivals_end = first["start_at"] + 30
    (cancel_at, label), = link.cancels()
    assert label == first["label"] and arrivals_end + 0.5 <= cancel_at <= arrivals_end + 1.01  # polled every 0.5 s
    assert first["drained_at"] == pytest.approx(cancel_at + CANCEL_GRACE_S, abs=0.21)  # not the 120 s deadline
    assert first["cancelled"] is True and second["status"] == "not_run"
    assert controller.state is ControllerState.FAILED
    assert "missing field 'finished'; unknown field 'finished_count'" in controller.error
    assert f"  {first['label']}: the run failed: cancelling queued and in-flight requests" in lines


def test_a_stop_cuts_the_window_at_the_stop_cancels_and_leaves_later_steps_not_run(tmp_path):
    controller, link, clock, _ = make(tmp_path, ladder(60, 60, 60), [WorkerPlan(tail_s=1.0)])
    controller.start()
    stop_at = T0 + LEAD_S + 61.0 + LEAD_S + 20.0  # 20 s into the second step
    clock.sleep(stop_at - clock.now())
    controller.stop()
    controller.done.wait()
    first, second, third = steps_of(tmp_path)
    assert first["status"] == "run" and "planned_window_end" not in first
    assert second["status"] == "partial"
    assert second["window_end"] == stop_at and second["planned_window_end"] == second["start_at"] + 60
    assert third["status"] == "not_run" and third.get("start_at") is None
    (cancel_at, label), = link.cancels()  # the drain loop looks at the stop every 0.5 s at most
    assert label == second["label"] and stop_at <= cancel_at <= stop_at + 0.5
    assert second["cancelled"] is True
    plan = plan_json(tmp_path)
    assert plan["stopped"] is True and plan["ended_at"] == second["drained_at"]
    assert controller.state is ControllerState.STOPPED


def test_a_stop_signal_before_workers_die_makes_the_step_partial_not_lost(tmp_path):
    plans = [WorkerPlan("0", "a", tail_s=1.0, lost_at=T0 + 30.5), WorkerPlan("1", "b", tail_s=1.0, lost_at=T0 + 30.5)]
    controller, _, clock, _ = make(tmp_path, ladder(60, 60), plans)
    controller.start()
    clock.sleep(30.0)
    controller.mark_stopping()  # the signal: the workers die of it half a second later
    controller.done.wait()
    first, second = steps_of(tmp_path)
    assert first["status"] == "partial" and first["window_end"] == T0 + 30.0
    assert second["status"] == "not_run"
    assert first["lost_workers"] == ["0", "1"] and "lost_requests" not in first  # no worker-lost records
    assert not (tmp_path / "records" / "lost.jsonl").exists()


def test_a_worker_lost_mid_step_gets_its_unrecorded_arrivals_as_cancelled(tmp_path):
    plans = [WorkerPlan("0", "a", tail_s=0.5), WorkerPlan("1", "b", tail_s=0.5, lost_at=T0 + 5.0)]
    controller, _, _, lines = make(tmp_path, ladder(10, 10), plans)
    controller.run()
    first, second = steps_of(tmp_path)
    assert first["lost_workers"] == ["1"] and first["status"] == "run" and not first["cancelled"]
    # the drain did not wait for the lost worker: it ended when worker 0 drained
    assert first["drained_at"] == first["window_end"] + 0.5
    assert second["workers"] == 1 and second["lost_workers"] == []
    # 2 req/s for 10 s over two shards: worker 1 had 10 arrivals, none recorded
    assert first["lost_requests"] == 10
    lost = [json.loads(line) for line in (tmp_path / "records" / "lost.jsonl").read_text().splitlines()]
    assert len(lost) == 10 and {r["outcome"] for r in lost} == {"cancelled"} and {r["worker"] for r in lost} == {"1"}
    assert any("10 request(s) of lost worker(s) 1 recorded as cancelled" in line for line in lines)


def test_soak_slices_start_when_the_previous_arrivals_end_and_drain_meanwhile(tmp_path):
    controller, link, _, lines = make(tmp_path, {"soak": {"rate": 2, "duration": "30m", "slice": "10m",
                                                          "drain_timeout": "30s"}}, [WorkerPlan(tail_s=4.0)])
    controller.run()
    steps = steps_of(tmp_path)
    assert [s["label"] for s in steps] == ["soak-000", "soak-001", "soak-002"]
    assert steps[0]["start_at"] == T0 + LEAD_S
    for before, after in zip(steps, steps[1:], strict=False):
        assert after["start_at"] == before["window_end"] == before["start_at"] + 600  # no pause
        assert before["drained_at"] == before["window_end"] + 4.0 > after["start_at"]  # drained meanwhile
        # sent one lead before the previous slice's arrivals end
        assert any(t == before["window_end"] - LEAD_S and d["step"]["label"] == after["label"]
                   for t, d in link.steps_sent())
    assert all(s["status"] == "run" and s["cancelled"] is False for s in steps)
    table = [line.split()[0] for line in lines if line.startswith("soak-")]
    assert table == ["soak-000", "soak-001", "soak-002"]  # judged in order


def test_a_stop_during_a_soak_slice_cuts_it_and_the_slice_draining_behind_it(tmp_path):
    controller, link, clock, _ = make(tmp_path, {"soak": {"rate": 2, "duration": "30m", "slice": "10m",
                                                          "drain_timeout": "30s"}}, [WorkerPlan(tail_s=None)])
    controller.start()
    stop_at = T0 + LEAD_S + 600 + 10.0  # 10 s into the second slice; the first one still drains
    clock.sleep(stop_at - clock.now())
    controller.stop()
    controller.done.wait()
    first, second, third = steps_of(tmp_path)
    assert first["window_end"] == T0 + LEAD_S + 600 and first["status"] == "partial"  # stopped while draining
    assert second["status"] == "partial" and second["window_end"] == stop_at
    assert third["status"] == "not_run"
    assert sorted(label for _, label in link.cancels()) == ["soak-000", "soak-001"]


def test_the_knee_search_budget_counts_each_step_and_its_extension_in_the_controllers_time(tmp_path):
    from test_knee_search_controller import Knee, Shape

    from shapes.knee_search import KneeSearch

    def judge(rows, step, config):
        rate = step["target_rate"]
        verdict = "pass" if rate < 25 else "fail" if rate > 35 else "inconclusive"
        return verdict, (["ttft_p95"] if verdict == "fail" else []), {
            "label": step["label"], "phase": step["phase"], "offered_rate": rate, "completed": 1}

    def estimate(rows):
        refine = [r for r in rows if r["phase"] == "refine"]
        return Knee(30.0, 30.0 - 8 / (1 + len(refine)), 30.0 + 8 / (1 + len(refine)))

    class VirtualShape(Shape):  # made on the default clock: the controller gives the search its own (virtual)
        def search(self, config, rows=()):
            refine = config.shape.ladder.refine
            return KneeSearch(rows, estimate=self.estimate, precision=refine.precision, budget_s=refine.budget,
                              max_steps=refine.max_steps, max_extensions=refine.max_extensions, step_s=20.0)

    shape = {"ladder": {"warmup": "0s", "arrival": "constant", "drain_timeout": "5s",
                        "steps": [{"rate": 20, "duration": "20s"}, {"rate": 30, "duration": "20s"},
                                  {"rate": 40, "duration": "20s"}],
                        "refine": {"max_steps": 6, "budget": "60s", "precision": 0.01, "max_extensions": 1}}}
    controller, _, clock, lines = make(tmp_path, shape, [WorkerPlan(tail_s=2.0)], judge=judge,
                                       shape=VirtualShape(estimate))
    controller.run()
    refine = [s for s in steps_of(tmp_path) if s["phase"] == "refine"]
    # refine steps follow on without draining: each starts as the one before's 20 s of arrivals end and
    # drains 2 s later, in the background. The ladder's step at 30 was inconclusive at the estimate: the
    # first extends it; the second and third are decided while a step at 30 still settles: the estimate
    # (the third moved by the precision below it, where no refine step ran). A fourth (20 s) no longer
    # fits the 60 s; the last step's 2 s drain is the budget's only overrun
    assert [(s["target_rate"], s.get("extends")) for s in refine] == [(30.0, "r30.00"), (30.0, None), (29.7, None)]
    assert [s["start_at"] - refine[0]["start_at"] for s in refine] == [0.0, 20.0, 40.0]
    assert [s["drained_at"] - s["start_at"] for s in refine] == [22.0, 22.0, 22.0]
    # (decided as the third step's arrivals ended, with none of the 60 s left: the fourth lacked its 20 s, `short_s`;
    # the knee, 30 +- 8 / 4 after three refine steps, is +-6.7% against a precision of 1%: more than
    # PROJECT_WIDTH (3) times it, so no budget is projected for it)
    assert plan_json(tmp_path)["search"] == {"stopped": "budget", "steps": 3, "extensions": 1,
                                              "elapsed_s": LEAD_S + 3 * 20.0 + 2.0, "short_s": 20.0}
    assert lines[-1].startswith("  knee search: stopped: ")
