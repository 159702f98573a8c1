"""Issue 46: the master keeps a step's shipped summaries on disk (`StepRecords`' spill file) and only
streaming figures in memory; the live judge reads the spill back and judges exactly what it judged
from the summaries in memory."""

from __future__ import annotations

import numpy as np
import pytest

from llmload import records
from llmload.config import parse_config
from llmload.records import Record, records_table
from llmload.runtime.master.judging import judge_rows
from llmload.runtime.master.live_series import LiveSeries
from llmload.runtime.master.shipped import StepTally
from llmload.runtime.master.step import Step
from llmload.runtime.master.step_records import SPILL_DIR
from llmload.runtime.wire.messages import ResultsMessage, pack_record
from llmload.sketch import QuantileSketch
from shapes.steps import StepBounds, StepSpec

T0 = 1_750_000_000.0


def _rows(n: int, label: str, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        at = T0 + i * 0.05
        ttft = float(rng.lognormal(-1.5, 0.5))
        ok = i % 17 != 0
        r = Record(request_id=f"{label}-{i}", step=label, worker="0", scheduled_at=at,
                   outcome="ok" if ok else "timeout", sent_at=at + 0.001, output_tokens=5 if ok else None,
                   first_token_at=at + ttft if ok else None, last_token_at=at + ttft + 0.2 if ok else None,
                   token_times=[at + ttft + 0.05 * k for k in range(5)] if ok else [])
        out.append(r.as_dict())
    return out


def _config():
    return parse_config({"target": {"url": "http://127.0.0.1:1", "api": "openai-chat", "model": "m"},
                         "shape": {"ladder": {"steps": [{"rate": 20, "duration": "20s"}]}},
                         "slo": {"ttft_p95": "300ms", "e2e_p95": "1s", "min_samples": 20},
                         "telemetry": {"gpu": "off", "metrics_url": "off"}})


def test_the_tally_spills_a_steps_summaries_and_the_judge_reads_them_back_unchanged(tmp_path):
    config = _config()
    tally = StepTally(tmp_path, local=False, slo=config.slo)
    step = Step(StepSpec(label="r20", index=0, phase="ladder", arrival="constant", target_rate=20.0,
                         duration_s=20.0))
    tally.add(step)
    step.bounds = StepBounds(T0, T0 + 2.0, T0 + 20.0, T0 + 80.0)
    rows = _rows(400, "r20")
    for i in range(0, 400, 50):  # shipped in batches
        tally.on_results(ResultsMessage(worker="0", rows=[pack_record(Record(**r)) for r in rows[i:i + 50]]))
    spill = tmp_path / SPILL_DIR / "step-0000.jsonl"
    assert spill.exists() and len(spill.read_text().splitlines()) == 400 == len(step.rows)
    assert step.rows._rows is None  # nothing kept in memory but the streaming figures
    assert step.rows.stats()["done"] == 400
    plan = {**step.plan_row(), "status": "run", "window_start": T0 + 2.0, "window_end": T0 + 20.0}
    from_disk = judge_rows(step.rows, plan, config)
    in_memory = judge_rows(rows, plan, config)
    assert from_disk[:2] == in_memory[:2]
    assert from_disk[2]["ttft_p95_s"] == in_memory[2]["ttft_p95_s"]
    assert from_disk[2]["completed"] == in_memory[2]["completed"]
    # the live goodput's count: ok, in the window, meeting every per-request threshold
    good = sum(1 for r in rows if r["outcome"] == "ok" and T0 + 2.0 <= r["scheduled_at"] < T0 + 20.0
               and r["first_token_at"] - r["sent_at"] <= 0.3 + 1e-9 and r["last_token_at"] - r["sent_at"] <= 1.0)
    assert step.rows.good == good
    assert (tmp_path / "records" / "master.jsonl").read_text().count("\n") == 400  # the run's copy, as before
    tally.forget(step)
    assert not spill.exists() and len(step.rows) == 0
    tally.close()
    assert not (tmp_path / SPILL_DIR).exists()


def test_records_table_in_chunks_is_the_table_in_one_piece(monkeypatch):
    rows = _rows(120, "a") + _rows(60, "a", seed=4)[:30]  # duplicates of request ids: one kept
    whole = records_table(rows)
    monkeypatch.setattr(records, "TABLE_CHUNK_ROWS", 7)
    chunked = records_table(iter(rows))
    assert chunked.equals(whole)


def test_a_sketch_is_within_its_accuracy_and_merges():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.lognormal(-1, 1, 50_000), -rng.lognormal(-6, 1, 500), np.zeros(100)])
    a, b = QuantileSketch(), QuantileSketch()
    a.add(values[::2])
    b.add(values[1::2])
    a.merge(b)
    assert a.count == values.size and a.buckets() < 2000
    for q in (0.01, 0.5, 0.95, 0.99):
        assert a.quantile(q) == pytest.approx(np.percentile(values, q * 100), rel=0.02), q
    assert QuantileSketch().quantile(0.5) is None


def test_the_live_series_keeps_old_seconds_as_percentiles_only():
    from llmload.runtime.master.live_series import FREEZE_S

    live = LiveSeries()
    rows = [{"scheduled_at": T0 + s, "sent_at": T0 + s + k * 0.001, "first_token_at": T0 + s + 0.1 + k * 0.002,
             "last_token_at": T0 + s + 0.5, "output_tokens": 5, "outcome": "ok"}
            for s in range(FREEZE_S + 30) for k in range(20)]
    live.add_rows(rows)
    before = live.series()
    assert len(live._ttft) == FREEZE_S + 1  # only the last FREEZE_S seconds keep their values
    live.add_rows([{**rows[0], "first_token_at": rows[0]["sent_at"] + 50}])  # late, into a frozen second
    after = live.series()
    assert after["ttft_p95_ms"] == before["ttft_p95_ms"] and after["achieved"][0] == before["achieved"][0] + 1
    assert before["ttft_p95_ms"][0] == pytest.approx(100 + 19 * 0.95, abs=0.11)  # the frozen second's own
