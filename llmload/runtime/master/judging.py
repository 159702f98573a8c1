"""Live judging of a finished step on the master, with the analysis' own rules.

The summaries the workers shipped become a records frame (`llmload.records.records_frame`), the
telemetry comes from the collector's recent samples in memory (`TelemetryCollector.recent`; reading
the growing `telemetry.jsonl` back after every step held up the master's loop, and its pollers, for
seconds), and `analysis.judge_step` gives the verdict, the failing dimensions and the step's numbers.
Runs between steps, when no load is in flight. Without a collector, the files are read. The dimensions
judged, and how, are those of the SLO registry (`llmload.slo`), through `analysis.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmload.config import Config
from llmload.records import records_table

__all__ = ["judge_rows", "live_judge"]

#: summaries converted to Arrow at a time when judging: the Python dicts held at once (a summary read
#: back is about 2 KB as a dict; `TABLE_CHUNK_ROWS` of them is 100 MB)
JUDGE_CHUNK_ROWS = 8192


def judge_rows(rows: Iterable[dict], step: dict, config: Config, *, run_dir: Path | None = None,
               recent: Any = None) -> tuple:
    """(verdict, failing, stats) of one step from shipped summaries (telemetry: `recent`, else the files)."""
    # pandas/pyarrow: only once a step is judged (issue 20)
    import pyarrow

    from analysis.run import KEPT_ONLY_COLUMNS, UNREAD_COLUMNS, records_from_table
    from analysis.verdict import judge_step
    from llmload.telemetry.sink import read_telemetry, telemetry_frame

    telemetry = None
    if recent is not None:
        telemetry = telemetry_frame(recent.rows())
    elif run_dir is not None:
        telemetry = read_telemetry(run_dir)
    # `rows`: the step's `StepRecords` (read back from its spill file, Arrow-converted a chunk at a time;
    # per-event lists stay Arrow-backed, as the final analysis reads them) or a list of summaries; only
    # the columns the step's figures read, as the analysis reads a step
    skip = UNREAD_COLUMNS + KEPT_ONLY_COLUMNS
    table = records_table(rows, skip, chunk_rows=JUDGE_CHUNK_ROWS).drop_columns(["request_id"])
    records = records_from_table(table, skip, consume=True)
    del table  # its buffers, consumed, free as the frame is made
    pyarrow.default_memory_pool().release_unused()  # the conversion's freed buffers back to the OS
    searches = config.shape.auto is not None or (config.shape.ladder is not None and config.shape.ladder.refine is not None)
    return judge_step(records, step, config.slo, config.client, telemetry, keep_history=searches)


def live_judge(run_dir: Path, recent: Any = None) -> Callable[[Iterable[dict], dict, Config], tuple]:
    """The controller's judge for a run directory (`recent`: the collector's `RecentSamples`)."""
    def judge(rows: Iterable[dict], step: dict, config: Config) -> tuple[str, list[str], dict[str, Any]]:
        return judge_rows(rows, step, config, run_dir=run_dir, recent=recent)

    return judge
