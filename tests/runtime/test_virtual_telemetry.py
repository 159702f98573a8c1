"""A virtual run's telemetry and ground truth are a live run's against `llmload sim` (`llmload.runtime.virtual`):
the same series under the same names and labels in telemetry.jsonl, sampled on the virtual clock at the
configured interval, and the sim's ground-truth log with a row per request. The analyses that read them
(limits, the queueing split, soak drift, bursts) are tested on virtual runs; this checks that what they
read is what a live scrape gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support import base_config
from virtual_truth import CLOSED, run_against_sim, truth_rows

from llmload.telemetry.sink import read_telemetry
from llmload.telemetry.sources import EndpointSource

SIM = {"max_num_seqs": 2, "num_parallel": 2, "step_base_s": "20ms", "load_time_s": 0}


def _config(flavor: str) -> dict:
    config = base_config(CLOSED, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                             "steps": [{"rate": 4, "duration": "3s"}]}})
    config["target"]["server"] = flavor
    config["telemetry"] = {"gpu": "off", "interval": "250ms"}
    return config


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp"])
def test_the_series_are_a_live_scrapes_under_the_same_names_and_labels(sim_factory, tmp_path, flavor):
    sim = sim_factory(flavor=flavor, config=SIM)
    live = EndpointSource(sim.url, flavor=flavor, metrics_url=f"{sim.url}/metrics", timeout_s=5.0).poll()
    code, run_dir = run_against_sim(tmp_path, _config(flavor), flavor=flavor, sim=SIM)
    assert code in (0, 1), code
    df = read_telemetry(run_dir)
    df = df[~df["source"].str.startswith("worker:")]  # the workers' CPU: the run's own, not the server's

    def local(source: str) -> str:  # the source named after the target's URL, live or not
        return source.split(":", 1)[0]

    got = {(local(s), m, lab) for s, m, lab in zip(df["source"], df["metric"], df["labels"], strict=True)}
    want = {(local(p.source), p.metric, p.labels) for p in live}
    assert got == want, (sorted(got - want)[:10], sorted(want - got)[:10])
    # sampled every 250 ms of the run's clock (the last sample is the one after the last drain)
    running = df[df["metric"] == "running"]
    gaps = np.diff(running["t"].to_numpy())
    assert len(running) >= 12 and np.median(gaps) == pytest.approx(0.25)


def test_the_ground_truth_has_a_row_per_request_at_the_clients_times(tmp_path):
    code, run_dir = run_against_sim(tmp_path, _config("vllm"), sim=SIM)
    records = pd.read_parquet(run_dir / "records.parquet")
    rows = {r["request_id"]: r for r in truth_rows(run_dir)}
    assert set(rows) == set(records["request_id"]) and len(rows) == 12
    for rec in records.itertuples():
        row = rows[rec.request_id]
        assert row["outcome"] == rec.outcome == "ok" and row["received_at"] == rec.sent_at
        assert row["first_token_at"] == rec.first_token_at and row["finished_at"] == rec.last_token_at
        assert row["admitted_at"] >= row["received_at"] and row["queue_s"] == row["admitted_at"] - row["received_at"]
        assert row["output_tokens"] == rec.output_tokens == len(row["token_times"])
