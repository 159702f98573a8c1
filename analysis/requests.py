"""Per-request derived quantities (METRICS.md "Per request", "Derived") and per-event gaps.

`derive_requests(records, windows, slo)` adds, without touching the input frame:

- `ttft_s = first_token_at - sent_at`, `user_ttft_s = first_token_at - scheduled_at`
- `e2e_s = last_token_at - sent_at`, `user_e2e_s = last_token_at - scheduled_at`
- `tpot_s = (e2e_s - ttft_s) / (output_tokens - 1)` only for `output_tokens >= 2` (else NaN: a 1-token
  answer has no TPOT and is never entered as 0)
- `client_wait_s = sent_at - scheduled_at`; `send_lag_s` the same but only where `capped` is False
  (a capped arrival waited for a free slot: that is client wait, not generator lateness)
- `end_at`: when the request stopped being in flight (closed_at, else last token, else first token,
  else sent_at), for the time-averaged in-flight count
- `in_window`: `scheduled_at` inside its step's measurement window `[window_start, window_end)`
- `finished`: outcome `ok` or `quality_fail` (the answer streamed to its end: a latency sample)
- `good`: outcome `ok`, in its window, and every per-request SLO threshold met. A threshold whose
  per-request value is NaN (no TPOT for a 1-token answer, no per-request server queue) is not judged
  for that request; `itl` thresholds are step-level only (a request has many gaps).

`event_gaps(token_times, token_counts)` explodes the event times with numpy: chunk-level ITL (gaps
between consecutive output events of one request) and token-level ITL (a gap divided by the tokens of
the later event, only for requests whose events all carry a token count).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from llmload.config import SLO

__all__ = [
    "FINISHED",
    "TOLERANCE_S",
    "PER_REQUEST_COLUMNS",
    "EventGaps",
    "derive_requests",
    "event_gaps",
    "list_array",
    "meets_thresholds",
]

#: outcomes whose answer streamed to the end: their latencies are samples of the step's tail
FINISHED = ("ok", "quality_fail")

#: 1 ns: differences of float wall-clock seconds carry rounding below the clock's resolution, so a
#: value equal to its threshold must not fail by 1e-16
TOLERANCE_S = 1e-9

#: SLO metric -> per-request column it is judged on
PER_REQUEST_COLUMNS = {
    "ttft": "ttft_s", "user_ttft": "user_ttft_s", "tpot": "tpot_s", "e2e": "e2e_s",
    "user_e2e": "user_e2e_s", "client_wait": "client_wait_s", "server_queue": "server_queue_s",
}


def _float(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def derive_requests(records: pd.DataFrame, windows: dict[str, tuple[float, float]], slo: SLO) -> pd.DataFrame:
    """Records plus the derived columns above; `windows` maps a step label to its window."""
    sched, sent = _float(records, "scheduled_at"), _float(records, "sent_at")
    first, last = _float(records, "first_token_at"), _float(records, "last_token_at")
    out_tokens = _float(records, "output_tokens")
    outcome = records["outcome"].astype(str) if "outcome" in records else pd.Series("ok", index=records.index)
    capped = records["capped"].fillna(False).astype(bool) if "capped" in records else False
    ttft, e2e = first - sent, last - sent
    tpot = ((e2e - ttft) / (out_tokens - 1)).where(out_tokens >= 2)
    wait = sent - sched
    end = _float(records, "closed_at").fillna(last).fillna(first).fillna(sent)
    labels = records["step"].astype(str) if "step" in records else pd.Series("", index=records.index)
    w0 = labels.map({k: v[0] for k, v in windows.items()}).astype(float)
    w1 = labels.map({k: v[1] for k, v in windows.items()}).astype(float)
    in_window = (sched >= w0) & (sched < w1)
    derived = records.assign(
        ttft_s=ttft, user_ttft_s=first - sched, e2e_s=e2e, user_e2e_s=last - sched, tpot_s=tpot,
        client_wait_s=wait, send_lag_s=wait.where(~capped), end_at=end, in_window=in_window,
        finished=outcome.isin(FINISHED), server_queue_s=_float(records, "server_queue_s"),
    )
    return derived.assign(good=meets_thresholds(derived, slo) & (outcome == "ok") & in_window)


def meets_thresholds(requests: pd.DataFrame, slo: SLO) -> pd.Series:
    """True where every per-request threshold is met (a NaN value is not judged)."""
    good = pd.Series(True, index=requests.index)
    for t in slo.thresholds:
        column = PER_REQUEST_COLUMNS.get(t.metric)
        if column is None or column not in requests:
            continue
        value = requests[column]
        good &= value.isna() | (value <= t.value_s + TOLERANCE_S)
    return good


def list_array(column: pd.Series | pa.Array | pa.ChunkedArray, value_type: pa.DataType) -> pa.ListArray:
    """A list column (Arrow-backed or Python lists) as one Arrow ListArray, nulls as empty lists."""
    if isinstance(column, pd.Series):
        if isinstance(column.dtype, pd.ArrowDtype):
            arr = column.array.__arrow_array__()
        else:
            arr = pa.array([v if v is not None and not _is_nan(v) else [] for v in column.tolist()],
                           type=pa.list_(value_type))
    else:
        arr = column
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], type=pa.list_(value_type))
    arr = arr.cast(pa.list_(value_type))
    return pc.fill_null(arr, pa.scalar([], type=pa.list_(value_type)))


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and value != value


class EventGaps:
    """Per-event gaps of a set of requests: `chunk` seconds with their request `row` (0-based
    position), and `token` seconds (gap / tokens of the later event) with their `token_row`."""

    __slots__ = ("chunk", "row", "token", "token_row")

    def __init__(self, chunk: np.ndarray, row: np.ndarray, token: np.ndarray, token_row: np.ndarray):
        self.chunk, self.row, self.token, self.token_row = chunk, row, token, token_row

    def select(self, rows_mask: np.ndarray) -> EventGaps:
        """The gaps of the requests where `rows_mask` (one bool per request) is True."""
        keep, keep_t = rows_mask[self.row], rows_mask[self.token_row]
        return EventGaps(self.chunk[keep], self.row[keep], self.token[keep_t], self.token_row[keep_t])


def _gaps(times: pa.ListArray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gaps, row of each gap, position of each gap's later event in the flattened values)."""
    lengths = pc.list_value_length(times).to_numpy(zero_copy_only=False).astype(np.int64)
    values = times.flatten().to_numpy(zero_copy_only=False)
    row = np.repeat(rows.astype(np.int32), lengths)
    if values.size < 2:
        empty = np.array([], dtype=float)
        return empty, np.array([], dtype=np.int32), np.array([], dtype=np.int64)
    same = row[1:] == row[:-1]
    later = np.flatnonzero(same) + 1
    return values[later] - values[later - 1], row[later], later


def event_gaps(token_times: pd.Series | pa.Array, token_counts: pd.Series | pa.Array | None = None) -> EventGaps:
    """Chunk-level and token-level inter-event gaps of every request, vectorised over all events."""
    times = list_array(token_times, pa.float64())
    chunk, row, _ = _gaps(times, np.arange(len(times)))
    token = np.array([], dtype=float)
    token_row = np.array([], dtype=np.int32)
    if token_counts is not None and len(times):
        counts = list_array(token_counts, pa.int64())
        n_times = pc.list_value_length(times)
        aligned = pc.and_(pc.equal(pc.list_value_length(counts), n_times), pc.greater(n_times, 1))
        aligned = pc.fill_null(aligned, False)
        if pc.any(aligned).as_py():
            rows = np.flatnonzero(aligned.to_numpy(zero_copy_only=False))
            t_sel, c_sel = times.filter(aligned), counts.filter(aligned)
            gaps, token_row, later = _gaps(t_sel, rows)
            tokens = c_sel.flatten().to_numpy(zero_copy_only=False)[later].astype(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                token = np.where(tokens > 0, gaps / tokens, np.nan)
    return EventGaps(chunk, row, token, token_row)
