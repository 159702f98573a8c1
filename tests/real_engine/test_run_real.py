"""`llmload run` end to end against the real llama-server: a short ladder and a short burst replay.

The run directory must be complete (METRICS.md contract) and account for every arrival; the records
of a fully answered run must sum to the deltas of the server's own token counters;
deferred requests must show as server waiting and as TTFT growth; the analysis must find the knee
(0.5 req/s passes, 4 req/s fails on TTFT); a burst must hurt TTFT more than the same mean rate spread
evenly.
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
    assert list(plan_steps(ladder)) == ["r0.50", "r1.00", "r2.00", "r4.00"]
    first = ladder["records"][ladder["records"]["step"] == "r0.50"]
    assert (first["outcome"] == "ok").all(), "0.5 req/s is far under capacity"


def test_ladder_finds_the_knee(ladder) -> None:
    steps, summary = summary_steps(ladder), ladder["summary"]
    verdicts = [steps[label]["verdict"] for label in ("r0.50", "r1.00", "r2.00", "r4.00")]
    assert verdicts[0] == "pass" and verdicts[-1] == "fail", verdicts
    assert "pass" not in verdicts[verdicts.index("fail"):], f"a pass above a failing rate: {verdicts}"
    knee = steps[f"r{[0.5, 1.0, 2.0, 4.0][verdicts.index('fail')]:.2f}"]
    assert any("ttft" in name for name in knee["failing"]), knee["failing"]
    # the label's rate, and the realised offered rate of that step (poisson_exact: round(rate x 15 s) arrivals)
    assert summary["last_passing_target_rate"] in (0.5, 1.0, 2.0), summary["last_passing_target_rate"]
    passing = steps[f"r{summary['last_passing_target_rate']:.2f}"]
    assert summary["last_passing_rate"] == pytest.approx(passing["offered_rate"])
    assert steps["r4.00"]["ttft_p95_s"] > 2 * steps["r0.50"]["ttft_p95_s"]


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
    assert [s["phase"] for s in burst["plan"]["steps"]] == ["burst", "uniform"]
    assert (burst["records"]["outcome"] == "ok").all(), "the mean rate is under capacity: nothing times out"
    check_tokens_match_server_counters(burst)


def test_burst_hurts_ttft_more_than_the_same_mean_rate_spread_evenly(burst) -> None:
    steps = summary_steps(burst)
    burst_step, uniform_step = steps["burst"], steps["uniform"]
    assert burst_step["offered_rate"] == pytest.approx(uniform_step["offered_rate"], rel=0.1)
    assert burst_step["ttft_p95_s"] > uniform_step["ttft_p95_s"], (burst_step, uniform_step)
