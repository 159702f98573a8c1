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


def _varied_rows(n: int, seed: int = 11, *, queue: bool = True) -> list[dict]:
    """Records that vary every field the schema has: outcomes, missing and null fields, reasoning and
    tool-call tokens, answers with and without per-event counts, capped arrivals, server timings (with a
    per-request server queue, or, `queue=False`, only the prompt time: llama.cpp), usage mismatches, a
    prefix, several workers, a second step, a value of the wrong type."""
    rng = np.random.default_rng(seed)
    outcomes = ["ok"] * 12 + ["timeout", "rejected", "http_error", "quality_fail", "not_sent", "cancelled",
                              "client_error", "disconnect"]
    out = []
    for i in range(n):
        at = T0 + i * 0.04
        outcome = outcomes[int(rng.integers(len(outcomes)))]
        sent = None if outcome == "not_sent" else at + float(rng.exponential(0.004))
        streamed = outcome in ("ok", "quality_fail", "timeout", "disconnect") and sent is not None
        tokens = int(rng.integers(1, 9)) if streamed else None
        ttft = float(rng.lognormal(-1.6, 0.6))
        times = [sent + ttft + 0.03 * k + float(rng.exponential(0.01)) for k in range(tokens or 0)]
        reasoning = int(rng.integers(0, tokens)) if tokens and i % 3 == 0 else (0 if tokens else None)
        row = Record(
            request_id=f"w{i % 4}-{i}", step="r25" if i % 29 else "r10", worker=str(i % 4), scheduled_at=at,
            outcome=outcome, sent_at=sent, first_token_at=times[0] if times else None,
            last_token_at=times[-1] if times else None,
            closed_at=(times[-1] + float(rng.exponential(0.02))) if times and i % 2 else None,
            input_tokens=int(rng.integers(10, 40)) if i % 11 else 400, output_tokens=tokens,
            tokens_estimated=bool(i % 13 == 0), planned_input_tokens=20 if i % 7 else None,
            planned_output_tokens=8 if i % 5 else 2, http_status=200 if streamed else 503,
            error=None if streamed else "x", token_times=times,
            token_counts=[int(rng.integers(1, 3)) for _ in times] if i % 4 else [],
            capped=bool(i % 6 == 0), dequeued_at=at + 0.001, instance=f"i{i % 2}", api="openai-chat",
            finish_reason="length" if i % 2 else "stop", cached_tokens=i % 5, prefix_id=i % 3 if i % 8 else None,
            cold=bool(i % 2), server_load_s=0.01, server_prompt_s=float(rng.exponential(0.02)) if i % 3 else None,
            server_decode_s=0.1, server_total_s=0.3,
            server_queue_s=float(rng.exponential(0.05)) if queue and i % 10 < 6 else None, quality_checked=True,
            retries=i % 2, usage_mismatch=bool(i % 23 == 0), reported_output_tokens=tokens,
            first_answer_at=times[min(reasoning or 0, len(times) - 1)] if times and i % 9 else None,
            reasoning_tokens=reasoning, session_id=f"s{i // 3}", turn=i % 3, tool_call_tokens=i % 2,
        ).as_dict()
        if i % 37 == 0:  # an older worker's summary: fields it never had
            for key in ("first_answer_at", "reasoning_tokens", "closed_at", "capped", "token_counts"):
                row.pop(key)
        if i == 41:
            row["output_tokens"] = "7"  # a value the schema cannot hold: nulled, the record kept
        out.append(row)
    # the same requests shipped twice (a lost worker's flushed file): the finished copy is kept
    out += [{**r, "outcome": "not_sent"} for r in out[100:130]] + [dict(r) for r in out[200:210]]
    return out


_SLOS = [
    {"ttft_p95": "300ms", "tpot_p95": "40ms", "itl_p99": "60ms", "e2e_p90": "900ms", "min_samples": 20},
    {"ttfa_p95": "500ms", "user_ttft_p99": "400ms", "client_wait_p95": "5ms", "server_queue_p95": "100ms",
     "user_e2e_p50": "500ms", "max_usage_mismatch_ratio": 0.5, "max_error_ratio": 0.9, "min_samples": 20},
]
#: (SLO, records with a per-request server queue)
_CASES = [(_SLOS[0], True), (_SLOS[1], True), (_SLOS[1], False)]


def _slo_config(slo: dict):
    return parse_config({"target": {"url": "http://127.0.0.1:1", "api": "openai-chat", "model": "m"},
                         "shape": {"ladder": {"steps": [{"rate": 25, "duration": "30s"}]}}, "slo": slo,
                         "telemetry": {"gpu": "off", "metrics_url": "off"}})


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN, through dicts and lists."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def _full_table_judge(rows: list[dict], plan: dict, config):
    """The judge as it was: every column of every record (`records_table` whole, `records_from_table`)."""
    from analysis.run import records_from_table
    from analysis.verdict import judge_step

    return judge_step(records_from_table(records_table(rows)), plan, config.slo, config.client)


_PLAN = {"label": "r25", "index": 0, "phase": "ladder", "target_rate": 25.0, "status": "run", "start_at": T0,
         "window_start": T0 + 2.0, "window_end": T0 + 22.0, "duration_s": 25.0, "planned_arrivals": 640}


@pytest.mark.parametrize(("slo", "queue"), _CASES)
def test_the_column_projected_judge_of_a_spill_is_the_full_table_judge(tmp_path, slo, queue):
    from llmload.runtime.master.step_records import StepRecords

    config = _slo_config(slo)
    rows = _varied_rows(700, queue=queue)
    spill = StepRecords(tmp_path / "step-0000.jsonl")
    for i in range(0, len(rows), 64):
        spill.add(rows[i:i + 64])
    with spill.path.open("ab") as f:
        f.write(b'{"request_id": "w0-99999", "step": "r25", "sched')  # a torn last line: skipped
    expected = _full_table_judge(rows, _PLAN, config)
    for source in (spill, rows):
        got = judge_rows(source, _PLAN, config)
        assert _same(got, expected), [k for k in expected[2] if not _same(got[2].get(k), expected[2][k])]
    assert expected[2]["completed"] > 100 and expected[2]["split"] and expected[2]["usage_mismatch"] > 0
