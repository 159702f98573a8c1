"""The per-request record (METRICS.md "Per request") and how it reaches disk.

Each worker appends one JSON line per finished request to its own file and flushes it at once, so a
crashed worker or a killed run leaves every finished request on disk. At the end the files (and the
copies workers shipped to the master) are merged, de-duplicated by `request_id`, into
`records.parquet`.

Timestamps are wall-clock seconds from `llmload.clock.now()`; `None` where it did not happen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from math import isfinite
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # imported where used: a worker that only sends never loads pandas / pyarrow
    import pandas as pd

from llmload.redaction import redact_text

__all__ = [
    "OUTCOMES",
    "RECORD_SCHEMA",  # noqa: F822 (module __getattr__: built on first use)
    "Record",
    "RecordWriter",
    "merge_record_files",
    "merge_records",
    "read_record_files",
    "records_frame",
    "records_table",
    "row_json",
]

#: every outcome a request can have (METRICS.md; `client_error`: a failure inside llmload, never the server's)
OUTCOMES = ("ok", "rejected", "http_error", "timeout", "disconnect", "connect_error", "oom", "cancelled",
            "quality_fail", "client_error", "not_sent")


@dataclass(slots=True)
class Record:
    """One request, as the client saw it. Columns of `records.parquet`."""

    request_id: str
    step: str
    worker: str
    scheduled_at: float
    outcome: str = "not_sent"
    sent_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    closed_at: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_estimated: bool = False
    planned_input_tokens: int | None = None
    planned_output_tokens: int | None = None
    http_status: int | None = None
    error: str | None = None
    token_times: list[float] = field(default_factory=list)
    #: tokens carried by each output event, when the server says (continuous usage stats); else empty
    token_counts: list[int] = field(default_factory=list)
    #: True when the request waited for a free slot under the client concurrency cap
    capped: bool = False
    #: when a user took the arrival off the queue (client wait = sent_at - scheduled_at)
    dequeued_at: float | None = None
    instance: str | None = None
    api: str | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None
    prefix_id: int | None = None
    cold: bool | None = None
    #: server-reported timings in seconds (Ollama durations, llama.cpp `timings`), None where not given
    server_load_s: float | None = None
    server_prompt_s: float | None = None
    server_decode_s: float | None = None
    server_total_s: float | None = None
    #: Ollama: total - load - prompt_eval - eval (METRICS.md server queue)
    server_queue_s: float | None = None
    quality_checked: bool = False

    def as_dict(self) -> dict:
        """The fields as a shallow dict (lists shared, not copied: `asdict` deep-copies every float of
        `token_times`, ~0.1 ms per request on the hot path)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    def to_json(self) -> str:
        """One compact JSON line. orjson (~8 us for a 32-token record against ~50 us for `json`); a
        non-finite float, which orjson would write as null, goes through `json` and raises instead."""
        return row_json(self.as_dict())


def row_json(data: dict) -> str:
    """A record's fields (`Record.as_dict`, or a shipped summary unpacked) as one compact JSON line
    (`Record.to_json`)."""
    for value in data.values():
        if (type(value) is float and not isfinite(value)) or (
                type(value) is list and value and type(value[0]) is float and not isfinite(sum(value))):
            return json.dumps(data, separators=(",", ":"), allow_nan=False, default=_jsonable)
    return orjson.dumps(data, default=_jsonable).decode()


_FIELD_NAMES = tuple(f.name for f in fields(Record))


def _jsonable(value: object) -> object:
    raise TypeError(f"not JSON-serialisable in a record: {type(value).__name__}")


def _record_schema() -> Any:
    """The Arrow schema of `records.parquet` (built on first use: pyarrow is heavy to import)."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        types = {
            "request_id": pa.string(), "step": pa.string(), "worker": pa.string(), "scheduled_at": pa.float64(),
            "outcome": pa.string(), "sent_at": pa.float64(), "first_token_at": pa.float64(),
            "last_token_at": pa.float64(), "closed_at": pa.float64(), "input_tokens": pa.int64(),
            "output_tokens": pa.int64(), "tokens_estimated": pa.bool_(), "planned_input_tokens": pa.int64(),
            "planned_output_tokens": pa.int64(), "http_status": pa.int64(), "error": pa.string(),
            "token_times": pa.list_(pa.float64()), "token_counts": pa.list_(pa.int64()), "capped": pa.bool_(),
            "dequeued_at": pa.float64(), "instance": pa.string(), "api": pa.string(),
            "finish_reason": pa.string(), "cached_tokens": pa.int64(), "prefix_id": pa.int64(),
            "cold": pa.bool_(), "server_load_s": pa.float64(), "server_prompt_s": pa.float64(),
            "server_decode_s": pa.float64(), "server_total_s": pa.float64(), "server_queue_s": pa.float64(),
            "quality_checked": pa.bool_(),
        }
        _SCHEMA = pa.schema([(f.name, types[f.name]) for f in fields(Record)])
    return _SCHEMA


_SCHEMA: Any = None


def __getattr__(name: str) -> Any:
    if name == "RECORD_SCHEMA":  # `from llmload.records import RECORD_SCHEMA` still works
        return _record_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RecordWriter:
    """Appends records as JSON lines to one file, flushing after each so nothing finished is lost."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._fsync = fsync
        self.count = 0

    def write(self, record: Record) -> None:
        self._file.write(redact_text(record.to_json()) + "\n")  # a server may echo the key anywhere
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_record_files(paths: Iterable[str | Path]) -> list[dict]:
    """Rows from JSON-lines record files. A torn last line (a killed writer) is skipped."""
    rows: list[dict] = []
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(orjson.loads(line))  # ~5x json's speed: most of the merge's CPU
                except orjson.JSONDecodeError:
                    try:  # what orjson refuses and json reads (NaN, integers over 64 bits)
                        rows.append(json.loads(line))
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        continue
    return rows


def _keep_rows(keys: pd.DataFrame) -> list[int] | None:
    """Positions of the rows to keep, in their output order (None: keep all as they are).

    A record shipped to the master and also kept in the worker's file appears twice: keep one,
    preferring the most finished version (a later outcome over not_sent), the last copy among equals;
    then order by `scheduled_at` (ties by `request_id`). Works on the three key columns only, so the
    per-event lists are moved once, by Arrow, instead of through pandas and back.
    """
    if not len(keys):
        return None
    return (keys.assign(_rank=(keys["outcome"] != "not_sent").astype(int), _row=range(len(keys)))
                .sort_values(["request_id", "_rank"], kind="stable")
                .drop_duplicates("request_id", keep="last")
                .sort_values("scheduled_at", kind="stable")["_row"].tolist())


def _nan_as_null(table: Any) -> Any:
    """NaN (a line `json` read: `Record.to_json` never writes one) as null, in float columns and in the
    event-time lists, as the merge through pandas always stored it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, f in enumerate(table.schema):
        floats = pa.types.is_floating(f.type)
        if not floats and not (pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)):
            continue
        chunks = []
        for chunk in table.column(i).chunks:
            values = chunk if floats else chunk.values.slice(chunk.offsets[0].as_py(),
                                                             (chunk.offsets[-1] - chunk.offsets[0]).as_py())
            if not pc.any(pc.is_nan(values)).as_py():
                chunks.append(chunk)
                continue
            values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
            if not floats:
                offsets = pc.subtract(chunk.offsets, chunk.offsets[0])
                values = pa.ListArray.from_arrays(offsets, values, type=f.type, mask=chunk.is_null())
            chunks.append(values)
        table = table.set_column(i, f, pa.chunked_array(chunks, type=f.type))
    return table


def records_table(rows: Iterable[dict]) -> Any:
    """A `pyarrow.Table` with the record schema (missing keys become nulls), one row per request_id."""
    import pyarrow as pa

    table = _nan_as_null(pa.Table.from_pylist(list(rows), schema=_record_schema()))
    keep = _keep_rows(table.select(["request_id", "outcome", "scheduled_at"]).to_pandas())
    return table if keep is None else table.take(keep)


def records_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """A DataFrame with the record schema (missing keys become nulls), one row per request_id."""
    return records_table(rows).to_pandas()


def _merge(sources: Iterable[str | Path], out: str | Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = records_table(read_record_files(sources))
    # dictionary encoding for the text columns only: on the times, all different, it cost 40% of the
    # write's CPU and made the file 8% bigger
    pq.write_table(table, out, use_dictionary=[f.name for f in table.schema if pa.types.is_string(f.type)])
    return table


def merge_record_files(sources: Iterable[str | Path], out: str | Path) -> int:
    """Merge JSON-lines record files into one Parquet file with the record schema; returns its rows."""
    return _merge(sources, out).num_rows


def merge_records(sources: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    """`merge_record_files`, returning the merged records as a DataFrame."""
    return _merge(sources, out).to_pandas()
