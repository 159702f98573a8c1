"""The step controller's knee search glue, without Locust: refine steps at the search's rates, repeats
of inconclusive steps marked in plan.json, `search` recorded, and a closing line that never shows None
(issue 32: "boundary search: highest passing rate None req/s" when no step passed)."""

from __future__ import annotations

import gevent

from llmload.clock import now
from llmload.config import parse_config
from llmload.records import Record
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController, search_line
from llmload.runtime.wire.messages import STEP, DrainedMessage, ResultsMessage, pack_record
from shapes.knee_search import KneeSearch
from shapes.plan import ConfigSearch, build_plan


class FakeRunner:
    """A local runner whose one worker drains each step as its arrivals end, with one record."""

    def __init__(self) -> None:
        self.controller: StepController | None = None

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        if msg_type != STEP:
            return
        step = data["step"]
        end = data["start_at"] + step["warmup_s"] + step["duration_s"]

        def drain() -> None:
            gevent.sleep(max(0.0, end - now()))
            t = now()
            record = Record(request_id=step["label"], step=step["label"], worker="0", scheduled_at=t - 0.1,
                            outcome="ok", sent_at=t - 0.1, first_token_at=t - 0.05, last_token_at=t,
                            output_tokens=2, token_times=[t - 0.05, t])
            self.controller.on_results(ResultsMessage(worker="0", rows=[pack_record(record)]))
            self.controller.on_drained(DrainedMessage(label=step["label"], worker="0", put=0, finished=0))

        gevent.spawn(drain)


class Knee:
    def __init__(self, rate, low, high, binding="ttft_p95"):
        self.rate, self.low, self.high, self.binding = rate, low, high, binding

    @property
    def half_width_rel(self):
        return None if self.rate is None or self.low is None or self.high is None else (
            (self.high - self.low) / 2 / self.rate)


class Shape(ConfigSearch):
    """The config's refine steps, with a stand-in estimate (the knee narrows as steps come)."""

    def __init__(self, estimate) -> None:
        self.estimate = estimate

    def search(self, config, rows=()):
        refine = config.shape.ladder.refine
        return KneeSearch(rows, estimate=self.estimate, precision=refine.precision, budget_s=refine.budget,
                          max_steps=refine.max_steps, max_extensions=refine.max_extensions, step_s=0.05)


def run(tmp_path, verdict_of, estimate, refine=None, ladder=(20, 40)):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": {"ladder": {
        "warmup": "0s", "arrival": "constant",
        "steps": [{"rate": rate, "duration": "0.05s"} for rate in ladder],
        "refine": refine or {"max_steps": 4, "budget": "1m"}}}})

    def judge(rows, step, config):
        verdict = verdict_of(step["target_rate"], step["label"])
        return verdict, (["ttft_p95"] if verdict == "fail" else []), {
            "label": step["label"], "phase": step["phase"], "offered_rate": step["target_rate"], "completed": 1}

    runner, lines = FakeRunner(), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), judge=judge,
                                out=lines.append, shape=Shape(estimate))
    runner.controller = controller
    controller.run()
    return controller, lines


def test_no_step_passing_says_so_and_never_prints_none(tmp_path):
    controller, lines = run(tmp_path, lambda rate, label: "fail", lambda rows: Knee(None, None, 20.0))
    said = [line for line in lines if "knee search" in line]
    assert said == ["  knee search: no rate passed; stopped: the targets were crossed already at the lowest "
                    "rate run; extend the ladder downward (0 refine steps)"]
    assert "None" not in "\n".join(lines)
    assert controller.plan.data["search"]["stopped"] == "no_pass"


def test_refine_steps_follow_the_estimate_and_repeat_an_inconclusive_step(tmp_path):
    def estimate(rows):
        refine = [r for r in rows if r["phase"] == "refine"]
        return Knee(30.0, 30.0 - 8 / (1 + len(refine)), 30.0 + 8 / (1 + len(refine)))

    def verdict(rate, label):
        return "pass" if rate < 25 else "fail" if rate > 35 else "inconclusive"

    controller, lines = run(tmp_path, verdict, estimate, {"max_steps": 3, "budget": "1m", "precision": 0.01,
                                                          "max_extensions": 1}, ladder=(20, 30, 40))
    refine = [s.plan_row() for s in controller.steps if s.spec.phase == "refine"]
    # the ladder's step at 30 was inconclusive inside the interval, at its point: the first refine step
    # repeats it; the second is decided while the first still settles (a one-step lag), the third while
    # the second does: a step at 30 settles, so neither repeats it again; both go to the estimate (the
    # third moved by the precision below it, where no refine step ran yet)
    assert [(s["target_rate"], s.get("extends")) for s in refine] == [(30.0, "r30.00"), (30.0, None), (29.7, None)]
    assert [s["status"] for s in refine] == ["run"] * 3
    # they follow on without draining, and a local runner judges them live all the same: the search needs
    # their verdicts. Each starts as the one before's arrivals end: planned so, never earlier (the exact
    # times are test_controller_virtual_time's, in virtual time: here in real seconds a busy machine's
    # wake-ups moved a start by 65 and 126 ms past a 60-ms tolerance, beside two hogs and in CI)
    assert [s["drain"] for s in refine] == [False] * 3
    for before, after in zip(refine, refine[1:], strict=False):
        assert after["start_at"] >= before["start_at"] + before["warmup_s"] + before["duration_s"] - 1e-6
    assert [s["live_verdict"] for s in refine] == ["inconclusive"] * 3
    assert controller.plan.data["search"] == {"stopped": "max_steps", "steps": 3, "extensions": 1,
                                              "elapsed_s": controller.plan.data["search"]["elapsed_s"]}
    assert "None" not in "\n".join(lines)


def test_the_closing_line_without_a_knee_never_shows_none():
    for stopped in ("no_failure", "no_pass", "no_verdict", "budget", None):
        line = search_line(stopped, 1)
        assert "None" not in line and line.startswith("  knee search: ")
    # a budget stop says what the next step lacked, rounded up (and nothing where it is not known)
    assert search_line("budget", 0, search={"auto": {}, "short_s": 46.2}) == (
        "  knee search: stopped: the search's time budget would run out before another step; the next one "
        "needed 47 s more (0 refine steps)")
    assert "needed" not in search_line("budget", 2) and "needed" not in search_line("precision", 2, search={"short_s": 5.0})
    # and the budget projected for the precision (plan.json search.budget_needed_s)
    assert search_line("budget", 3, search={"short_s": 20, "budget_needed_s": 2766.7, "precision": 0.01}).endswith(
        "needed 20 s more; ±1% would take a refine budget of 47 min or more (3 refine steps)")


def test_a_search_step_of_a_drained_phase_runs_drained_and_is_handed_back_at_once(tmp_path):
    """`shape: auto`'s probe and placement steps come from its search: a step whose phase is drained runs
    as a planned step (drained, judged) and the search has its row before it decides the next step."""
    from dataclasses import replace

    from shapes.knee_search import Ask

    class TwoStages:
        def __init__(self):
            self.rows, self.pending, self.refine_steps, self.stopped, self.seen = [], 0, 0, None, []
            self.asks = [(30.0, "ladder"), (35.0, "refine")]

        def next_step(self):
            self.seen.append((len(self.rows), self.pending))
            if not self.asks:
                self.stopped = "precision"
                return None
            self.pending += 1
            return Ask(self.asks[0][0])

        def record(self, row, **_):
            self.rows.append(row)
            self.pending -= 1

        def stop(self, reason="stopped"):
            self.stopped = self.stopped or reason

        @property
        def answer(self):
            from shapes.knee_search import SearchAnswer

            return SearchAnswer(knee=None, stopped=self.stopped or "running", steps=1, extensions=0, elapsed_s=0.0)

    search = TwoStages()

    class StagedShape(ConfigSearch):
        def search(self, config, rows=()):
            return search

        def search_step(self, config, rate, *, index, seed, taken):
            rate_, phase = search.asks.pop(0)
            spec = build_plan(config)[0]
            return replace(spec, label=f"{phase}-{rate_:g}", index=index, phase=phase, target_rate=rate_,
                           drain=phase == "ladder")

    config = parse_config({"target": {"url": "http://127.0.0.1:9"}, "shape": {"ladder": {
        "warmup": "0s", "arrival": "constant", "steps": [{"rate": 20, "duration": "0.05s"}],
        "refine": {"max_steps": 4, "budget": "1m"}}}})

    def judge(rows, step, config):
        return "pass", [], {"label": step["label"], "phase": step["phase"], "offered_rate": step["target_rate"],
                            "completed": 1}

    runner, lines = FakeRunner(), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), judge=judge,
                                out=lines.append, shape=StagedShape())
    runner.controller = controller
    controller.run()
    rows = {s.label: s.plan_row() for s in controller.steps}
    assert [s.spec.phase for s in controller.steps] == ["ladder", "ladder", "refine"]
    assert rows["ladder-30"]["drain"] is True and rows["refine-35"]["drain"] is False
    # the drained step's row was handed back before the next decision; the chained one still settles
    # at the decision after it (the one-step lag) and is handed back once it drained
    assert search.seen == [(0, 0), (1, 0), (1, 1)]
    assert [r["label"] for r in search.rows] == ["ladder-30", "refine-35"]


def test_a_precision_stop_the_last_step_undoes_is_taken_back_and_the_search_goes_on(tmp_path):
    """The search stops on precision while its last refine step settles; that step, judged, leaves the
    interval open: the controller asks the search again once it drained, and one more step runs (from the
    drained server) before the step cap. With an estimate the last step keeps precise it stops there."""

    def searched(open_at: int | None, folder):
        def estimate(rows):
            refine = [r for r in rows if r["phase"] == "refine"]
            return Knee(30.0, 29.5, None) if len(refine) == open_at else Knee(30.0, 29.5, 30.5)

        controller, _ = run(folder, lambda rate, label: "pass" if rate < 30 else "fail", estimate,
                            {"max_steps": 8, "budget": "1m", "precision": 0.05, "max_extensions": 0})
        return [s.plan_row() for s in controller.steps if s.spec.phase == "refine"], controller.plan.data["search"]

    kept, search = searched(None, tmp_path / "kept")
    assert len(kept) == 7 and search["stopped"] == "precision" and "reopened" not in search
    undone, search = searched(7, tmp_path / "undone")  # the 7th step, settling at the stop, opens the interval
    assert len(undone) == 8 and search["stopped"] == "max_steps" and search["reopened"] == 1
    # the 8th starts once the 7th drained (the search was asked again then), not chained to it
    assert undone[6]["drained_at"] is not None and undone[7]["start_at"] >= undone[6]["drained_at"]
