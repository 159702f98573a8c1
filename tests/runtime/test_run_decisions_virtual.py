"""A run's decisions in virtual time (`llmload run --virtual`, `llmload.runtime.virtual`): drains, the
client cap, the knee search's refine steps, a stop mid-step, a worker lost mid-step, and how the workers
share a step. The run's own controller, worker runtimes and finalisation run over the in-process link
against the sim's engine, in seconds of CPU; what a live run added was only the processes around them.

Each test here was a live Locust run against `llmload sim` (tests/runtime/test_runs.py,
test_stop_and_workers.py, test_netns.py) with the same assertions; those files keep one live run per
mechanism (the generator's timing, a stop signal, a worker lost over the real transport, namespaces).
A stop here is what a stop signal does to the controller (`mark_stopping()` then `stop()`,
`RunLifecycle._on_signal`); the exit code it leads to is tests/runtime/test_run_lifecycle.py's."""

from __future__ import annotations

import pytest
import yaml
from runtime_helpers import base_config, plan, records, summary, write_config

from llmload.runtime.virtual.run import VirtualRun, run_virtual

CLOSED = "http://127.0.0.1:9"  # the discard port: a run that contacted the target would fail its requests


def _sim(tmp_path, settings: dict | None = None):
    """A sim settings file: `llmload sim`'s defaults (as `sim_factory(flavor="vllm")` starts it) unless
    told otherwise."""
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(settings or {}), encoding="utf-8")
    return path


def _wait_step_running(run: VirtualRun, after_s: float, index: int = 0) -> None:
    """In virtual time: until step `index` started `after_s` seconds ago (`wait_step_running`'s twin)."""
    steps = run.controller.plan.steps
    while len(steps) <= index or steps[index].start_at is None:
        run.clock.sleep(0.1)
    run.clock.sleep(max(0.0, steps[index].start_at + after_s - run.clock.now()))


def _stop_after(after_s: float):
    """A stop signal `after_s` into the first step, as `RunLifecycle._on_signal` stops the controller."""
    def during(run: VirtualRun) -> None:
        _wait_step_running(run, after_s)
        run.controller.mark_stopping()
        run.controller.stop()

    return during


def test_drain_keeps_steps_apart_and_small_cap_shows_as_client_wait(tmp_path):
    """Was test_runs.py's live run (the drain, the client cap's capped requests and client wait, the SLO
    on it failing: exit 1)."""
    # 2 users, ~0.45 s per request, 8 req/s offered: the cap holds requests back inside the client
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "20s",
                                             "steps": [{"rate": 2, "duration": "3s"},
                                                       {"rate": 8, "duration": "3s"}]}},
                         client={"max_concurrency": 2},
                         slo={"client_wait_p95": "100ms", "min_samples": 5})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 16}
    run_dir = tmp_path / "run"
    code = run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path), report=False)
    assert code == 1  # the SLO on client wait fails: exit code 1
    df, steps = records(run_dir), plan(run_dir)["steps"]
    first, second = steps
    own1 = df[df["step"] == first["label"]]
    # every request of step 1 ended before step 2 started, and none was scheduled in its window
    assert own1["last_token_at"].max() <= second["start_at"]
    assert (own1["scheduled_at"] < first["window_end"]).all()
    assert (df[df["step"] == second["label"]]["scheduled_at"] >= second["start_at"]).all()
    own2 = df[df["step"] == second["label"]]
    wait = own2["sent_at"] - own2["scheduled_at"]
    ttft = own2["first_token_at"] - own2["sent_at"]
    assert own2["capped"].sum() >= len(own2) // 2
    assert wait.quantile(0.95) > 0.5 and ttft.quantile(0.95) < 0.25
    assert summary(run_dir)["verdict"] == "fail"
    failing = {s["label"]: s["failing"] for s in summary(run_dir)["steps"]}
    assert any("client_wait" in name for name in failing[second["label"]])


def test_knee_search_runs_refine_steps_after_the_ladder(tmp_path, capsys):
    """Was test_runs.py's live run (the ladder's verdicts, one refine step between them, why the search
    stopped, the closing lines)."""
    # 4 sequences of ~0.3 s: the sim holds ~13 req/s; 3 req/s passes, 30 req/s fails on TTFT
    sim = _sim(tmp_path, {"max_num_seqs": 4, "step_base_s": "20ms", "decode_cost_s": "1ms"})
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                             "steps": [{"rate": 3, "duration": "3s"},
                                                       {"rate": 30, "duration": "3s"}],
                                             "refine": {"resolution": 20, "max_steps": 1}}},
                         client={"max_concurrency": 64}, slo={"ttft_p95": "300ms", "min_samples": 5})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 12}
    run_dir = tmp_path / "run"
    run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=sim, report=False)
    stdout = capsys.readouterr().out
    assert (run_dir / "summary.json").exists(), stdout[-2000:]
    data = plan(run_dir)
    assert [s["phase"] for s in data["steps"]] == ["ladder", "ladder", "refine"]
    refine = data["steps"][2]
    assert refine["status"] == "run" and 3 < refine["target_rate"] < 30
    assert data["search"]["stopped"] in ("precision", "max_steps") and data["search"]["steps"] == 1
    assert summary(run_dir)["search"] == data["search"]
    # the closing lines: why the search stopped, then the knee as the report states it (never a None)
    assert "  knee search: stopped: " in stdout and "\nllmload: knee " in stdout
    assert "None" not in stdout
    assert [s["live_verdict"] for s in data["steps"][:2]] == ["pass", "fail"]
    assert len(records(run_dir)[lambda d: d["step"] == refine["label"]]) > 0


def test_constant_arrivals_offer_the_target_rate_split_over_two_workers(tmp_path):
    """Was test_runs.py's live run with two worker processes, `constant` arrivals: each step's window
    offers its target rate, all of it sent, split over both workers, no id twice. (The generator keeping
    up in real time is the live `poisson` run there.)"""
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "1s", "drain_timeout": "10s",
                                             "steps": [{"rate": 20, "duration": "5s"},
                                                       {"rate": 100, "duration": "5s"}]}},
                         client={"max_concurrency": 64})
    run_dir = tmp_path / "run"
    run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path), report=False)
    df = records(run_dir)
    for step in plan(run_dir)["steps"]:
        own = df[df["step"] == step["label"]]
        in_window = own[(own["scheduled_at"] >= step["window_start"]) & (own["scheduled_at"] < step["window_end"])]
        window_s = step["window_end"] - step["window_start"]
        offered = len(in_window) / window_s
        sent = in_window["sent_at"].notna().sum() / window_s
        assert sent == pytest.approx(offered, rel=0.02), step["label"]
        assert offered == pytest.approx(step["target_rate"], rel=0.02)
        assert set(own["worker"]) == {"0", "1"}
        assert own["request_id"].is_unique


def test_stopping_a_run_mid_stream_records_in_flight_requests_as_cancelled(tmp_path):
    """Was test_stop_and_workers.py's live run (SIGTERM to Locust 3 s into a step of ~4 s streams)."""
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                             "steps": [{"rate": 4, "duration": "30s"},
                                                       {"rate": 8, "duration": "30s"}]}},
                         client={"max_concurrency": 32})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 150}  # ~4 s streams
    run_dir = tmp_path / "run"
    run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path), report=False,
                during=_stop_after(3.0))
    df = records(run_dir)
    steps = plan(run_dir)["steps"]
    cancelled = df[df["outcome"] == "cancelled"]
    due = cancelled[cancelled["scheduled_at"] < steps[0]["window_end"]]  # due before the stop: in flight
    assert len(due) >= 5  # ~12 streams were in flight
    assert due["sent_at"].notna().all() and cancelled["last_token_at"].isna().sum() <= len(cancelled)
    # the one arrival queued its few ms ahead when the cancel came (at a results shipment: on the arrivals'
    # 0.25 s grid in virtual time) is cancelled unsent, never one that was due
    assert (cancelled[cancelled["sent_at"].isna()]["scheduled_at"] >= steps[0]["window_end"]).all()
    assert steps[0]["status"] == "partial" and steps[1]["status"] == "not_run"
    verdicts = [s["verdict"] for s in summary(run_dir)["steps"]]
    assert verdicts[1] == "not_run"


def test_a_stop_mid_step_rates_use_the_time_it_ran_and_it_never_passes(tmp_path):
    """Issue 19 item 5 (was test_stop_and_workers.py's live run): the run stopped 10.4 s into a 15 s step
    at 6 req/s. The partial step's window ends at the stop, so offered and achieved are ~6/s (not
    6 x 10.4 / 15), it is not invalid, and it never passes. (The exit code, 128 + the signal, is
    test_run_lifecycle.py's; a live stop is test_signals.py's.)"""
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                             "steps": [{"rate": 6, "duration": "15s"}]}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "1s", "max_worker_cpu": 1.0})
    run_dir = tmp_path / "run"
    run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path, {"load_time_s": 0}),
                report=False, during=_stop_after(10.4))
    step = plan(run_dir)["steps"][0]
    assert step["status"] == "partial"
    ran = step["window_end"] - step["window_start"]
    assert 10.0 < ran < 12.0 and step["planned_window_end"] == pytest.approx(step["window_start"] + 15.0)
    row = summary(run_dir)["steps"][0]
    assert row["offered_rate"] == pytest.approx(6.0, rel=0.12), row
    assert row["achieved_rate"] >= row["offered_rate"] * 0.98, row
    assert row["verdict"] == "insufficient" and "rate_shortfall" not in (row["failing"] or []), row
    assert summary(run_dir)["last_passing_rate"] is None and summary(run_dir)["verdict"] == "insufficient"


def test_a_worker_lost_mid_step_is_judged_on_what_survived(tmp_path, capsys):
    """Was test_netns.py's live run (a worker killed 3 s into an 8 s step): the master goes on, the step is
    judged on what survived, the lost worker's arrivals are recorded `cancelled` ("worker lost") so the
    counts stay whole, and the live verdict is the final one. A worker lost over the real transport is
    test_stop_and_workers.py's `test_a_killed_worker_loses_no_finished_record`."""
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                             "steps": [{"rate": 10, "duration": "8s"}]}},
                         client={"max_send_lag_p99": "500ms"})

    def kill_w1(run: VirtualRun) -> None:
        _wait_step_running(run, 3.0)
        run.link.lose("w1")

    run_dir = tmp_path / "run"
    code = run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path), report=False,
                       during=kill_w1)
    said = capsys.readouterr().out[-3000:]
    assert code in (0, 1, 3), said  # the master went on and finished the run
    step = plan(run_dir)["steps"][0]
    assert step["status"] == "run" and step["lost_workers"] == ["1"], said
    df = records(run_dir)
    assert len(df) == step["planned_arrivals"] and df["request_id"].is_unique  # counts stay whole
    lost = df[df["error"] == "worker lost"]
    assert step["lost_requests"] == len(lost) > 0
    assert set(lost["outcome"]) == {"cancelled"} and set(lost["worker"]) == set(step["lost_workers"])
    sent = df[df["sent_at"].notna() & (df["outcome"] == "ok")]
    assert len(sent) > len(lost) and sent["first_token_at"].notna().all()  # what survived was served
    # what the lost worker finished before it died is kept, as its record file had it
    mine = df[df["worker"] == "1"]
    assert (mine["outcome"] == "ok").sum() > 0 and (mine["closed_at"].dropna() <= step["start_at"] + 3.0).all()
    assert step["live_verdict"] == summary(run_dir)["steps"][0]["verdict"]
    assert f"{step['label']}: {len(lost)} request(s) of lost worker(s) 1 recorded as cancelled (worker lost)" in said


def test_a_server_that_dies_mid_step_fails_the_step_without_a_written_error_limit(tmp_path):
    """Issue 19 item 4 (was test_stop_and_workers.py's live run): the server dies 3 s into an 8 s step;
    the rest of the arrivals meet a closed port. No `max_error_ratio` in the SLO: the default limit fails
    the step on `error_ratio`, exit 1, never a pass."""
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                             "steps": [{"rate": 6, "duration": "8s"}]}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "1s", "max_worker_cpu": 1.0})

    def kill_the_server(run: VirtualRun) -> None:
        _wait_step_running(run, 3.0)
        run.server.die()

    run_dir = tmp_path / "run"
    code = run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path, {"load_time_s": 0}),
                       report=False, during=kill_the_server)
    row = summary(run_dir)["steps"][0]
    assert row["outcomes"].get("connect_error", 0) > row["outcomes"].get("ok", 0) > 0, row["outcomes"]
    assert row["verdict"] == "fail" and "error_ratio" in row["failing"], row
    assert code == 1
    refused = records(run_dir)[lambda d: d["outcome"] == "connect_error"]
    assert (refused["error"] == "cannot connect: Connection refused").all()  # as the live client says it


def test_closed_loop_levels_never_hold_more_requests_than_their_users(tmp_path):
    """Was test_examples_and_apis.py's live run against the Ollama sim (4 parallel slots; its cold load is
    HTTP, not simulated here): each level sends its requests, all answered, over the config's API, and a
    closed loop of c users never has more than c requests in flight."""
    config = base_config(CLOSED, {"concurrency": {"levels": [1, 3], "requests_per_level": 9,
                                                  "drain_timeout": "20s"}})
    config["target"].update(api="ollama-generate", server="ollama")
    run_dir = tmp_path / "run"
    run_virtual(write_config(tmp_path, config), out=run_dir, sim_path=_sim(tmp_path, {"num_parallel": 4}),
                report=False)
    assert (run_dir / "records.parquet").exists()
    df = records(run_dir)
    assert set(df["outcome"]) == {"ok"} and set(df["api"]) == {"ollama-generate"}
    for step in plan(run_dir)["steps"]:
        own = df[df["step"] == step["label"]].sort_values("sent_at")
        assert len(own) == 9
        # a closed loop of c users never has more than c requests in flight
        events = sorted([(t, 1) for t in own["sent_at"]] + [(t, -1) for t in own["closed_at"]])
        depth = peak = 0
        for _, delta in events:
            depth += delta
            peak = max(peak, depth)
        assert peak <= step["concurrency"]
    assert [s["verdict"] for s in summary(run_dir)["steps"]] != []
