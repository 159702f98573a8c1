"""The live terminal view: one table row per finished step, and a progress line during a step.

The numbers shown live come from the workers' shipped summaries, judged on the master with
`analysis.judge_step` (the same rules as the final analysis); the report recomputes everything from
the merged records. Times are shown in milliseconds, rates in requests per second, "srv waiting"
(the step's mean number of requests waiting in the server's queue) in requests; `out tok/s` is the
step's output tokens per second (METRICS.md); `TTFA p95` (time to the first answer token) only on the row
of a step whose answers carried reasoning, after its verdict (without reasoning it equals TTFT: no column
of dashes). TTFT, TPOT and E2E come from `llmload.latency`.

`LiveTable` prints a judged step's row: it listens to the step controller's `step_judged` event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from llmload.latency import latencies
from llmload.sketch import QuantileSketch

__all__ = ["COLUMNS", "LiveTable", "ProgressStats", "format_header", "format_progress", "format_row", "quick_stats", "step_row",
           "window_ttft_p95"]

#: (key, header, width, kind) of the live step table
COLUMNS = (
    ("label", "step", 10, "s"),
    ("offered_rate", "offered/s", 9, "r"),
    ("achieved_rate", "achieved/s", 10, "r"),
    ("ttft_p95_s", "TTFT p95", 9, "ms"),
    ("tpot_p95_s", "TPOT p95", 9, "ms"),
    ("e2e_p95_s", "E2E p95", 9, "ms"),
    ("goodput", "goodput/s", 9, "r"),
    ("client_wait_p95_s", "wait p95", 9, "ms"),
    ("server_waiting", "srv waiting", 11, "req"),
    ("output_tokens_per_s", "out tok/s", 9, "t"),
    ("verdict", "verdict", 12, "s"),
)
#: the step's TTFA p95, after the verdict, on the rows of steps whose answers reasoned (`format_row`)
TTFA_CELL = ("ttfa_p95_s", "TTFA p95", 9, "ms")


def _cell(value: Any, kind: str, width: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "-"
    elif kind == "ms":
        text = f"{float(value) * 1000:.0f}ms"
    elif kind == "r":
        text = f"{float(value):.2f}"
    elif kind == "t":
        text = f"{float(value):.0f}" if float(value) >= 100 else f"{float(value):.1f}"
    elif kind == "req":
        text = f"{float(value):.1f} req"
    else:
        text = str(value)
    return text.rjust(width) if kind != "s" else text.ljust(width)


def format_header() -> str:
    return " ".join(h.rjust(w) if k != "s" else h.ljust(w) for _, h, w, k in COLUMNS)


def format_row(row: dict) -> str:
    """One table line from a step row (missing numbers print as `-`); `TTFA p95 ...` after the verdict
    when the step's answers reasoned."""
    line = " ".join(_cell(row.get(key), kind, width) for key, _, width, kind in COLUMNS)
    key, header, _, kind = TTFA_CELL
    if row.get(key) is not None and not (isinstance(row[key], float) and math.isnan(row[key])):
        line = f"{line} {header} {_cell(row[key], kind, 0)}"
    return line


def _p(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def quick_stats(rows: Iterable[dict], *, window: tuple[float, float] | None = None) -> dict:
    """Counts and p95s of shipped summaries (for the progress line; the verdict uses judge_step)."""
    rows = [r for r in rows if window is None or window[0] <= r["scheduled_at"] < window[1]]
    ok = [r for r in rows if r.get("outcome") == "ok"]
    lat = [latencies(r.get("sent_at"), r.get("first_token_at"), r.get("last_token_at"), r.get("output_tokens"))
           for r in ok]
    ttft = np.array([x.ttft for x in lat if x.ttft is not None])
    e2e = np.array([x.e2e for x in lat if x.e2e is not None])
    tpot = np.array([x.tpot for x in lat if x.tpot is not None])
    wait = np.array([r["sent_at"] - r["scheduled_at"] for r in rows if r.get("sent_at") is not None])
    return {"done": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "ttft_p95_s": _p(ttft, 95), "tpot_p95_s": _p(tpot, 95), "e2e_p95_s": _p(e2e, 95),
            "client_wait_p95_s": _p(wait, 95)}


def window_ttft_p95(rows: Iterable[dict], bounds: Any) -> float | None:
    """TTFT p95 of the shipped summaries scheduled in the step's measurement window (`bounds`: the step's
    `StepBounds`; no window end: everything after the warm-up); None when there is none yet."""
    if bounds is None:
        return quick_stats(rows)["ttft_p95_s"]
    end = bounds.window_end if bounds.window_end is not None else math.inf
    inside = [r for r in rows if r.get("scheduled_at") is not None]
    return quick_stats(inside, window=(bounds.window_start, end))["ttft_p95_s"]


class ProgressStats:
    """`quick_stats` of one running step's summaries and its window's TTFT p95 (`window_ttft_p95`), folded
    in as summaries arrive (`add`, a shipped batch at a time) into counts and quantile sketches
    (`llmload.sketch.QuantileSketch`, within 0.5% of `quick_stats`' percentiles): its size does not grow
    with the step's requests, so an hour at 10,000 req/s costs the master no more memory than a minute.
    Re-reading every summary at each progress line or web UI poll cost the master seconds of CPU per call
    in a long step (bench/fan_in.py); keeping every value cost it 8 bytes a value a figure."""

    def __init__(self, bounds: Any = None) -> None:
        self.bounds = bounds
        self._reset()

    def _reset(self) -> None:
        self.seen = self.done = self.ok = 0
        self._sketches = {k: QuantileSketch() for k in ("ttft", "tpot", "e2e", "wait", "window_ttft")}

    def add(self, rows: list[dict]) -> None:
        """Fold in a batch of summaries (vectorised over the batch)."""
        if not rows:
            return
        self.done += len(rows)
        self.seen += len(rows)

        def column(key: str, of: list[dict]) -> np.ndarray:
            return np.array([r.get(key) for r in of], dtype=float)  # None -> NaN (left out)

        sketches = self._sketches
        sketches["wait"].add(column("sent_at", rows) - column("scheduled_at", rows))
        ok = [r for r in rows if r.get("outcome") == "ok"]
        self.ok += len(ok)
        if not ok:
            return
        at = column("scheduled_at", ok)
        lat = latencies(column("sent_at", ok), column("first_token_at", ok), column("last_token_at", ok),
                        column("output_tokens", ok))
        for key in ("ttft", "tpot", "e2e"):
            sketches[key].add(getattr(lat, key))
        if self.bounds is None:
            sketches["window_ttft"].add(lat.ttft)
        else:
            end = self.bounds.window_end if self.bounds.window_end is not None else math.inf
            with np.errstate(invalid="ignore"):
                inside = (at >= self.bounds.window_start) & (at < end)
            sketches["window_ttft"].add(lat.ttft[inside])

    def update(self, rows: list[dict]) -> dict:
        """`add` the summaries of `rows` not seen yet (a list only ever appended to; a shorter one starts
        over), then `stats()`."""
        if len(rows) < self.seen:
            self._reset()
        self.add(rows[self.seen:])
        return self.stats()

    def stats(self) -> dict:
        """`quick_stats`' figures so far, plus `window_ttft_p95_s`."""
        def p95(key: str) -> float | None:
            return self._sketches[key].quantile(0.95)

        return {"done": self.done, "ok": self.ok, "failed": self.done - self.ok, "ttft_p95_s": p95("ttft"),
                "tpot_p95_s": p95("tpot"), "e2e_p95_s": p95("e2e"), "client_wait_p95_s": p95("wait"),
                "window_ttft_p95_s": p95("window_ttft")}


def step_row(label: str, stats: dict, verdict: str, failing: list[str], server_waiting: float | None) -> dict:
    """The table row of a judged step."""
    row = {"label": label, **{k: stats.get(k) for k, *_ in (*COLUMNS, TTFA_CELL) if k in stats}}
    # the step's mean server queue (telemetry) when known; the last sample after the drain is ~0
    mean = stats.get("waiting_mean")
    row["server_waiting"] = mean if mean is not None and mean == mean else server_waiting
    row["verdict"] = verdict + (f" ({', '.join(failing)})" if failing else "")
    if not (stats.get("reasoning_tokens_per_s") or 0) > 0:  # no reasoning: TTFA is TTFT, not repeated
        row["ttfa_p95_s"] = None
    return row


def format_progress(label: str, elapsed_s: float, total_s: float | None, planned: int | None,
                    stats: dict, pending: int, server_waiting: float | None, *,
                    window_ttft_p95_s: float | None = None, in_warmup: bool = False) -> str:
    """One progress line during a step (`pending`: arrivals due so far that have not finished): how far
    into its `total_s` of arrivals, or how long it has been draining after them. The TTFT p95 is the
    measurement window's (`window_ttft_p95_s`: arrivals after the warm-up, as the step's result), never
    the warm-up's: during the warm-up it is not shown."""
    if total_s and elapsed_s > total_s:
        span = f"draining, {elapsed_s - total_s:.0f}s after its {total_s:.0f}s of arrivals"
    else:
        span = f"{elapsed_s:.0f}s of {total_s:.0f}s" if total_s else f"{elapsed_s:.0f}s"
    planned_text = f" of {planned}" if planned else ""
    waiting = "-" if server_waiting is None else f"{server_waiting:.0f} req"
    if in_warmup:
        ttft_text = "- (warm-up, not counted)"
    else:
        ttft = window_ttft_p95_s
        ttft_text = "-" if ttft is None else f"{ttft * 1000:.0f}ms (warm-up left out)"
    return (f"  {label} {span}: done {stats['done']}{planned_text}, failed {stats['failed']}, "
            f"pending {pending}, TTFT p95 {ttft_text}, server waiting {waiting}")


class LiveTable:
    """The terminal's step table: one row per judged step, with its invalid reasons and a client-cap line
    (a listener of `StepEvents.step_judged`; the header is printed when the run starts)."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out

    def listen(self, events: Any) -> LiveTable:
        events.step_judged.add_listener(self.on_step_judged)
        return self

    def on_step_judged(self, step: Any) -> None:
        from analysis.validity import client_cap_line

        self.out(format_row(step.table_row))
        for reason in step.stats.get("invalid_reasons") or []:
            self.out(f"  {step.label} invalid: {reason['message']}")
        capped = client_cap_line(step.label, step.stats)
        if capped:
            self.out(f"  {capped}")
