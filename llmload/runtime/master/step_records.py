"""What the workers shipped for one step, on disk rather than in the master's memory (`StepRecords`).

A step of an hour at 10,000 req/s is 36 million summaries: kept as dicts they took the master about
1.7 KB each (bench/fan_in.py). So the master keeps, per step, only
- the summaries in a spill file, one JSON line each (`run_dir/.llmload-spill/step-NNNN.jsonl`, the same
  redacted lines as `records/master.jsonl`), read back once, to judge the step with the exact rules of
  the analysis (`llmload.runtime.master.judging`), and deleted once it is judged (`discard`);
- streaming figures folded in as each batch arrives, of a size that does not grow with the step: the
  count, the progress line's and web UI's counts and percentiles (`ProgressStats`: quantile sketches),
  and the requests scheduled in the window that met the SLO (`good`, the live goodput of `/metrics`).

Without a spill path (a tally with no run directory, a test) the summaries are kept in a list, as before.
The run's records themselves are the workers' files and `records/master.jsonl`; the spill is a working
copy of one step's.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from llmload.records import RecordWriter, iter_record_files, row_json
from llmload.redaction import redact_text
from llmload.runtime.master.live_series import TOLERANCE_S
from llmload.runtime.master.live_table import ProgressStats

__all__ = ["FOLD_ROWS", "SPILL_DIR", "StepRecords", "good_in_window", "remove_spill"]

#: summaries folded into the streaming figures at a time (`StepRecords.stats()` folds what is pending)
FOLD_ROWS = 4096

#: the folder of the run directory that holds the running steps' spill files
SPILL_DIR = ".llmload-spill"


class StepRecords:
    """One step's shipped summaries (see the module docstring): `len()`, iteration (read back from the
    spill file), `add` a shipped batch, `extend` (records the master makes up: a lost worker's)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._rows: list[dict] | None = [] if path is None else None
        self._writer: RecordWriter | None = None
        self.count = 0
        #: the progress line's and web UI's figures (`stats()`), folded in `FOLD_ROWS` summaries at a time
        self.progress = ProgressStats()
        self._good = 0
        #: summaries not folded in yet, with the bounds and SLO they count against
        self._pending: list[dict] = []
        self._against: tuple[Any, Any] = (None, None)

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[dict]:
        if self._rows is not None:
            return iter(list(self._rows))
        if self.path is None or not self.path.exists():
            return iter(())
        return iter_record_files([self.path])

    def add(self, rows: list[dict], text: str | None = None, *, bounds: Any = None, slo: Any = None) -> None:
        """A batch of summaries of this step; `text`: their redacted JSON lines joined by newlines, when the
        caller has them already (else they are made here). `bounds` (the step's `StepBounds`) and `slo`
        say which requests count to `good`."""
        if not rows:
            return
        self.count += len(rows)
        if self._rows is not None:
            self._rows.extend(rows)
        else:
            if self._writer is None:
                self._writer = RecordWriter(self.path)  # type: ignore[arg-type]
            if text is None:
                text = redact_text("\n".join([row_json(row) for row in rows]))
            self._writer._write_line(text)
        if self.progress.bounds is None and bounds is not None:
            self.progress.bounds = bounds
        self._against = (bounds, slo) if bounds is not None else self._against
        self._pending.extend(rows)
        if len(self._pending) >= FOLD_ROWS:
            self._fold()

    def _fold(self) -> None:
        """Fold the pending summaries into the figures: vectorised over thousands of summaries at once, as
        a batch of a few dozen would cost more in numpy's per-call overhead than in arithmetic."""
        rows, self._pending = self._pending, []
        if not rows:
            return
        self.progress.add(rows)
        bounds, slo = self._against
        if bounds is not None and slo is not None:
            self._good += good_in_window(rows, bounds, slo)

    def stats(self) -> dict:
        """The progress line's figures so far (`ProgressStats.stats()`)."""
        self._fold()
        return self.progress.stats()

    @property
    def good(self) -> int:
        """`ok` requests scheduled in the measurement window meeting every per-request SLO threshold so far
        (`live_series.meets_slo`, vectorised)."""
        self._fold()
        return self._good

    def extend(self, rows: list[dict]) -> None:
        """Records of this step the master made up (`llmload.runtime.master.lost_workers`)."""
        self.add(list(rows))

    def request_ids(self) -> set:
        return {row.get("request_id") for row in self}

    def discard(self) -> None:
        """Judged: the spill file goes (the run's records are in `records/`), the list is emptied."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        if self._rows is not None:
            self._rows = []
        self._pending = []


def good_in_window(rows: list[dict], bounds: Any, slo: Any) -> int:
    """How many of `rows` were scheduled in the bounds' window and meet the SLO (`live_series.meets_slo`:
    `ok`, and every per-request threshold met where its value is defined)."""
    def column(key: str) -> np.ndarray:
        return np.array([r.get(key) for r in rows], dtype=float)  # None -> NaN

    at = column("scheduled_at")
    end = bounds.window_end if bounds.window_end is not None else math.inf
    with np.errstate(invalid="ignore"):
        good = (at >= bounds.window_start) & (at < end)
    good &= np.array([r.get("outcome") == "ok" for r in rows], dtype=bool)
    if not good.any() or not slo.thresholds:
        return int(good.sum())
    sent, first, last, answer = column("sent_at"), column("first_token_at"), column("last_token_at"), \
        column("first_answer_at")
    tokens = np.array([r.get("output_tokens") or 0 for r in rows], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ttft, e2e = first - sent, last - sent
        values = {"ttft": ttft, "e2e": e2e, "tpot": np.where(tokens >= 2, (e2e - ttft) / (tokens - 1), np.nan),
                  "user_ttft": first - at, "user_e2e": last - at, "client_wait": sent - at,
                  "ttfa": answer - sent, "user_ttfa": answer - at}
        for t in slo.thresholds:
            value = values.get(t.metric)
            if value is not None:
                good &= ~(value > t.value_s + TOLERANCE_S)  # NaN (undefined) is not judged
    return int(good.sum())


def remove_spill(run_dir: Path) -> None:
    """The run is over: its spill folder goes."""
    shutil.rmtree(Path(run_dir) / SPILL_DIR, ignore_errors=True)
