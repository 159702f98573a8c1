"""Issue 46: the analysis reads `records.parquet` a step at a time (`analysis.run.ParquetRecords`) and
gives exactly what it gives with the records in memory, whatever the row groups and batches, the steps'
order in the file, the instances and the float32 event gaps of a big run."""

from __future__ import annotations

import json
import random

import pandas as pd
import pyarrow.parquet as pq
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze, load_run, pipeline
from analysis import run as run_module
from llmload.config import SLO
from llmload.records import records_table

SLO_ = SLO.model_validate({"ttft_p95": "300ms", "tpot_p95": "80ms", "itl_p95": "60ms", "min_samples": 5})


def _rows() -> list[dict]:
    rng = random.Random(7)
    rows = []
    for s, label in enumerate(("a", "b", "c")):
        for i in range(40):
            at = s * 20.0 + i * 0.25
            rows.append(request(f"{label}{i}", label, at, ttft=rng.uniform(0.05, 0.4), e2e=rng.uniform(0.6, 1.5),
                                out=rng.randint(1, 9), instance="http://x" if i % 3 else "http://y",
                                outcome="ok" if i % 13 else "timeout"))
    rows.append(request("stray", "zzz", 5.0))  # a step not in the plan: its request still in the timeline
    return sorted(rows, key=lambda r: r["scheduled_at"])  # as records.parquet holds them


def _steps() -> list[dict]:
    return [plan_step("a", 0, start=0.0), plan_step("b", 1, start=20.0), plan_step("c", 2, start=40.0),
            plan_step("d", 3, start=60.0, status="not_run")]


def _write(tmp_path, rows, steps, row_group_size: int):
    pq.write_table(records_table(rows), tmp_path / "records.parquet", row_group_size=row_group_size)
    (tmp_path / "plan.json").write_text(json.dumps({"kind": "ladder", "steps": steps}))
    return tmp_path


@pytest.mark.parametrize("row_group_size", [7, 1000])
def test_stepwise_is_the_analysis_in_memory(tmp_path, monkeypatch, row_group_size):
    monkeypatch.setattr(run_module, "LIST_BATCH_ROWS", 5)  # many batches, steps split across them
    rows, steps = _rows(), _steps()
    whole = analyze(run_of(rows, steps), SLO_)
    stepwise_run = load_run(_write(tmp_path, rows, steps, row_group_size))
    assert isinstance(stepwise_run.source, run_module.ParquetRecords)
    stepwise = analyze(stepwise_run, SLO_)
    assert json.dumps(stepwise.summary, sort_keys=True, default=str) == json.dumps(whole.summary, sort_keys=True,
                                                                                  default=str)
    assert stepwise.steps.to_json() == whole.steps.to_json()
    assert stepwise.instances.to_json() == whole.instances.to_json()
    assert stepwise.timeline.to_json() == whole.timeline.to_json()
    assert len(stepwise.requests) == len(rows) and stepwise.requests["step"].astype(str).tolist() == \
        whole.requests["step"].astype(str).tolist()


def test_steps_out_of_file_order_and_the_event_count(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "LIST_BATCH_ROWS", 4)
    rows = _rows()
    source = run_module.ParquetRecords(_write(tmp_path, rows, _steps(), 9) / "records.parquet")
    groups = source.groups()
    later, earlier = source.rows(groups["c"]), source.rows(groups["a"])  # read back from the start
    assert later["request_id"].tolist() == [f"c{i}" for i in range(40)]
    assert earlier["request_id"].tolist() == [f"a{i}" for i in range(40)]
    frame, gaps = source.rows_and_gaps(groups["b"], float32_above=-1)
    assert "token_times" not in frame and gaps.chunk.dtype.name == "float32"
    assert source.total_events() == source._count_events() == sum(len(r["token_times"]) for r in rows)


@pytest.mark.parametrize("stepwise", [True, False])
def test_a_long_runs_requests_are_read_back_the_same(tmp_path, monkeypatch, stepwise):
    """Over `KEEP_REQUESTS_UP_TO` records the requests are not kept as the steps are analysed: the figures
    are the same, and `Analysis.requests` and the timeline, read back from the records when first asked
    for, are those the kept columns give (the stray step's request included)."""
    monkeypatch.setattr(run_module, "LIST_BATCH_ROWS", 6)
    rows, steps = _rows(), _steps()
    run = (lambda: load_run(_write(tmp_path, rows, steps, 11))) if stepwise else (lambda: run_of(rows, steps))
    kept = analyze(run(), SLO_)
    monkeypatch.setattr(pipeline, "KEEP_REQUESTS_UP_TO", len(rows) - 1)
    read_back = analyze(run(), SLO_)
    assert isinstance(object.__getattribute__(read_back, "requests"), pipeline.Later)  # the figures did not need it
    assert json.dumps(read_back.summary, sort_keys=True, default=str) == json.dumps(kept.summary, sort_keys=True,
                                                                                    default=str)
    assert read_back.steps.to_json() == kept.steps.to_json()
    pd.testing.assert_frame_equal(read_back.requests, kept.requests)
    assert "stray" in read_back.requests["request_id"].tolist()
    pd.testing.assert_frame_equal(read_back.timeline, kept.timeline)
