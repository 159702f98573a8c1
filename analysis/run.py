"""Reading a run directory (METRICS.md "The run directory") into frames: `load_run(path) -> Run`.

`records.parquet` is read with pyarrow; the per-event list columns (`token_times`, `token_counts`)
stay Arrow-backed (`pd.ArrowDtype`) so a million requests do not become a million numpy objects.
Missing files are allowed where a run can lack them: no telemetry (empty frame), no manifest ({}).
An unreadable `telemetry.parquet` (cut short by a full disk or a kill) is analysed as no telemetry, and
`Run.telemetry_error` says why (the callers print it as one line): the records are what a verdict needs.
Missing records or plan is a user mistake and raises `ConfigError` naming the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmload.errors import ConfigError
from llmload.records import RECORD_SCHEMA

__all__ = ["KEPT_ONLY_COLUMNS", "LIST_BATCH_ROWS", "TELEMETRY_COLUMNS", "UNREAD_COLUMNS", "FrameRecords", "ParquetRecords", "RecordSource", "Run",
           "empty_records", "empty_telemetry", "load_run", "records_from_table"]

TELEMETRY_COLUMNS = ("t", "source", "metric", "value", "step", "labels")
#: rows per decoded batch of a list column (bounds the decoder's temporary memory: a million requests'
#: event times read with 16k rows a batch peak at a third of the memory of 64k, and page faults, the
#: system time, drop tenfold)
LIST_BATCH_ROWS = 16_384
#: bytes the Parquet reader reads of a column chunk at a time (not a row group's whole chunk at once)
READ_BUFFER_BYTES = 1 << 20
#: the per-event list columns of the records
LIST_COLUMNS = ("token_times", "token_counts")
#: record columns no step's figures read (`derive_requests`, `step_metrics`, `request_figures`,
#: `PromptCounts`, the instance rows; the master's `judge_step` too): a step's records are read without them
UNREAD_COLUMNS = ("error", "http_status", "api", "finish_reason", "cold", "dequeued_at", "retries", "quality_checked",
                  "reported_output_tokens", "server_load_s", "server_decode_s", "server_total_s", "session_id",
                  "tool_call_tokens")
#: record columns only the analysis' kept `RUN_COLUMNS` / `OPTIONAL_COLUMNS` read (`analysis.pipeline`)
KEPT_ONLY_COLUMNS = ("request_id", "tokens_estimated", "turn", "cached_tokens")


class Run:
    """A run directory's data: the records (a frame in memory, or a `RecordSource` read a step at a time),
    the telemetry (long format), the plan, the manifest."""

    def __init__(self, records: pd.DataFrame | RecordSource, telemetry: pd.DataFrame, plan: dict,
                 manifest: dict | None = None, path: Path | None = None, telemetry_error: str | None = None) -> None:
        #: where the records come from, a step at a time (`analysis.pipeline.analyze` reads them so)
        self.source: RecordSource = (records if isinstance(records, RecordSource)
                                     else FrameRecords(records))
        self.telemetry = telemetry
        self.plan = plan
        self.manifest = manifest if manifest is not None else {}
        self.path = path
        #: why `telemetry.parquet` could not be read (the run is then analysed without telemetry); None if it was
        self.telemetry_error = telemetry_error

    @property
    def records(self) -> pd.DataFrame:
        """Every record as one frame (read whole on first use: the analysis itself reads a step at a time)."""
        return self.source.frame()


class RecordSource:
    """The records of a run, by step: `labels()` (each row's step), `rows(positions)` (those rows as a
    records frame, in file order), `column(name)` (one scalar column of every row), `total_events()`."""

    def groups(self) -> dict[str, np.ndarray]:
        """Row positions (ascending) per step label as text (rows with no step: "nan")."""
        raise NotImplementedError

    def rows(self, positions: np.ndarray) -> pd.DataFrame:
        raise NotImplementedError

    def rows_and_gaps(self, positions: np.ndarray, float32_above: float,
                      skip: tuple[str, ...] = ()) -> tuple[pd.DataFrame, Any]:
        """The rows at `positions` without their per-event lists, and the lists' `EventGaps`
        (`analysis.requests.event_gaps`, float32 above `float32_above` events). `skip`: columns its
        reader never reads (not read, absent from the frame)."""
        from analysis.requests import event_gaps

        records = self.rows(positions)
        gaps = event_gaps(records["token_times"], records.get("token_counts"), float32_above=float32_above)
        return records.drop(columns=[c for c in (*LIST_COLUMNS, *skip) if c in records]), gaps

    def scalar_rows(self, positions: np.ndarray) -> pd.DataFrame:
        """The rows at `positions` without their per-event lists (what `rows_and_gaps` gives, no gaps)."""
        records = self.rows(positions)
        return records.drop(columns=[c for c in LIST_COLUMNS if c in records])

    def column(self, name: str) -> pd.Series:
        raise NotImplementedError

    def done(self) -> None:
        """The step-by-step reads are over: what they kept for the next step is let go."""

    def total_events(self) -> int:
        raise NotImplementedError

    def frame(self) -> pd.DataFrame:
        raise NotImplementedError


class FrameRecords(RecordSource):
    """Records already in memory (a test's frame, `load_run(..., stepwise=False)`)."""

    def __init__(self, records: pd.DataFrame) -> None:
        self._frame = records.reset_index(drop=True)

    def groups(self) -> dict[str, np.ndarray]:
        if not len(self._frame):
            return {}
        if "step" not in self._frame:
            return {"nan": np.arange(len(self._frame))}
        groups = self._frame.groupby("step", sort=False, dropna=False).indices
        return {str(k): np.asarray(v) for k, v in groups.items()}

    def rows(self, positions: np.ndarray) -> pd.DataFrame:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and pos[-1] - pos[0] + 1 == pos.size:  # a contiguous run: a slice
            return self._frame.iloc[int(pos[0]):int(pos[-1]) + 1].reset_index(drop=True)
        return self._frame.iloc[pos].reset_index(drop=True)

    def column(self, name: str) -> pd.Series:
        return self._frame[name] if name in self._frame else pd.Series(np.nan, index=self._frame.index)

    def total_events(self) -> int:
        if "token_times" not in self._frame or not len(self._frame):
            return 0
        from analysis.requests import list_chunks

        chunks = list_chunks(self._frame["token_times"], pa.float64())
        return int(sum(pc.sum(pc.fill_null(pc.list_value_length(c), 0)).as_py() or 0 for c in chunks))

    def frame(self) -> pd.DataFrame:
        return self._frame


class ParquetRecords(RecordSource):
    """`records.parquet` read a step at a time: a step's rows are read (in batches of `LIST_BATCH_ROWS`
    rows, only from the row groups that hold them) when the analysis reaches it, and dropped after, so the
    memory is a step's, not the run's. Only the `step` column is read whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # pre_buffer off: with it, the reader keeps every row group's bytes it read until the file is done
        # (a run's whole file by the last step)
        self._file = pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
        #: per set of columns read (None: all): (first row of `batch`, the batch read and not yet used up,
        #: the batch iterator) of the last read
        self._cursors: dict[tuple[str, ...] | None, tuple[int, Any, Any]] = {}
        self._starts = np.concatenate([[0], np.cumsum([self._file.metadata.row_group(i).num_rows
                                                       for i in range(self._file.num_row_groups)])])
        self._row_group_starts = {int(v) for v in self._starts}
        #: the last step's gap buffer, reused by the next step's gaps once nothing reads it (no page of a
        #: step's hundreds of MB of gaps is first touched again at every step)
        self._spare: np.ndarray | None = None

    def done(self) -> None:
        self._spare = None

    def groups(self) -> dict[str, np.ndarray]:
        # read as a dictionary: one small code per row, not a Python string per row
        column = pq.ParquetFile(self.path, read_dictionary=["step"]).read(columns=["step"], use_threads=False)
        chunks = column.column("step").chunks
        if not chunks:
            return {}
        steps = pa.chunked_array(chunks).unify_dictionaries() if len(chunks) > 1 else pa.chunked_array(chunks)
        codes = np.concatenate([c.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
                                for c in steps.chunks])
        names = [str(v) for v in steps.chunks[0].dictionary.to_pylist()] + ["nan"]
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(-1, len(names)))
        out = {}
        for code in range(-1, len(names) - 1):
            rows = order[bounds[code + 1]:bounds[code + 2]]
            if rows.size:
                out[names[code]] = rows
        return out

    def rows(self, positions: np.ndarray) -> pd.DataFrame:
        """The rows at `positions` (ascending). Read on from where the last call stopped when they come
        after it (steps in file order: the file is decoded once), else from their first row group."""
        table = pa.Table.from_batches(list(self._batches(positions)), schema=self._file.schema_arrow)
        frame = records_from_table(table)
        del table
        pa.default_memory_pool().release_unused()
        return frame

    def rows_and_gaps(self, positions: np.ndarray, float32_above: float,
                      skip: tuple[str, ...] = ()) -> tuple[pd.DataFrame, Any]:
        """`RecordSource.rows_and_gaps`, the gaps made batch by batch as the rows are read: a step's event
        times are never all in memory, only their gaps. The `skip` columns are not read."""
        from analysis.requests import EventGaps, event_gaps

        schema = self._file.schema_arrow
        if skip:
            schema = pa.schema([f for f in schema if f.name not in skip])
        lists = [name for name in LIST_COLUMNS if name in schema.names]
        scalars, token, offsets, counted = [], [], [np.array([0], dtype=np.int64)], 0
        # the gaps are written where they are joined; into the last step's buffer when nothing reads it now
        spare, self._spare = self._spare, None
        chunk = _Joined(self._events_at_most(positions), spare if sys.getrefcount(spare) <= 2 else None)
        del spare
        any_token = False
        for batch in self._batches(positions, tuple(schema.names) if skip else None):
            gaps = event_gaps(batch.column("token_times"), batch.column("token_counts")
                              if "token_counts" in lists else None, float32_above=float32_above, out=chunk.reserve)
            token.append(gaps.token)
            any_token |= gaps.token is not None
            offsets.append(gaps.offsets[1:] + counted)
            counted += int(gaps.offsets[-1])
            scalars.append(batch.drop_columns(lists))
        dtype = np.float32 if counted > float32_above else np.float64
        gaps = EventGaps(chunk.array(dtype), np.concatenate(offsets),
                         (np.concatenate([t if t is not None else np.full(n, np.nan, dtype=d)
                                          for t, n, d in zip(token, chunk.sizes, chunk.dtypes, strict=True)])
                          if any_token else None))
        self._spare = chunk.buffer
        del chunk, token
        table = pa.Table.from_batches(scalars, schema=pa.schema([f for f in schema if f.name not in lists]))
        del scalars
        frame = records_from_table(table, (*skip, *LIST_COLUMNS), consume=True)  # the lists: read as gaps
        del table
        pa.default_memory_pool().release_unused()
        return frame, gaps

    def _events_at_most(self, positions: np.ndarray) -> int:
        """The events (`token_times` values) of the row groups that hold `positions`, from the file's
        statistics: what a step's gaps take at most, but for NaN event times (0 when not known)."""
        pos = np.asarray(positions, dtype=np.int64)
        meta = self._file.metadata
        leaves = [i for i in range(meta.num_columns) if meta.schema.column(i).path.startswith("token_times.")]
        if not pos.size or len(leaves) != 1:
            return 0
        first, last = (int(np.searchsorted(self._starts, p, side="right") - 1) for p in (pos[0], pos[-1]))
        total = 0
        for i in range(first, last + 1):
            stats = meta.row_group(i).column(leaves[0]).statistics
            if stats is None:
                return 0
            total += stats.num_values
        return int(total)

    def scalar_rows(self, positions: np.ndarray) -> pd.DataFrame:
        """`RecordSource.scalar_rows`: the list columns are not read."""
        names = [name for name in self._file.schema_arrow.names if name not in LIST_COLUMNS]
        schema = pa.schema([self._file.schema_arrow.field(name) for name in names])
        table = pa.Table.from_batches(list(self._batches(positions, tuple(names))), schema=schema)
        frame = records_from_table(table, LIST_COLUMNS)
        del table
        pa.default_memory_pool().release_unused()
        return frame

    def _batches(self, positions: np.ndarray, columns: tuple[str, ...] | None = None) -> Any:
        pos = np.asarray(positions, dtype=np.int64)
        if not pos.size:
            return
        cursor = self._cursors.get(columns)
        if cursor is None or pos[0] < cursor[0]:
            first = int(np.searchsorted(self._starts, pos[0], side="right") - 1)
            batches = self._file.iter_batches(batch_size=LIST_BATCH_ROWS, row_groups=list(range(
                first, self._file.num_row_groups)), columns=list(columns) if columns is not None else None,
                use_threads=False)
            cursor = (int(self._starts[first]), None, batches)
        at, batch, batches = cursor
        while True:
            if batch is None:
                batch = next(batches, None)
                if batch is None:
                    break
            n = batch.num_rows
            lo, hi = np.searchsorted(pos, [at, at + n])
            if hi > lo:  # a step's rows are a contiguous run: a slice, not a copy
                contiguous = pos[hi - 1] - pos[lo] == hi - lo - 1
                yield (batch.slice(int(pos[lo] - at), int(hi - lo)) if contiguous
                       else batch.take(pa.array(pos[lo:hi] - at)))
            if at + n > pos[-1] + 1:  # the batch holds rows of what comes next: kept for the next call
                break
            at, batch = at + n, None
            if at > pos[-1]:
                break
        if batch is None and at in self._row_group_starts:
            # the next row opens a row group: the reader (and its buffers) is let go, and the next read
            # starts a new one there, decoding nothing twice
            self._cursors.pop(columns, None)
        else:
            self._cursors[columns] = (at, batch, batches)

    def column(self, name: str) -> pd.Series:
        if name not in self._file.schema_arrow.names:
            return pd.Series(np.nan, index=range(self._file.metadata.num_rows))
        return self._file.read(columns=[name], use_threads=False).column(name).to_pandas()

    def total_events(self) -> int:
        """Events of every request, from the file's statistics (the `token_times` values that are not null;
        a NaN event time, stored as a null inside its list, is not counted); read when there are none."""
        names = self._file.schema_arrow.names
        if "token_times" not in names:
            return 0
        meta, total = self._file.metadata, 0
        leaves = [i for i in range(meta.num_columns) if meta.schema.column(i).path.startswith("token_times.")]
        if len(leaves) != 1:
            return self._count_events()
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(leaves[0]).statistics
            if stats is None:
                return self._count_events()
            total += stats.num_values
        return int(total)

    def _count_events(self) -> int:
        total = 0
        for batch in self._file.iter_batches(batch_size=LIST_BATCH_ROWS, columns=["token_times"], use_threads=False):
            total += pc.sum(pc.fill_null(pc.list_value_length(batch.column(0)), 0)).as_py() or 0
        return int(total)

    def frame(self) -> pd.DataFrame:
        return records_from_table(_read_records(self.path))


class _Joined:
    """Arrays joined as they come into one buffer sized ahead (`capacity`: a bound on their total), so
    the joined array is not a second copy of its parts; past the bound it grows (a copy). Pages of the
    buffer never written are never touched, so a loose bound costs no memory. `spare`: a buffer to
    use (overwritten) when it is large enough and of the parts' dtype. `reserve(n, dtype)` gives the
    place the next part is written to (`add` copies one there)."""

    def __init__(self, capacity: int, spare: np.ndarray | None = None) -> None:
        self.capacity = capacity
        self.spare = spare
        self.buffer: np.ndarray | None = None
        self.size = 0
        self.parts: list[np.ndarray] | None = None  # arrays of another dtype came: joined as they are
        self.sizes: list[int] = []
        self.dtypes: list[np.dtype] = []

    def add(self, values: np.ndarray) -> None:
        self.reserve(values.size, values.dtype)[:] = values

    def reserve(self, size: int, dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        self.sizes.append(size)
        self.dtypes.append(dtype)
        if self.parts is None and self.buffer is not None and dtype != self.buffer.dtype:
            self.parts, self.buffer = [self.buffer[:self.size]], None
        if self.parts is not None:
            self.parts.append(np.empty(size, dtype=dtype))
            return self.parts[-1]
        if self.buffer is None:
            need = max(self.capacity, size)
            spare, self.spare = self.spare, None
            self.buffer = spare if spare is not None and spare.dtype == dtype and spare.size >= need else \
                np.empty(need, dtype=dtype)
        elif self.size + size > self.buffer.size:
            grown = np.empty(max(2 * self.buffer.size, self.size + size), dtype=dtype)
            grown[:self.size] = self.buffer[:self.size]
            self.buffer = grown
        self.size += size
        return self.buffer[self.size - size:self.size]

    def array(self, dtype: type) -> np.ndarray:
        """The joined array (`dtype` when nothing came)."""
        if self.parts is not None:
            return np.concatenate(self.parts)
        return self.buffer[:self.size] if self.buffer is not None else np.array([], dtype=dtype)


def _arrow_lists(dtype: pa.DataType) -> pd.ArrowDtype | None:
    return pd.ArrowDtype(dtype) if pa.types.is_list(dtype) else None


def records_from_table(table: pa.Table, skip: tuple[str, ...] = (), *, consume: bool = False) -> pd.DataFrame:
    """Records as a DataFrame: list columns Arrow-backed, every schema column present but those in `skip`.
    `consume`: the caller lets `table` go: each column's Arrow memory is freed as it is converted, and
    the columns are not joined into 2-D blocks (a step's records are then never in memory twice)."""
    present = set(table.column_names)
    for name in RECORD_SCHEMA.names:
        if name not in present and name not in skip:
            table = table.append_column(name, pa.nulls(table.num_rows, RECORD_SCHEMA.field(name).type))
    if consume:
        return table.to_pandas(types_mapper=_arrow_lists, split_blocks=True, self_destruct=True)
    return table.to_pandas(types_mapper=_arrow_lists)


def empty_records() -> pd.DataFrame:
    """A records frame with the schema and no rows."""
    return records_from_table(RECORD_SCHEMA.empty_table())


def empty_telemetry() -> pd.DataFrame:
    """A telemetry frame with the long-format columns and no rows."""
    return pd.DataFrame({"t": pd.Series(dtype=float), "source": pd.Series(dtype=str),
                         "metric": pd.Series(dtype=str), "value": pd.Series(dtype=float),
                         "step": pd.Series(dtype=str), "labels": pd.Series(dtype=str)})


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object", file=str(path), line=1)
    return data


def _read_records(path: Path) -> pa.Table:
    """The records table. List columns are decoded in batches: decoding a million requests' event
    times in one piece takes about four times their size in temporary memory."""
    source = pq.ParquetFile(path)
    names = source.schema_arrow.names
    lists = [n for n in names if pa.types.is_list(source.schema_arrow.field(n).type)]
    table = source.read(columns=[n for n in names if n not in lists], use_threads=False)
    for name in lists:
        batches = [b.column(0) for b in source.iter_batches(batch_size=LIST_BATCH_ROWS, columns=[name],
                                                            use_threads=False)]
        column = pa.chunked_array(batches, type=source.schema_arrow.field(name).type)
        table = table.append_column(source.schema_arrow.field(name), column)
    table = table.select(names)
    pa.default_memory_pool().release_unused()  # give the decoder's temporary buffers back to the OS
    return table


def load_run(run_dir: str | Path, *, stepwise: bool = True) -> Run:
    """Read `records.parquet`, `plan.json`, `telemetry.parquet` (optional), `manifest.json` (optional).
    `stepwise` (the default): the records stay on disk and are read a step at a time (`ParquetRecords`);
    else they are read whole now."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError("not a run directory", file=str(root))
    rec_path, plan_path = root / "records.parquet", root / "plan.json"
    if not rec_path.exists():
        raise ConfigError("no records.parquet in this run directory", file=str(rec_path))
    if not plan_path.exists():
        raise ConfigError("no plan.json in this run directory", file=str(plan_path))
    try:
        records: pd.DataFrame | RecordSource = (ParquetRecords(rec_path) if stepwise
                                                else records_from_table(_read_records(rec_path)))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"unreadable Parquet: {exc}", file=str(rec_path)) from None
    plan = _read_json(plan_path)
    if not isinstance(plan.get("steps"), list):
        raise ConfigError("expected a list under the key steps", file=str(plan_path), key="steps")
    tel_path = root / "telemetry.parquet"
    telemetry, telemetry_error = empty_telemetry(), None
    if tel_path.exists():
        try:
            telemetry = pd.read_parquet(tel_path)
        except (pa.ArrowException, OSError, ValueError) as exc:  # cut short: analyse without telemetry
            telemetry_error = f"{tel_path} unreadable ({type(exc).__name__}: {exc}): analysed without telemetry"
    man_path = root / "manifest.json"
    manifest = _read_json(man_path) if man_path.exists() else {}
    return Run(records=records, telemetry=telemetry, plan=plan, manifest=manifest, path=root,
               telemetry_error=telemetry_error)
