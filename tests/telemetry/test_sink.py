"""The JSON-lines sink and its Parquet finalisation."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from llmload.telemetry import sink as sink_module
from llmload.telemetry.sink import TELEMETRY_SCHEMA, Point, TelemetrySink, finalise_telemetry, read_telemetry


def test_repeats_skipped_gaps_reset_and_non_finite_dropped(tmp_path: Path) -> None:
    sink = TelemetrySink(tmp_path / "telemetry.jsonl")
    counter = Point("server:a", "preemptions_total", 3.0, always=False)
    assert sink.write(1.0, "r1", [counter, Point("server:a", "running", 2.0)]) == 2
    assert sink.write(2.0, "r1", [counter, Point("server:a", "running", 2.0)]) == 1
    assert sink.write(2.5, "r1", [Point("server:a", "kv_usage", float("nan"))]) == 0
    sink.forget("server:a")
    assert sink.write(3.0, None, [counter]) == 1
    sink.close()
    rows = [json.loads(line) for line in (tmp_path / "telemetry.jsonl").read_text().splitlines()]
    assert rows[0] == {"t": 1.0, "source": "server:a", "metric": "preemptions_total", "value": 3.0,
                       "step": "r1", "labels": ""}
    assert [r["metric"] for r in rows] == ["preemptions_total", "running", "running", "preemptions_total"]


def test_finalize_merges_files_in_chunks_and_skips_a_torn_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sink_module, "_CHUNK_LINES", 3)
    sink = TelemetrySink(tmp_path / "telemetry.jsonl")
    for i in range(7):
        sink.write(float(i), "r1", [Point("server:a", "running", float(i))])
    sink.close()
    other = TelemetrySink(tmp_path / "telemetry-workers.jsonl")
    other.write(3.5, "r1", [Point("worker:w1", "worker_cpu", 0.25)])
    other.close()
    with open(tmp_path / "telemetry.jsonl", "a") as f:
        f.write('{"t": 8.0, "source": "worker:w1", "metric": "worker_cpu", "value": "high"}\n')  # wrong type
        f.write('{"t": 9.0, "source": "serv')  # a writer killed mid-line
    path = finalise_telemetry(tmp_path)
    table = pq.read_table(path)
    assert table.schema.equals(TELEMETRY_SCHEMA) and table.num_rows == 8
    frame = read_telemetry(tmp_path)
    assert frame["t"].is_monotonic_increasing and frame.loc[4, "source"] == "worker:w1"


def test_an_empty_run_still_gets_the_schema(tmp_path: Path) -> None:
    table = pq.read_table(finalise_telemetry(tmp_path))
    assert table.num_rows == 0 and table.schema.equals(TELEMETRY_SCHEMA)
    assert read_telemetry(tmp_path).empty


def test_the_sink_stops_once_the_free_space_falls_under_its_reserve(tmp_path: Path, capsys) -> None:
    """On a real tmpfs: lines go on while the free space (statvfs) stays above the reserve; the batch that
    finds it under stops the sink for good, says so once, and counts every sample it no longer writes
    (issue 44, item 5). Skipped where a tmpfs cannot be mounted (not root)."""
    import subprocess

    import pytest

    from llmload import diskfull

    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    diskfull.reset_dropped()
    try:
        free = diskfull.free_bytes(where)
        sink = TelemetrySink(where / "telemetry.jsonl", reserve_bytes=free - 64 * 2**10)
        batch = [Point("server:a", f"m{i}", float(i)) for i in range(100)]  # ~8 KB a batch
        written = [sink.write(float(t), "r1", batch) for t in range(40)]
        sink.close()
        stopped = written.index(0)
        assert 4 <= stopped <= 10 and all(n == 100 for n in written[:stopped]) and not any(written[stopped:])
        assert sink.stopped_at == float(stopped) and sink.lines == 100 * stopped
        assert len((where / "telemetry.jsonl").read_text().splitlines()) == 100 * stopped
        assert diskfull.free_bytes(where) > 32 * 2**10  # the rest is left to the records
        err = capsys.readouterr().err
        assert err.count("telemetry stops at") == 1 and "kept for finished records" in err
        assert f"{100 * (40 - stopped):,} sample(s) not written" in diskfull.dropped_said()
        assert "finished record(s) lost" in diskfull.dropped_said(records_lost=2)
    finally:
        diskfull.reset_dropped()
        subprocess.run(["umount", "-l", str(where)], check=False)
