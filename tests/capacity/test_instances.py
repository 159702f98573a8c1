"""Several instances behind `target.urls` (issue 10): routing, per-request instance, per-instance tables.

Real `llmload run`s against two sims: round robin splits the load evenly (within one request), least
outstanding sends fewer requests to a slowed instance, each record names its instance, the per-instance
numbers add up to the combined ones, and telemetry has one source per instance.
"""

from __future__ import annotations

import pandas as pd
import pytest
from capacity_helpers import E2E_SLO_S, good_mask, read_json, run_config, sim_target, window_requests

import analysis
from llmload.config import load_slo

# quiet: its verdicts, drifts and generator checks need the load they measure to be most of the load (beside
# the busy part's workers and two CPU hogs they came out invalid or undetected)
pytestmark = [pytest.mark.slow, pytest.mark.quiet]


def test_round_robin_splits_evenly_and_instance_tables_add_up(deployments):
    run_dir = deployments.two
    assert (run_dir / "summary.json").exists(), deployments.outputs["two"]
    urls = [s.url for s in deployments.sims]
    records, windows = window_requests(run_dir)
    sent = records[records["sent_at"].notna()]
    assert set(sent["instance"]) == set(urls)  # every sent request records the instance that served it
    counts = sent["instance"].value_counts()
    assert abs(counts[urls[0]] - counts[urls[1]]) <= 1
    # the sims' own logs agree on who served what
    for sim in deployments.sims:
        served = {row["request_id"] for row in sim.ground_truth_rows()}
        mine = set(sent.loc[sent["instance"] == sim.url, "request_id"])
        assert mine <= served and not (mine & set(sent.loc[sent["instance"] != sim.url, "request_id"]))

    # telemetry: one server source per instance
    telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
    sources = set(telemetry["source"])
    assert {f"server:{u}" for u in urls} <= sources

    # per-instance numbers add up to the combined ones (analysis tables), and match the records
    run = analysis.load_run(run_dir)
    result = analysis.analyze(run, load_slo(run_dir.parent / "two.yaml"))
    inst, steps = result.instances, result.steps.set_index("label")
    assert inst is not None and set(inst["instance"]) <= {*urls, "(none)"}
    for label, own in inst.groupby("label"):
        combined = steps.loc[label]
        for column in ("arrivals", "sent", "completed", "ok"):
            assert int(own[column].sum()) == int(combined[column]), (label, column)
        assert own["goodput"].sum() == pytest.approx(combined["goodput"], rel=1e-9)
        start, end = windows[label]
        mine = records[(records["step"] == label) & records["in_window"]]
        good = good_mask(mine, e2e_s=E2E_SLO_S)
        for url in urls:
            row = own[own["instance"] == url].iloc[0]
            assert row["arrivals"] == (mine["instance"] == url).sum()
            assert row["goodput"] == pytest.approx((good & (mine["instance"] == url)).sum() / (end - start))
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'id="instances-table"' in report and urls[0] in report


def test_least_outstanding_sends_fewer_requests_to_a_slowed_instance(sim_factory, tmp_path):
    # the slow one first: ties go to it (list order), so it is chosen whenever it is free
    slow = sim_factory(flavor="vllm", config={"max_num_seqs": 4, "step_base_s": "100ms"})
    fast = sim_factory(flavor="vllm", config={"max_num_seqs": 4, "step_base_s": "10ms"})
    config = {"target": sim_target([slow.url, fast.url], routing="least_outstanding"),
              "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                           "output_tokens": {"dist": "fixed", "value": 8}},
              "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                   # 3 s (was 5): 24 arrivals, about 3 of them to the slow one
                                   "steps": [{"rate": 8, "duration": "3s"}]}},
              "slo": {"min_samples": 5}, "telemetry": {"gpu": "off"}}
    run_dir, code, out = run_config(tmp_path, "least", config, report=False)  # its records and plan are checked
    assert (run_dir / "records.parquet").exists(), out
    records, _ = window_requests(run_dir)
    counts = records["instance"].value_counts()
    # the slow instance holds each request ~0.8 s, the fast one ~0.1 s: the slow one gets about 1 in 7
    assert 0 < counts.get(slow.url, 0) < 0.3 * counts.sum(), counts.to_dict()
    plan = read_json(run_dir, "plan.json")
    assert plan["steps"][0]["status"] == "run"
