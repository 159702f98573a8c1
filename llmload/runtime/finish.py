"""Finalisation of a run directory: merged records, telemetry, analysis, report, exit code.

Runs on the master once the steps are over (or the run was stopped): every worker's flushed record
file plus the master's copy of shipped records are merged into `records.parquet` (de-duplicated by
`request_id`; the workers' own files, which carry every field, win over the master's copy), the
telemetry lines become `telemetry.parquet`, and the analysis writes `summary.json`, `worksheet.csv`
and `report.html`. Analysis is CPU-heavy: it runs only here, after the load has stopped.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmload.config import Config
from llmload.records import merge_record_files

__all__ = ["analyse_run", "finalize_run", "merge_run_records"]

log = logging.getLogger("llmload.finish")


def merge_run_records(run_dir: Path) -> int:
    """Merge `records/*.jsonl` into `records.parquet`; returns the number of requests."""
    folder = Path(run_dir) / "records"
    files = sorted(folder.glob("*.jsonl")) if folder.exists() else []
    # the merge keeps the last copy of a request among equals: master.jsonl first, workers after
    files.sort(key=lambda p: (p.name != "master.jsonl", p.name))
    return merge_record_files(files, Path(run_dir) / "records.parquet")


def analyse_run(run_dir: Path, config: Config, *, report: bool = True, outcome: dict | None = None) -> int:
    """Analysis, summary.json, worksheet.csv and (unless `report=False`) report.html; returns the
    verdict's exit code. `outcome`, when given, gets the run's `verdict` and the report's answer
    `sentences` (for the web UI)."""
    import analysis

    run = analysis.load_run(run_dir)
    result = analysis.analyze(run, config.slo, config.client)
    analysis.write_outputs(result, run_dir)
    answer = None  # made once: the web UI's outcome and the report's first section say the same
    if outcome is not None:
        try:
            from llmload.report.answer import answer_sentences

            answer = answer_sentences(result, getattr(run, "manifest", None))
            outcome["verdict"], outcome["sentences"] = answer
        except Exception:
            log.exception("the answer sentences could not be made")
            outcome["verdict"] = str((result.summary or {}).get("verdict") or "unknown")
    for step in result.summary.get("steps", []):  # why the exit code says "invalid", and what to do
        for reason in step.get("invalid_reasons") or []:
            print(f"llmload: step {step['label']} invalid: {reason['message']}", flush=True)
    try:  # the run's answer, as the report, `llmload report`, compare and plan state it
        from llmload.report.answer import knee_text

        knee = knee_text(result.summary)
    except Exception:
        log.exception("the knee could not be stated")
        knee = ""
    if knee:
        print(f"llmload: {knee[0].lower()}{knee[1:]}", flush=True)
    if not report:
        return int(analysis.exit_code(result.summary))
    try:
        from llmload.report.page import write_report

        write_report(result, run_dir, manifest=getattr(run, "manifest", None), answer=answer)
    except Exception as exc:  # the summary is the contract; a report bug must not lose it
        log.exception("report.html could not be written")
        print(f"llmload: warning: report.html not written: {exc}")
    return int(analysis.exit_code(result.summary))


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (and restored after it).

    The finalisation imports pandas, pyarrow and matplotlib and builds frames and figures: hundreds of
    thousands of new objects, so the collector ran full passes over everything alive (~0.2 s of a
    10,000-request finalisation's CPU, more in a Locust master holding more objects) and found almost
    nothing to free. Reference counting still frees what it can; the few cycles left (matplotlib
    figures) are collected on the collector's next pass after the block.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def finalize_run(run_dir: Path, config: Config, *, report: bool = True, outcome: dict | None = None) -> int:
    """Everything after the last step; returns 0 pass, 1 fail, 3 invalid (`outcome`: see `analyse_run`)."""
    with _no_cyclic_gc():
        return _finalize(Path(run_dir), config, report=report, outcome=outcome)


def _finalize(run_dir: Path, config: Config, *, report: bool, outcome: dict | None) -> int:
    merge_run_records(run_dir)
    try:
        from llmload.telemetry import finalize_telemetry

        finalize_telemetry(run_dir)
    except Exception as exc:
        log.exception("telemetry could not be finalised")
        print(f"llmload: warning: telemetry.parquet not written: {exc}")
    return analyse_run(run_dir, config, report=report, outcome=outcome)
