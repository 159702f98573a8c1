"""Finalisation of a run directory: merged records, telemetry, analysis, report, exit code.

Runs on the master once the steps are over (or the run was stopped): every worker's flushed record
file plus the master's copy of shipped records are merged into `records.parquet` (de-duplicated by
`request_id`; the workers' own files, which carry every field, win over the master's copy), the
telemetry lines become `telemetry.parquet`, and the analysis writes `summary.json`, `worksheet.csv`
and `report.html`. Analysis is CPU-heavy: it runs only here, after the load has stopped.

A full disk (`llmload.diskfull`) never loses what is on disk: each file is written aside and moved into
place, so a write cut short leaves no partial file; every step that fits is still done (a summary fits
where a report does not), and one `llmload: error:` line names what was not written, what was kept and
the verdict if it was reached, with exit code `DISK_FULL_EXIT` (4) unless summary.json was saved (then
the verdict's code: the run has its conclusion). The record files (`records/*.jsonl`)
always stay: `llmload report RUN_DIR` finishes the run once there is space. What the run dropped for
want of space (telemetry a writer stopped, finished records not on disk: `llmload.diskfull.dropped_said`)
is said in that line, or else given back in `closing` for the run's closing line.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmload.config import Config
from llmload.diskfull import DISK_FULL_EXIT, dropped_said, is_disk_full
from llmload.records import merge_record_files

__all__ = ["analyse_run", "finalise_run", "merge_run_records"]

log = logging.getLogger("llmload.finish")


def merge_run_records(run_dir: Path) -> int:
    """Merge `records/*.jsonl` into `records.parquet`; returns the number of requests."""
    folder = Path(run_dir) / "records"
    files = sorted(folder.glob("*.jsonl")) if folder.exists() else []
    # the merge keeps the last copy of a request among equals: master.jsonl first, workers after
    files.sort(key=lambda p: (p.name != "master.jsonl", p.name))
    return merge_record_files(files, Path(run_dir) / "records.parquet")


def analyse_run(run_dir: Path, config: Config, *, report: bool = True, outcome: dict | None = None,
                unwritten: list[str] | None = None, verdict: dict | None = None, dropped: str = "") -> int:
    """Analysis, summary.json, worksheet.csv and (unless `report=False`) report.html; returns the
    verdict's exit code. `outcome`, when given, gets the run's `verdict` and the report's answer
    `sentences` (for the web UI). `unwritten`, when given, collects the files a full disk kept out
    (silently: the caller says it in one line; `verdict["verdict"]` then gets the verdict reached);
    without it a full disk raises. `dropped`: what the run dropped for want of space
    (`llmload.diskfull.dropped_said`), a warning of the summary and the report."""
    import analysis

    run = analysis.load_run(run_dir)
    if run.telemetry_error:
        print(f"llmload: warning: {run.telemetry_error}", flush=True)
    result = analysis.analyze(run, config.slo, config.client)
    if run.telemetry_error:
        result.summary.setdefault("warnings", []).append(run.telemetry_error)
    if dropped:  # the server's series end where telemetry stopped: a reader of the report must know
        note = f"dropped for want of space under the run directory: {dropped}"
        result.warnings.append(note)
        result.summary.setdefault("warnings", []).append(note)
    try:
        analysis.write_outputs(result, run_dir)
    except OSError as exc:
        if unwritten is None or not is_disk_full(exc):
            raise
        unwritten += [n for n in ("summary.json", "worksheet.csv", "report.html") if not (run_dir / n).exists()]
        for seen in (outcome, verdict):
            if seen is not None:
                seen["verdict"] = str((result.summary or {}).get("verdict") or "unknown")
        return DISK_FULL_EXIT
    answer = None  # made once: the web UI's outcome and the report's first section say the same
    if outcome is not None:
        try:
            from llmload.report.answer import answer_sentences

            answer = answer_sentences(result, getattr(run, "manifest", None))
            outcome["verdict"], outcome["sentences"] = answer
        except Exception:
            log.exception("the answer sentences could not be made")
            outcome["verdict"] = str((result.summary or {}).get("verdict") or "unknown")
    from analysis.validity import client_cap_line

    for step in result.summary.get("steps", []):  # why the exit code says "invalid", and what to do
        for reason in step.get("invalid_reasons") or []:
            print(f"llmload: step {step['label']} invalid: {reason['message']}", flush=True)
        capped = client_cap_line(step["label"], step)  # a cap that held the load back, judged or not
        if capped:
            print(f"llmload: {capped}", flush=True)
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
        if unwritten is not None and is_disk_full(exc):
            unwritten.append("report.html")
            return int(analysis.exit_code(result.summary))
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


def finalise_run(run_dir: Path, config: Config, *, report: bool = True, outcome: dict | None = None,
                 finished: int | None = None, closing: list[str] | None = None) -> int:
    """Everything after the last step; returns 0 pass, 1 fail, 3 invalid (`outcome`: see `analyse_run`).
    `finished`, when known (the master's count of shipped records), is what the records on disk are
    checked against; `closing`, when given, gets what was dropped for want of space unless a full-disk
    error line said it already (the run's closing line adds it)."""
    with _no_cyclic_gc():
        return _finalize(Path(run_dir), config, report=report, outcome=outcome, finished=finished,
                         closing=closing)


def _finalize(run_dir: Path, config: Config, *, report: bool, outcome: dict | None, finished: int | None,
              closing: list[str] | None) -> int:
    unwritten: list[str] = []  # what a full disk kept out; said in one line at the end
    reached: dict = {}  # the verdict, when the analysis ran but its summary could not be written
    try:
        kept = merge_run_records(run_dir)
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        return _disk_full(run_dir, ["records.parquet", "telemetry.parquet", "summary.json", "report.html"],
                          exc, reached, finished=finished)
    dropped = dropped_said(records_lost=(finished or 0) - kept)
    try:
        from llmload.telemetry import finalise_telemetry

        finalise_telemetry(run_dir)
    except Exception as exc:
        if is_disk_full(exc):
            unwritten.append("telemetry.parquet")
        else:
            log.exception("telemetry could not be finalised")
            print(f"llmload: warning: telemetry.parquet not written: {exc}")
    try:
        code = analyse_run(run_dir, config, report=report, outcome=outcome, unwritten=unwritten, verdict=reached,
                           dropped=dropped)
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        unwritten += [n for n in ("summary.json", "report.html") if not (run_dir / n).exists()]
        return _disk_full(run_dir, unwritten, exc, reached, dropped=dropped)
    if unwritten:
        return _disk_full(run_dir, unwritten, None, reached, code, dropped=dropped)
    if dropped and closing is not None:
        closing.append(dropped)
    return code


def _disk_full(run_dir: Path, unwritten: list[str], exc: BaseException | None, reached: dict,
               code: int = DISK_FULL_EXIT, *, finished: int | None = None, dropped: str | None = None,) -> int:
    """One line for a finalisation a full disk cut short (what is missing, what is kept, the verdict if
    reached, what to do); returns the verdict's `code` when summary.json was saved (the run has its
    conclusion; only telemetry.parquet or report.html is missing), else `DISK_FULL_EXIT`."""
    names = ("records.parquet", "telemetry.parquet", "summary.json", "worksheet.csv", "report.html")
    kept = [n for n in names if (run_dir / n).exists()]
    files = sorted((run_dir / "records").glob("*.jsonl")) if (run_dir / "records").is_dir() else []
    lines = 0
    for path in files:
        with open(path, "rb") as f:
            lines += sum(1 for line in f if line.rstrip().endswith(b"}"))  # not a line the disk cut short
    (run_dir / "report.html.tmp").unlink(missing_ok=True)  # a report cut short
    verdict = reached.get("verdict")
    said = f"; the verdict was {verdict} but could not be saved" if verdict and "summary.json" not in kept else ""
    if dropped is None:  # the merge failed: the record lines on disk are what was kept
        dropped = dropped_said(records_lost=(finished or 0) - lines)
    said += f"; {dropped}" if dropped else ""
    code = code if "summary.json" in kept else DISK_FULL_EXIT
    print(f"llmload: error: the disk holding {run_dir} is full: not written: {', '.join(dict.fromkeys(unwritten))}; "
          f"kept: {', '.join(kept + [f'{lines} complete record line(s) in records/*.jsonl'])}{said}; free space, then "
          f"`llmload report {run_dir}` finishes it (exit code {code})", file=sys.stderr, flush=True)
    if exc is not None:
        log.debug("finalisation stopped by a full disk", exc_info=exc)
    return code
