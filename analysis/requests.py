"""Per-request derived quantities (METRICS.md "Per request", "Derived") and per-event gaps.

`derive_requests(records, windows, slo)` adds, without touching the input frame (TTFT, TPOT and E2E
from `llmload.latency.latencies`, the one definition the live table and Locust events use too):

- `ttft_s = first_token_at - sent_at`, `user_ttft_s = first_token_at - scheduled_at`
- `e2e_s = last_token_at - sent_at`, `user_e2e_s = last_token_at - scheduled_at`
- `tpot_s = (e2e_s - ttft_s) / (output_tokens - 1)` only for `output_tokens >= 2` (else NaN: a 1-token
  answer has no TPOT and is never entered as 0)
- `ttfa_s = first_answer_at - sent_at`, `user_ttfa_s = first_answer_at - scheduled_at` (time to the
  first answer token; NaN where no answer came or records predate `first_answer_at`)
- `answer_tokens = output_tokens - reasoning_tokens`; `reasoning_rate = reasoning_tokens /
  (first_answer_at - first_token_at)` and `answer_rate = (answer_tokens - 1) / (last_token_at -
  first_answer_at)`, tokens per second of each phase (NaN where a phase had no length)
- `client_wait_s = sent_at - scheduled_at`; `send_lag_s` the same but only where `capped` is False
  (a capped arrival waited for a free slot: that is client wait, not generator lateness)
- `end_at`: when the request stopped being in flight (closed_at, else last token, else first token,
  else sent_at), for the time-averaged in-flight count
- `in_window`: `scheduled_at` inside its step's measurement window `[window_start, window_end)`
- `finished`: outcome `ok` or `quality_fail` (the answer streamed to its end: a latency sample)
- `usage_mismatched`: a finished request whose usage disagrees with what was asked (METRICS.md "Usage
  mismatch"): `output_tokens` over `OUTPUT_OVER_FACTOR` times `planned_output_tokens` (the `max_tokens`
  sent), `input_tokens` under half or over `INPUT_OVER_FACTOR` times plus `INPUT_SLACK_TOKENS` the
  planned input, or a server count the client did not believe (the record's `usage_mismatch`)
- `good`: outcome `ok`, in its window, and every per-request SLO threshold met. A threshold whose
  per-request value is NaN (no TPOT for a 1-token answer, no per-request server queue) is not judged
  for that request; `itl` thresholds are step-level only (a request has many gaps).

`event_gaps(token_times, token_counts)` explodes the event times with numpy: chunk-level ITL (gaps
between consecutive output events of one request) and token-level ITL (a gap divided by the tokens of
the later event, only for requests whose events all carry a token count).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from llmload import slo as slo_dims
from llmload.config import SLO
from llmload.latency import latencies

__all__ = [
    "FINISHED",
    "FLOAT32_GAPS_ABOVE",
    "INPUT_OVER_FACTOR",
    "INPUT_SLACK_TOKENS",
    "OUTPUT_OVER_FACTOR",
    "TOLERANCE_S",
    "PER_REQUEST_COLUMNS",
    "EventGaps",
    "derive_requests",
    "event_gaps",
    "list_chunks",
    "meets_thresholds",
]

#: outcomes whose answer streamed to the end: their latencies are samples of the step's tail
FINISHED = ("ok", "quality_fail")

#: an answer over this many times its `max_tokens` was not the work asked (a counting difference, a last
#: empty event, is a token or two; a server that ignores `max_tokens` is many times over)
OUTPUT_OVER_FACTOR = 2.0
#: a prompt count over this many times the planned input plus `INPUT_SLACK_TOKENS` (a chat template's
#: own tokens), or under half of it, was not the prompt sent
INPUT_OVER_FACTOR = 2.0
INPUT_SLACK_TOKENS = 64

#: 1 ns: a value equal to its threshold must not fail by float rounding (declared in `llmload.slo`)
TOLERANCE_S = slo_dims.TOLERANCE_S

#: above this many output events, per-event gaps are stored as float32: resolution under 1 us for
#: gaps under 10 s (the float64 wall clock itself resolves ~0.2 us) at half the memory of float64;
#: smaller runs keep float64
FLOAT32_GAPS_ABOVE = 16_000_000

#: SLO metric -> per-request column it is judged on (`llmload.slo`; ITL is step-level only)
PER_REQUEST_COLUMNS = {d.name: d.request_column for d in slo_dims.LATENCY if d.request_column}


def _float(df: pd.DataFrame, name: str) -> np.ndarray:
    """Column `name` as float64 (NaN where missing or not a number; all NaN without the column), a new array."""
    if name not in df:
        return np.full(len(df), np.nan)
    column = df[name]
    if column.dtype == np.float64:  # already floats: no conversion (a step's few rows: pandas' cost was the call)
        return column.to_numpy(dtype=float, copy=True)
    return pd.to_numeric(column, errors="coerce").astype(float).to_numpy(copy=True)


def _flags(df: pd.DataFrame, name: str) -> np.ndarray:
    """Boolean column `name` (missing or null: False)."""
    if name not in df:
        return np.zeros(len(df), dtype=bool)
    return df[name].fillna(False).astype(bool).to_numpy()


def _filled(values: np.ndarray, *fallbacks: np.ndarray) -> np.ndarray:
    """`values` with each NaN taken from the first fallback that has a number there (`fillna` chained)."""
    out = values.copy()
    for fallback in fallbacks:
        gap = np.isnan(out)
        out[gap] = fallback[gap]
    return out


def derive_requests(records: pd.DataFrame, windows: dict[str, tuple[float, float]], slo: SLO) -> pd.DataFrame:
    """Records plus the derived columns above; `windows` maps a step label to its window. (Computed on
    NumPy arrays: a step of a few dozen requests paid pandas' cost per operation, not per row.)"""
    nan = np.nan
    sched, sent = _float(records, "scheduled_at"), _float(records, "sent_at")
    first, last = _float(records, "first_token_at"), _float(records, "last_token_at")
    out_tokens = _float(records, "output_tokens")
    outcome = records["outcome"].astype(str) if "outcome" in records else pd.Series("ok", index=records.index)
    ok = (outcome == "ok").to_numpy(dtype=bool)
    finished = outcome.isin(FINISHED).to_numpy(dtype=bool)
    capped = _flags(records, "capped")
    ttft, tpot, e2e = latencies(sent, first, last, out_tokens)
    wait = sent - sched
    end = _filled(_float(records, "closed_at"), last, first, sent)
    codes, labels = pd.factorize(records["step"].astype(str)) if "step" in records else (
        np.zeros(len(records), dtype=np.int64), pd.Index([""]))
    known = [windows.get(str(k), (np.nan, np.nan)) for k in labels]
    bounds = np.array(known or [(np.nan, np.nan)], dtype=float)
    w0, w1 = bounds[codes, 0], bounds[codes, 1]
    in_window = (sched >= w0) & (sched < w1)
    answer_at = _float(records, "first_answer_at")
    reasoning = _float(records, "reasoning_tokens")
    reasoning[np.isnan(reasoning)] = 0.0
    answer_tokens = out_tokens - reasoning
    with np.errstate(divide="ignore", invalid="ignore"):
        reasoning_span, answer_span = answer_at - first, last - answer_at
        reasoning_rate = np.where((reasoning > 0) & (reasoning_span > 0), reasoning / reasoning_span, nan)
        answer_rate = np.where((answer_tokens >= 2) & (answer_span > 0), (answer_tokens - 1) / answer_span, nan)
    new = pd.DataFrame(dict(
        ttft_s=ttft, user_ttft_s=first - sched, e2e_s=e2e, user_e2e_s=last - sched, tpot_s=tpot,
        client_wait_s=wait, send_lag_s=np.where(capped, nan, wait), end_at=end, in_window=in_window,
        finished=finished, server_queue_s=_float(records, "server_queue_s"),
        ttfa_s=answer_at - sent, user_ttfa_s=answer_at - sched, answer_tokens=answer_tokens,
        reasoning_rate=reasoning_rate, answer_rate=answer_rate,
        usage_mismatched=finished & _usage_off(records, out_tokens),
    ), index=records.index, copy=False)  # joined once (column by column fragments the frame), not copied
    derived = pd.concat([records.drop(columns=[c for c in new if c in records]), new], axis=1)
    return derived.assign(good=meets_thresholds(derived, slo).to_numpy(dtype=bool) & ok & in_window)


def _usage_off(records: pd.DataFrame, out_tokens: np.ndarray) -> np.ndarray:
    """Per record: its usage disagrees with the request (the module docstring's `usage_mismatched`)."""
    planned_out, planned_in = _float(records, "planned_output_tokens"), _float(records, "planned_input_tokens")
    in_tokens = _float(records, "input_tokens")
    over = (planned_out > 0) & (out_tokens > OUTPUT_OVER_FACTOR * planned_out)  # NaN compares False
    off_in = (planned_in > 0) & ((in_tokens > INPUT_OVER_FACTOR * planned_in + INPUT_SLACK_TOKENS)
                                 | (in_tokens < planned_in / 2))
    return over | off_in | _flags(records, "usage_mismatch")


def meets_thresholds(requests: pd.DataFrame, slo: SLO) -> pd.Series:
    """True where every per-request threshold is met (a NaN value is not judged)."""
    good = pd.Series(True, index=requests.index)
    for t in slo.thresholds:
        dim = slo_dims.by_name(t.metric)  # the registry, read at each call
        column = dim.request_column if dim is not None else None
        if column is None or column not in requests:
            continue
        value = requests[column]
        good &= value.isna() | (value <= t.value_s + TOLERANCE_S)
    return good


def list_chunks(column: pd.Series | pa.Array | pa.ChunkedArray,
                value_type: pa.DataType) -> list[pa.ListArray]:
    """A list column (Arrow-backed or Python lists) as Arrow list chunks of `value_type`, not copied
    when it already is one (a million requests' event times are not duplicated)."""
    if isinstance(column, pd.Series):
        if isinstance(column.dtype, pd.ArrowDtype):
            column = column.array.__arrow_array__()
        else:
            column = pa.array([v if v is not None and not _is_nan(v) else [] for v in column.tolist()],
                              type=pa.list_(value_type))
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    target = pa.list_(value_type)
    return [c if c.type == target else c.cast(target) for c in chunks]


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and value != value


def _lengths(chunks: list[pa.ListArray]) -> np.ndarray:
    parts = [pc.fill_null(pc.list_value_length(c), 0).to_numpy(zero_copy_only=False) for c in chunks]
    return np.concatenate(parts).astype(np.int64) if parts else np.array([], dtype=np.int64)


def _values(chunks: list[pa.ListArray]) -> np.ndarray:
    parts = [c.flatten().to_numpy(zero_copy_only=False) for c in chunks]
    return np.concatenate(parts) if parts else np.array([])


class EventGaps:
    """Inter-event gaps aligned with the flattened events of every request (`offsets[i]` is request
    i's first event). `chunk[j]` = event j's time minus the previous event's of the same request (NaN
    for a request's first event); `token[j]` = `chunk[j]` / tokens in event j where the request's
    events all carry a count, else NaN (None when no request has counts)."""

    __slots__ = ("chunk", "disposable", "offsets", "token")

    def __init__(self, chunk: np.ndarray, offsets: np.ndarray, token: np.ndarray | None) -> None:
        self.chunk, self.offsets, self.token = chunk, offsets, token
        #: nothing reads these gaps after one `select(..., consume=True)`: it may compact them in place
        self.disposable = False

    def select(self, rows: np.ndarray, *, finite: bool = False, consume: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(chunk gaps, token gaps) of the requests at positions `rows` (NaN where none; without the NaN
        when `finite`). Steps are contiguous runs of rows, so this touches only the events between the
        first and last row. `consume` (with `finite`, on `disposable` gaps): the selection is compacted in
        the gaps' own memory (no copy of a step's millions of gaps) and the gaps cannot be read again."""
        empty = np.array([], dtype=float)
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return empty, empty
        if rows.size > 1 and (np.diff(rows) < 0).any():
            rows = np.sort(rows)
        a, b = int(rows[0]), int(rows[-1]) + 1
        keep = np.zeros(b - a, dtype=bool)
        keep[rows - a] = True
        lo, hi = int(self.offsets[a]), int(self.offsets[b])
        if not finite:
            every = np.repeat(keep, np.diff(self.offsets[a:b + 1]))
            chunk = self.chunk[lo:hi][every]
            token = self.token[lo:hi][every] if self.token is not None else empty
            return chunk, token
        events = _EventMask(keep, self.offsets[a:b + 1] - lo)  # made a block at a time, not per event at once
        if consume and self.disposable:
            chunk = _finite(self.chunk[lo:hi], events, in_place=True)
            token = _finite(self.token[lo:hi], events, in_place=True) if self.token is not None else empty
            self.chunk = self.token = None  # type: ignore[assignment]
            return chunk, token
        return _finite(self.chunk[lo:hi], events), (_finite(self.token[lo:hi], events) if self.token is not None
                                                     else empty)


#: events masked at a time by `EventGaps.select(finite=True)` (its temporaries are a block's, not a step's)
SELECT_BLOCK = 1 << 22


class _EventMask:
    """Which events belong to the kept requests (`keep`, one per request; `offsets`: each request's first
    event and the end), given for a block of events at a time."""

    def __init__(self, keep: np.ndarray, offsets: np.ndarray) -> None:
        self.keep, self.offsets = keep, offsets
        self.count = int(np.diff(offsets)[keep].sum())  # the kept events

    def block(self, start: int, end: int) -> np.ndarray:
        """The mask of the events `[start, end)`."""
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1  # the request holding `start`
        last = int(np.searchsorted(self.offsets, end, side="left"))  # the requests starting before `end`
        lengths = (np.minimum(self.offsets[first + 1:last + 1], end) - np.maximum(self.offsets[first:last], start))
        return np.repeat(self.keep[first:last], np.maximum(lengths, 0))


def _finite(values: np.ndarray, events: _EventMask, *, in_place: bool = False) -> np.ndarray:
    """`values[events & ~isnan(values)]`, a block at a time into one array (`in_place`: into `values`'
    own memory, written only where it was already read)."""
    out = values if in_place else np.empty(events.count, dtype=values.dtype)
    n = 0
    for at in range(0, values.size, SELECT_BLOCK):
        block = values[at:at + SELECT_BLOCK]
        kept = block[events.block(at, at + block.size) & ~np.isnan(block)]
        out[n:n + kept.size] = kept
        n += kept.size
    return out[:n]


def event_gaps(token_times: pd.Series | pa.Array | pa.ChunkedArray,
               token_counts: pd.Series | pa.Array | pa.ChunkedArray | None = None, *,
               float32_above: float = FLOAT32_GAPS_ABOVE,
               out: Callable[[int, np.dtype], np.ndarray] | None = None) -> EventGaps:
    """Chunk-level and token-level inter-event gaps of every request, vectorised over all events
    (float32 when there are more than `float32_above` events). `out(size, dtype)`: where the chunk
    gaps are written (a joined buffer's next place), else a new array."""
    chunks = list_chunks(token_times, pa.float64())
    lengths = _lengths(chunks)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    dtype = np.float32 if offsets[-1] > float32_above else np.float64
    chunk = out(int(offsets[-1]), np.dtype(dtype)) if out is not None else np.empty(int(offsets[-1]), dtype=dtype)
    pos = 0
    for c in chunks:
        values = c.flatten().to_numpy(zero_copy_only=False)
        n = values.size
        if n:
            np.subtract(values[1:], values[:-1], out=chunk[pos + 1:pos + n])
            pos += n
    chunk[offsets[:-1][lengths > 0]] = np.nan
    token = None
    if token_counts is not None and len(lengths):
        counts = list_chunks(token_counts, pa.int64())
        aligned = (_lengths(counts) == lengths) & (lengths > 1)
        if aligned.any():
            arr = pa.chunked_array(counts, type=pa.list_(pa.int64())).filter(pa.array(aligned))
            per_event = _values(arr.chunks).astype(float)
            events = np.repeat(aligned, lengths)
            token = np.full(chunk.size, np.nan, dtype=dtype)
            with np.errstate(divide="ignore", invalid="ignore"):
                token[events] = np.where(per_event > 0, chunk[events] / per_event, np.nan)
    return EventGaps(chunk, offsets, token)
