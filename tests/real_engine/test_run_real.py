"""`llmload run` end to end against the real llama-server: a two-step ladder and a short burst replay.

The run directory must be complete (METRICS.md contract) and account for every arrival; the records
of a fully answered run (the burst) must sum to the deltas of the server's own token counters;
deferred requests must show as server waiting and as TTFT growth; 0.5 req/s must pass and 4 req/s fail
on TTFT, and the failing step's limit must be the server's slots, counted from the server itself and
agreeing with its own gauges (this was tests/real_engine/test_limit_real.py's 2-slot run).

What is a decision rather than the engine is tested on the sim: the knee between many rates
(tests/runtime/test_demo.py, tests/sim/test_virtual_search.py), bursts against their uniform twin
(tests/runtime/test_demo.py's `test_the_demos_bursts_cost_more_than_their_uniform_twin`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from llama_wire import scrape_metrics

from llmload.clock import now

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_FILES = ("records.parquet", "telemetry.parquet", "manifest.json", "plan.json", "summary.json",
             "worksheet.csv", "report.html")
#: what an overloaded llama.cpp does to requests: defers them (some then outlast the client's timeout
#: or the drain); it never refuses one
OVERLOAD_OUTCOMES = {"ok", "timeout", "cancelled"}


def run_llmload(config_name: str, server, tmp_path: Path) -> dict:
    """Run `llmload run` on a copy of `config_name` aimed at `server`; return what the run wrote, and
    the server's counters just after the pre-flight probe (when `preflight.json` appears) and at the end,
    so the deltas hold exactly the traffic of the run's records."""
    config = yaml.safe_load((HERE / config_name).read_text())
    config["target"]["url"] = server.url
    trace = config["shape"].get("trace")
    if trace:
        trace["file"] = str(HERE / trace["file"])
    config_path = tmp_path / config_name
    config_path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    log = tmp_path / "llmload-run.log"
    cmd = [sys.executable, "-m", "llmload.cli", "run", str(config_path), "--out", str(run_dir)]
    before = before_at = None
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                if before is None and (run_dir / "preflight.json").exists():
                    before, before_at = scrape_metrics(server.url), now()
                time.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
        finally:
            proc.wait()
    after = scrape_metrics(server.url)
    output = log.read_text()[-3000:]
    # 0 pass, 1 a step failed; 3 only when a step was inconclusive (a p95 interval from a short real step
    # straddling its target), never invalid or insufficient
    verdict = json.loads((run_dir / "summary.json").read_text()).get("verdict") if proc.returncode == 3 else None
    assert proc.returncode in (0, 1) or verdict == "inconclusive", f"llmload run exited {proc.returncode}:\n{output}"
    missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
    assert not missing, f"run directory lacks {missing}:\n{output}"
    return {
        "config": config,
        "records": pd.read_parquet(run_dir / "records.parquet"),
        "telemetry": pd.read_parquet(run_dir / "telemetry.parquet"),
        "plan": json.loads((run_dir / "plan.json").read_text()),
        "summary": json.loads((run_dir / "summary.json").read_text()),
        "counters_at": before_at,
        "delta": {name: after[name] - before[name] for name in after} if before else None,
    }


@pytest.fixture(scope="module")
def ladder(llama_server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_llmload("ladder.yaml", llama_server, tmp_path_factory.mktemp("ladder"))


@pytest.fixture(scope="module")
def burst(llama_server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_llmload("burst.yaml", llama_server, tmp_path_factory.mktemp("burst"))


def summary_steps(run: dict) -> dict[str, dict]:
    return {step["label"]: step for step in run["summary"]["steps"]}


def plan_steps(run: dict) -> dict[str, dict]:
    return {step["label"]: step for step in run["plan"]["steps"]}


def check_every_arrival_recorded(run: dict) -> None:
    records, plan = run["records"], run["plan"]
    assert all(step["status"] == "run" for step in plan["steps"]), plan["steps"]
    assert len(records) == sum(step["planned_arrivals"] for step in plan["steps"])
    assert records["request_id"].is_unique
    assert set(records["outcome"]) <= OVERLOAD_OUTCOMES, records["outcome"].value_counts().to_dict()
    ok = records[records["outcome"] == "ok"]
    planned_output = run["config"]["requests"]["output_tokens"]["value"]
    assert (ok["output_tokens"] == planned_output).all() and not ok["tokens_estimated"].any()


def check_tokens_match_server_counters(run: dict) -> None:
    """Between the scrape after the pre-flight probe and the one after the run, only the run's records
    reached the server: their token counts must sum exactly to the counters' deltas."""
    records, delta = run["records"], run["delta"]
    assert delta is not None, "preflight.json never appeared while the run was going"
    assert run["counters_at"] < records["sent_at"].min(), "the first request went out before the scrape"
    assert (records["outcome"] == "ok").all()
    processed = int((records["input_tokens"] - records["cached_tokens"].fillna(0)).sum())
    assert processed == delta["llamacpp:prompt_tokens_total"]
    assert int(records["cached_tokens"].fillna(0).sum()) == delta["llamacpp:prompt_tokens_cached_total"]
    assert int(records["output_tokens"].sum()) == delta["llamacpp:tokens_predicted_total"]


def test_ladder_records_every_arrival(ladder) -> None:
    check_every_arrival_recorded(ladder)
    assert list(plan_steps(ladder)) == ["r0.50", "r4.00"]
    first = ladder["records"][ladder["records"]["step"] == "r0.50"]
    assert (first["outcome"] == "ok").all(), "0.5 req/s is far under capacity"


def test_ladder_passes_under_capacity_and_fails_over_it_on_ttft(ladder) -> None:
    steps, summary = summary_steps(ladder), ladder["summary"]
    verdicts = [steps[label]["verdict"] for label in ("r0.50", "r4.00")]
    assert verdicts == ["pass", "fail"], verdicts
    assert any("ttft" in name for name in steps["r4.00"]["failing"]), steps["r4.00"]["failing"]
    # the label's rate, and the realised offered rate of that step
    assert summary["last_passing_target_rate"] == 0.5, summary["last_passing_target_rate"]
    assert summary["last_passing_rate"] == pytest.approx(steps["r0.50"]["offered_rate"])
    assert steps["r4.00"]["ttft_p95_s"] > 2 * steps["r0.50"]["ttft_p95_s"]


def test_overload_limit_is_batch_slots_counted_from_the_server(ladder, llama_server) -> None:
    """The failing step's `limit` is `batch_slots` with the slot count read from the server itself
    (`/props`, `/slots`: the config names none), and its evidence agrees with the server's own gauges
    (`requests_processing`, `requests_deferred`) sampled in the step's window."""
    step = summary_steps(ladder)["r4.00"]
    limit = step["limit"]
    assert limit["kind"] == "batch_slots", limit
    ev = limit["evidence"]
    assert "max_num_seqs" not in ladder["config"].get("conditions", {}) and ev["slots"] == llama_server.parallel, ev
    assert ev["running_at_slots_share"] >= 0.5 and ev["waiting_mean"] >= 1.0, ev
    tel = ladder["telemetry"]
    inside = tel[tel["t"].between(step["window_start"], step["window_end"])]
    processing = inside[inside["metric"] == "running"]["value"]
    deferred = inside[inside["metric"] == "deferred"]["value"]
    assert len(processing) and processing.max() == llama_server.parallel, processing.tolist()
    assert len(deferred) and deferred.max() >= 2, deferred.tolist()
    assert ev["running_mean"] == pytest.approx(processing.mean(), abs=0.3)
    assert "--parallel" in limit["advice"] or "max_num_seqs" in limit["advice"]


def test_overload_shows_as_server_waiting_and_ttft_growth(ladder, llama_server) -> None:
    """At 4 req/s llama.cpp defers what its 4 slots cannot take: the `deferred` gauge (normalised as
    `waiting`) rises in that step while `running` stays at the slot count, and requests arriving
    later wait longer for their first token."""
    telemetry, plan = ladder["telemetry"], plan_steps(ladder)

    def peak(metric: str, step: dict) -> float:
        series = telemetry[telemetry["metric"] == metric]
        assert not series.empty, f"no {metric} in {sorted(telemetry['metric'].unique())}"
        inside = series[series["t"].between(step["start_at"], step["drained_at"])]
        return float(inside["value"].max()) if len(inside) else 0.0

    for metric in ("deferred", "waiting"):
        assert peak(metric, plan["r4.00"]) >= 1, metric
        assert peak(metric, plan["r0.50"]) <= 1, metric
    assert peak("running", plan["r4.00"]) == llama_server.parallel
    records = ladder["records"]
    step = records[records["step"] == "r4.00"].sort_values("scheduled_at")
    # a request that never got a first token waited at least until it gave up: count it as waiting forever
    ttft = (step["first_token_at"] - step["sent_at"]).fillna(math.inf)
    third = len(ttft) // 3
    assert ttft.iloc[-third:].median() > ttft.iloc[:third].median(), ttft.round(3).tolist()


def test_burst_replay_records_every_arrival(burst) -> None:
    check_every_arrival_recorded(burst)
    assert [s["phase"] for s in burst["plan"]["steps"]] == ["burst"]
    assert (burst["records"]["outcome"] == "ok").all(), "the mean rate is under capacity: nothing times out"
    check_tokens_match_server_counters(burst)
