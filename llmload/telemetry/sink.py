"""Where telemetry samples go: `run_dir/telemetry.jsonl` as they come, then `telemetry.parquet`.

Each line is one value: `{"t", "source", "metric", "value", "step", "labels"}` with `t` from
`llmload.clock.now()` (the records' wall-clock base) and `step` the label current when it was taken.
Lines are flushed per batch, so a killed run keeps what it sampled, and memory stays bounded in a
multi-hour soak: only the last value of each series is held, to skip repeats.

Repeats: a point marked `always=False` (raw server series, counters, histogram buckets) is written only
when its value changed since it was last written for that series, or after the source had a gap. The
"last sample at or before t" of such a series is still exact, which is all counters and histograms need;
gauges the analysis averages (`running`, `waiting`, `kv_usage`, GPU memory) are written every sample.

Space: finished records outrank telemetry. Before each batch the sink checks the free space under its
folder (`llmload.diskfull.free_bytes`); under `reserve_bytes` it stops for the rest of the run, says so
once, and counts the samples it no longer writes (`llmload.diskfull.dropped_said`, the closing line).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from llmload.diskfull import free_bytes, telemetry_dropped, telemetry_stopped
from llmload.redaction import redact_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TELEMETRY_SCHEMA",
    "Point",
    "TelemetrySink",
    "finalise_telemetry",
    "read_telemetry",
    "telemetry_frame",
]


if TYPE_CHECKING:
    #: the Parquet schema (a `pyarrow.Schema`), made on first use through the module's `__getattr__`
    TELEMETRY_SCHEMA: Any

_built_schema: Any = None


def _schema() -> Any:
    """`TELEMETRY_SCHEMA`, built on first use: writing samples needs no pyarrow / pandas (the master
    starts the collector before the first arrival); the Parquet file and the frames do."""
    global _built_schema
    if _built_schema is None:
        import pyarrow as pa

        _built_schema = pa.schema([
            ("t", pa.float64()), ("source", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
            ("step", pa.string()), ("labels", pa.string()),
        ])
    return _built_schema


def __getattr__(name: str) -> Any:
    if name == "TELEMETRY_SCHEMA":
        return _schema()
    raise AttributeError(f"module 'llmload.telemetry.sink' has no attribute {name!r}")

_CHUNK_LINES = 200_000


class Point(NamedTuple):
    """One value from one poll; the collector stamps the time and the step."""

    source: str
    metric: str
    value: float
    labels: str = ""
    #: False: write only when the value changed (raw series, counters, histogram buckets)
    always: bool = True


class TelemetrySink:
    """Appends points as JSON lines, flushed per batch. Safe to call from several threads."""

    def __init__(self, path: str | Path, *, reserve_bytes: int | None = None) -> None:
        from llmload.diskfull import TELEMETRY_RESERVE_BYTES

        self.path = Path(path)
        #: free bytes under the folder below which this sink stops (records come first)
        self.reserve_bytes = TELEMETRY_RESERVE_BYTES if reserve_bytes is None else reserve_bytes
        #: when this sink stopped for want of space (epoch seconds), None while it writes
        self.stopped_at: float | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], float] = {}
        self.lines = 0

    def write(self, t: float, step: str | None, points: Iterable[Point]) -> int:
        """Write a batch taken at `t` during `step`; returns how many lines were written."""
        out: list[str] = []
        with self._lock:
            for p in points:
                value = float(p.value)
                if not math.isfinite(value):
                    continue
                if not p.always:
                    key = (p.source, p.metric, p.labels)
                    if self._last.get(key) == value:
                        continue
                    self._last[key] = value
                out.append(_line(t, step, p, value))
            if out and self.stopped_at is None and not self._file.closed:
                free = free_bytes(self.path.parent)
                if free is not None and free < self.reserve_bytes:
                    self._stop(t, free)
            if out and self.stopped_at is not None:
                telemetry_dropped(len(out))
                return 0
            if out and not self._file.closed:
                try:
                    self._file.write(redact_text("\n".join(out)) + "\n")  # a label may echo the API key
                    self._file.flush()
                except OSError:  # a full disk all the same (another writer): telemetry stops, the run goes on
                    self._stop(t, None)
                    telemetry_dropped(len(out))
                    return 0
                self.lines += len(out)
        return len(out)

    def _stop(self, t: float, free: int | None) -> None:
        """Stop writing for the rest of the run (space is short): close the file, dropping what its buffer
        still holds, and say so once per process."""
        self.stopped_at = t
        with contextlib.suppress(OSError):  # the close flushes the same buffer again
            self._file.close()
        telemetry_stopped(self.path, t, free=free, reserve=self.reserve_bytes)

    def forget(self, source: str) -> None:
        """After a gap, write every series of `source` again on its next sample."""
        with self._lock:
            for key in [k for k in self._last if k[0] == source]:
                del self._last[key]

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                try:
                    self._file.close()
                except OSError as exc:
                    from llmload.diskfull import warn_unwritable

                    warn_unwritable(self.path, exc, "the last telemetry lines are lost")


def _line(t: float, step: str | None, p: Point, value: float) -> str:
    """The line `json.dumps` makes of `{"t", "source", "metric", "value", "step", "labels"}` (separators `,`
    and `:`), put together from the same pieces (`float.__repr__`, json's own string encoder) where every
    value is a plain float, str or None: a third of the CPU of building and encoding the dict, the same text.
    (`value` is a finite float here.)"""
    source, metric, labels = p.source, p.metric, p.labels
    if (type(t) is float and math.isfinite(t) and type(source) is str and type(metric) is str
            and (step is None or type(step) is str) and (labels is None or type(labels) is str)):
        return ('{"t":' + repr(t) + ',"source":' + _json_str(source) + ',"metric":' + _json_str(metric)
                + ',"value":' + repr(value) + ',"step":' + ("null" if step is None else _json_str(step))
                + ',"labels":' + ("null" if labels is None else _json_str(labels)) + "}")
    return json.dumps({"t": t, "source": source, "metric": metric, "value": value, "step": step, "labels": labels},
                      separators=(",", ":"))


#: the string encoder `json.dumps` uses (ensure_ascii, its default)
_json_str = json.encoder.encode_basestring_ascii


def _valid(row: object) -> bool:
    """A line another writer got wrong (no time, a text value) is skipped rather than failing the file."""
    return (isinstance(row, dict) and isinstance(row.get("t"), (int, float))
            and isinstance(row.get("value"), (int, float)) and not isinstance(row.get("value"), bool)
            and isinstance(row.get("source"), str) and isinstance(row.get("metric"), str)
            and isinstance(row.get("step"), (str, type(None))) and isinstance(row.get("labels"), (str, type(None))))


def _rows(path: Path) -> Iterable[list[dict]]:
    """Chunks of parsed lines; a torn last line (a killed writer) or an invalid line is skipped."""
    chunk: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if _valid(row):
                chunk.append(row)
            if len(chunk) >= _CHUNK_LINES:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _jsonl_files(run_dir: Path) -> list[Path]:
    """`telemetry.jsonl` plus any `telemetry-<name>.jsonl` other writers (worker CPU) add."""
    return sorted(p for p in run_dir.glob("telemetry*.jsonl") if p.is_file())


def finalise_telemetry(run_dir: str | Path) -> Path:
    """Write `run_dir/telemetry.parquet` from the JSON-lines files, chunk by chunk (bounded memory).

    An empty run still gets a file with the schema. Returns the Parquet path.
    """
    run_dir = Path(run_dir)
    out = run_dir / "telemetry.parquet"
    tmp = out.with_suffix(".parquet.tmp")
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema()
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for path in _jsonl_files(run_dir):
                for chunk in _rows(path):
                    writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)  # a write cut short (a full disk) leaves no partial file
    return out


def telemetry_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """A telemetry DataFrame (the parquet schema) from row dicts, sorted by time."""
    import pyarrow as pa

    df = pa.Table.from_pylist(list(rows), schema=_schema()).to_pandas()
    return df.sort_values("t", kind="stable").reset_index(drop=True)


def read_telemetry(run_dir: str | Path) -> pd.DataFrame:
    """`telemetry.parquet` if written, else the JSON-lines files (a run still going), sorted by `t`."""
    run_dir = Path(run_dir)
    parquet = run_dir / "telemetry.parquet"
    if parquet.exists():
        import pyarrow.parquet as pq

        df = pq.read_table(parquet, schema=_schema()).to_pandas()
        return df.sort_values("t", kind="stable").reset_index(drop=True)
    rows = [row for path in _jsonl_files(run_dir) for chunk in _rows(path) for row in chunk]
    return telemetry_frame(rows)
