"""records.py: one badly typed field never loses the run's records (issue 33, item 3)."""

from __future__ import annotations

import json

import pytest

from llmload.records import Record, RecordWriter, merge_record_files, merge_records


def _good(i: int) -> dict:
    return Record(request_id=f"r-{i}", step="s0", worker="w0", scheduled_at=100.0 + i, outcome="ok",
                  output_tokens=8, token_times=[1.0, 2.0]).as_dict()


@pytest.mark.parametrize(("field", "value"), [
    ("output_tokens", "12"), ("input_tokens", 2**70), ("finish_reason", 7), ("token_times", "x"),
    ("token_counts", [1, "2"]), ("capped", "yes"), ("scheduled_at", "soon"), ("http_status", [200]),
])
def test_a_wrong_typed_value_is_null_and_every_row_is_kept(tmp_path, field, value) -> None:
    path = tmp_path / "records-w0.jsonl"
    bad = {**_good(1), field: value}
    lines = [json.dumps(_good(0)), json.dumps(bad), json.dumps(_good(2)), "5", "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    frame = merge_records([path], tmp_path / "records.parquet")
    assert sorted(frame["request_id"]) == ["r-0", "r-1", "r-2"]
    row = frame.set_index("request_id").loc["r-1"]
    assert row[field] is None or row[field] != row[field]  # null (None or NaN)
    assert frame.set_index("request_id").loc["r-0", "output_tokens"] == 8


def test_the_new_fields_round_trip(tmp_path) -> None:
    rec = Record(request_id="a", step="s", worker="w", scheduled_at=1.0, outcome="malformed", retries=2,
                 usage_mismatch=True, reported_output_tokens=1, output_tokens=16)
    with RecordWriter(tmp_path / "r.jsonl") as writer:
        writer.write(rec)
    assert merge_record_files([tmp_path / "r.jsonl"], tmp_path / "r.parquet") == 1
    row = merge_records([tmp_path / "r.jsonl"], tmp_path / "r.parquet").iloc[0]
    assert (row["outcome"], row["retries"], row["usage_mismatch"], row["reported_output_tokens"]) == \
        ("malformed", 2, True, 1)
