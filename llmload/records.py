"""The per-request record (METRICS.md "Per request") and how it reaches disk.

Each worker appends one JSON line per finished request to its own file and flushes it at once, so a
crashed worker or a killed run leaves every finished request on disk. At the end the files (and the
copies workers shipped to the master) are merged, de-duplicated by `request_id`, into
`records.parquet`. A value of the wrong type in a record file (a hand-edited or foreign line, a count
over 64 bits) becomes null in its column rather than failing the merge (`records_table`).

Timestamps are wall-clock seconds from `llmload.clock.now()`; `None` where it did not happen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
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
    "ROW_GROUP_ROWS",
    "RecordWriter",
    "TABLE_CHUNK_ROWS",
    "iter_record_files",
    "merge_record_files",
    "merge_records",
    "read_record_files",
    "records_frame",
    "records_table",
    "row_json",
]

#: every outcome a request can have (METRICS.md; `client_error`: a failure inside llmload, never the server's)
OUTCOMES = ("ok", "rejected", "http_error", "malformed", "timeout", "disconnect", "connect_error", "oom",
            "cancelled", "quality_fail", "client_error", "not_sent")


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
    #: the request was sent again this many times after its connection failed before the server could
    #: have read it (llmload.client.core `_post`)
    retries: int = 0
    #: the server's output token count disagreed with the output events seen: `output_tokens` is the
    #: events seen and the server's count is `reported_output_tokens` (METRICS.md)
    usage_mismatch: bool = False
    reported_output_tokens: int | None = None
    #: the first answer-bearing event (content, completion text, tool call; not reasoning only): TTFA
    first_answer_at: float | None = None
    #: reasoning tokens among `output_tokens` (0: the answer had none; None: unknown, no 200 stream)
    reasoning_tokens: int | None = None
    #: multi-turn sessions (`requests.sessions`): the session (its first turn's request_id) and the
    #: turn index from 0; None outside sessions
    session_id: str | None = None
    turn: int | None = None
    #: output tokens that were tool-call deltas (their arguments), counted as `reasoning_tokens` are
    tool_call_tokens: int | None = None

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

#: records converted to Arrow at a time (`records_table`): bounds the Python dicts held at once
TABLE_CHUNK_ROWS = 50_000
#: rows per row group of `records.parquet`: the analysis reads a step's rows group by group
ROW_GROUP_ROWS = 131_072


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
            "quality_checked": pa.bool_(), "retries": pa.int64(), "usage_mismatch": pa.bool_(),
            "reported_output_tokens": pa.int64(), "first_answer_at": pa.float64(), "reasoning_tokens": pa.int64(),
            "session_id": pa.string(), "turn": pa.int64(), "tool_call_tokens": pa.int64(),
        }
        _SCHEMA = pa.schema([(f.name, types[f.name]) for f in fields(Record)])
    return _SCHEMA


_SCHEMA: Any = None


def __getattr__(name: str) -> Any:
    if name == "RECORD_SCHEMA":  # `from llmload.records import RECORD_SCHEMA` still works
        return _record_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RecordWriter:
    """Appends records as JSON lines to one file, each written whole at once so nothing finished is lost.

    A line that cannot be written (a full disk) never raises: it is kept in `unwritten` (in memory, in
    order) and written before the next line once there is room again; the first failure in the process
    is one warning line (`llmload.diskfull`). A line cut short by the failure is ended by a newline
    before the next one, so readers skip it as a torn line.
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (raw: nothing held in a buffer)
        self._fsync = fsync
        self.count = 0
        #: lines not written yet (a full disk), oldest first
        self.unwritten: list[bytes] = []

    def write(self, record: Record) -> None:
        self._write_line(redact_text(record.to_json()))  # a server may echo the key anywhere

    def _write_line(self, text: str) -> None:
        from llmload.diskfull import append_all, warn_unwritable

        if self._file.closed:
            return
        lines = [*self.unwritten, text.encode("utf-8") + b"\n"]
        torn = b"\n" if self.unwritten else b""  # after a failure: end a line it may have cut short
        try:
            append_all(self._file.fileno(), torn + b"".join(lines))
            if self._fsync:
                os.fsync(self._file.fileno())
        except OSError as exc:
            self.unwritten = lines
            warn_unwritable(self.path, exc, "records are kept in memory and the run goes on; what is on disk "
                                            "is kept")
            return
        self.unwritten = []
        self.count += sum(line.count(b"\n") for line in lines)  # a shipped batch is one entry of many lines

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_record_files(paths: Iterable[str | Path]) -> Iterator[dict]:
    """Rows from JSON-lines record files, one at a time (a run's records need not fit in memory as dicts).
    A torn last line (a killed writer) is skipped."""
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = orjson.loads(line)  # ~5x json's speed: most of the merge's CPU
                except orjson.JSONDecodeError:
                    try:  # what orjson refuses and json reads (NaN, integers over 64 bits)
                        row = json.loads(line)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        continue
                if isinstance(row, dict):
                    yield row


def read_record_files(paths: Iterable[str | Path]) -> list[dict]:
    """Rows from JSON-lines record files. A torn last line (a killed writer) is skipped."""
    return list(iter_record_files(paths))


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


def _storable(rows: list[dict], schema: Any) -> list[dict]:
    """`rows` with every value the schema cannot hold (a count sent as a string, 2**70 tokens, a finish
    reason of 7) set to null, and the record's `error` naming the field: one bad field never loses the
    run's records. Used only when the whole table would not convert."""
    import pyarrow as pa

    bad_fields: dict[int, list[str]] = {}
    for column in schema:
        values = [row.get(column.name) for row in rows]
        try:
            pa.array(values, type=column.type)
            continue
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        for i, value in enumerate(values):
            try:
                pa.array([value], type=column.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                bad_fields.setdefault(i, []).append(column.name)
    out = []
    for i, row in enumerate(rows):
        names = bad_fields.get(i)
        if names:
            row = {**row, **dict.fromkeys(names)}
            note = f"unstorable value dropped: {', '.join(names)}"
            error = rows[i].get("error")
            row["error"] = f"{error}; {note}" if isinstance(error, str) and error and "error" not in names else note
        out.append(row)
    return out


def records_table(rows: Iterable[dict], skip: tuple[str, ...] = (), *, chunk_rows: int | None = None) -> Any:
    """A `pyarrow.Table` with the record schema (missing keys become nulls), one row per request_id.
    A value the schema cannot hold is dropped from its record (`_storable`), never the records. The rows
    are converted `TABLE_CHUNK_ROWS` at a time: a run's records never sit in memory as Python dicts all
    at once (`rows` may be a generator, `iter_record_files`), only as Arrow columns. `skip`: columns
    left out (their reader never reads them; `request_id`, `outcome` and `scheduled_at` are always kept).
    `chunk_rows`: rows converted at a time instead of `TABLE_CHUNK_ROWS` (the master's judge: fewer dicts)."""
    import pyarrow as pa

    schema = _record_schema()
    if skip:
        schema = pa.schema([f for f in schema if f.name not in skip or f.name in _KEY_COLUMNS])
    tables = []
    chunk: list[dict] = []
    for row in rows:
        if isinstance(row, dict):  # a line that is not an object holds no record
            chunk.append(row)
            if len(chunk) >= (chunk_rows or TABLE_CHUNK_ROWS):
                tables.append(_chunk_table(chunk, schema))
                chunk = []
    if chunk or not tables:
        tables.append(_chunk_table(chunk, schema))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    table = _nan_as_null(table)
    keep = _keep_rows(table.select(list(_KEY_COLUMNS)).to_pandas())
    return table if keep is None else table.take(keep)


#: what picks one row per request_id (`_keep_rows`)
_KEY_COLUMNS = ("request_id", "outcome", "scheduled_at")


def _chunk_table(rows: list[dict], schema: Any) -> Any:
    import pyarrow as pa

    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError):
        return pa.Table.from_pylist(_storable(rows, schema), schema=schema)


def records_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """A DataFrame with the record schema (missing keys become nulls), one row per request_id."""
    return records_table(rows).to_pandas()


def _merge(sources: Iterable[str | Path], out: str | Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = records_table(iter_record_files(sources))
    # dictionary encoding for the text columns only: on the times, all different, it cost 40% of the
    # write's CPU and made the file 8% bigger. Written aside and moved into place: a write cut short
    # (a full disk) never leaves a truncated records.parquet where the record files had every record
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    try:
        pq.write_table(table, tmp, use_dictionary=[f.name for f in table.schema if pa.types.is_string(f.type)],
                       row_group_size=ROW_GROUP_ROWS)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return table


def merge_record_files(sources: Iterable[str | Path], out: str | Path) -> int:
    """Merge JSON-lines record files into one Parquet file with the record schema; returns its rows."""
    return _merge(sources, out).num_rows


def merge_records(sources: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    """`merge_record_files`, returning the merged records as a DataFrame."""
    return _merge(sources, out).to_pandas()
