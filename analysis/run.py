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
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from llmload.errors import ConfigError
from llmload.records import RECORD_SCHEMA

__all__ = ["LIST_BATCH_ROWS", "TELEMETRY_COLUMNS", "Run", "empty_records", "empty_telemetry", "load_run",
           "records_from_table"]

TELEMETRY_COLUMNS = ("t", "source", "metric", "value", "step", "labels")
#: rows per decoded batch of a list column (bounds the decoder's temporary memory)
LIST_BATCH_ROWS = 65_536


@dataclass
class Run:
    """A run directory's data: one row per request, the telemetry (long format), the plan, the manifest."""

    records: pd.DataFrame
    telemetry: pd.DataFrame
    plan: dict
    manifest: dict = field(default_factory=dict)
    path: Path | None = None
    #: why `telemetry.parquet` could not be read (the run is then analysed without telemetry); None if it was
    telemetry_error: str | None = None


def _arrow_lists(dtype: pa.DataType) -> pd.ArrowDtype | None:
    return pd.ArrowDtype(dtype) if pa.types.is_list(dtype) else None


def records_from_table(table: pa.Table) -> pd.DataFrame:
    """Records as a DataFrame: list columns Arrow-backed, every schema column present."""
    for name in RECORD_SCHEMA.names:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, RECORD_SCHEMA.field(name).type))
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


def load_run(run_dir: str | Path) -> Run:
    """Read `records.parquet`, `plan.json`, `telemetry.parquet` (optional), `manifest.json` (optional)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError("not a run directory", file=str(root))
    rec_path, plan_path = root / "records.parquet", root / "plan.json"
    if not rec_path.exists():
        raise ConfigError("no records.parquet in this run directory", file=str(rec_path))
    if not plan_path.exists():
        raise ConfigError("no plan.json in this run directory", file=str(plan_path))
    try:
        records = records_from_table(_read_records(rec_path))
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
