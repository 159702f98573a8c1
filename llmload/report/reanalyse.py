"""`llmload report RUN_DIR [--slo FILE]`: re-analyse a finished run, with its own SLO or another one.

A run directory its master never finalised (killed) is recovered first: records merged, the running
step marked partial (`llmload.rundir.recover`).

Without `--slo` the run's own summary.json, worksheet.csv and report.html are rewritten. Another SLO
file gives new verdicts without re-running the load, written beside the run's own files, which stay as
the run judged itself: `summary-slo-<file stem>.json`, `worksheet-slo-<stem>.csv`, `report-slo-<stem>.html`
(`reanalysis_suffix`); a short verdict table and where they went are printed, and the exit code follows
the new verdict (0 pass, 1 fail, 3 invalid or insufficient).

What a re-analysis SLO file replaces (`reanalysis_slo`): the targets as a whole (every threshold,
`max_reject_ratio`, `max_error_ratio`, `allow_oom`, `queue_growth`): a target absent from the new file
is not checked, as in any SLO file. The judging settings `min_samples`, `trend_alpha` and
`sub_windows` keep the run's values unless the file sets them: they describe how much data a verdict
needs, not what the product requires, and a default of 200 samples would silently turn a short run's
steps "insufficient". The SLO used is recorded in the summary written (`slo.source`, `slo.settings`), so
`llmload plan` and `compare` follow the run directory's latest analysis (`run_inputs.current_slo`).
"""

from __future__ import annotations

import re
from pathlib import Path

from llmload.config import SLO
from llmload.report.page import write_report
from llmload.report.run_inputs import (  # re-exported: `llmload compare` and `llmload plan` use them too
    JUDGING_SETTINGS,
    check_run_dir,
    client_from_manifest,
    current_slo,
    reanalysis_slo,
    slo_from_manifest,
)
from llmload.report.text import verdict_table

__all__ = ["JUDGING_SETTINGS", "check_run_dir", "client_from_manifest", "current_slo", "reanalysis_slo",
           "reanalysis_suffix", "rereport", "slo_from_manifest"]


def reanalysis_suffix(slo_path: str | Path) -> str:
    """`-slo-<stem>` of the files a re-analysis with `slo_path` writes (`strict.yaml`: `-slo-strict`)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(slo_path).stem).strip("._") or "file"
    return f"-slo-{stem}"

def _slo_text(slo: SLO) -> str:
    targets = ", ".join(slo.checked) or "nothing"
    return (f"checks {targets}; min_samples {slo.min_samples}, trend_alpha {slo.trend_alpha:g}, "
            f"sub_windows {slo.sub_windows}")


def rereport(run_dir: str | Path, *, slo_path: str | Path | None = None) -> int:
    """Re-analyse `run_dir`, rewrite summary.json, worksheet.csv and report.html; return the exit code.
    A run whose master died before finalising it is recovered first (`llmload.rundir.recover`)."""
    from llmload.rundir.recover import recover_run, unfinished

    if Path(run_dir).is_dir() and unfinished(run_dir):
        print(f"{run_dir}: {recover_run(run_dir)}")
    root = check_run_dir(run_dir)
    import analysis

    run = analysis.load_run(root)
    if run.telemetry_error:  # a truncated telemetry.parquet: the verdict comes from the records alone
        print(f"llmload: warning: {run.telemetry_error}")
    manifest_file = str(root / "manifest.json")
    run_slo = slo_from_manifest(run.manifest, file=manifest_file)
    slo, kept = (run_slo, []) if slo_path is None else reanalysis_slo(slo_path, run_slo)
    result = analysis.analyze(run, slo, client_from_manifest(run.manifest, file=manifest_file))
    if run.telemetry_error:
        result.summary.setdefault("warnings", []).append(run.telemetry_error)
    result.summary.setdefault("slo", {}).update(source="config" if slo_path is None else str(slo_path),
                                                settings=slo.model_dump(mode="json"))
    suffix = "" if slo_path is None else reanalysis_suffix(slo_path)  # the run's own files stay its own
    summary_path, sheet_path = analysis.write_outputs(result, root, suffix=suffix)
    report = write_report(result, root, manifest=run.manifest, suffix=suffix)
    source = f"SLO from {slo_path}" if slo_path is not None else "SLO from the run's config"
    print(f"{root}: re-analysed with the {source}: {_slo_text(slo)}")
    if suffix:
        print(f"  written beside the run's own report.html, summary.json and worksheet.csv (unchanged): "
              f"{report.name}, {summary_path.name}, {sheet_path.name}")
    if kept:
        print(f"  kept from the run (not set in {slo_path}): {', '.join(kept)}; targets absent from "
              f"{slo_path} are not checked")
    print(verdict_table(result.steps, result.summary))
    from llmload.report.answer import knee_text

    knee = knee_text(result.summary)  # recomputed from the steps judged with this SLO
    if knee:
        print(knee)
    print(f"report: {report}")
    return int(analysis.exit_code(result.summary))
