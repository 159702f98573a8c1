"""`llmload report RUN_DIR [--slo FILE]`: re-analyse a finished run, with its own SLO or another one.

A run directory its master never finalised (killed) is recovered first: records merged, the running
step marked partial (`llmload.runtime.recover`).

Another SLO file gives new verdicts without re-running the load: summary.json, worksheet.csv and
report.html are rewritten, a short verdict table is printed and the exit code follows the new verdict
(0 pass, 1 fail, 3 invalid or insufficient).

What a re-analysis SLO file replaces (`reanalysis_slo`): the targets as a whole (every threshold,
`max_reject_ratio`, `max_error_ratio`, `allow_oom`, `queue_growth`): a target absent from the new file
is not checked, as in any SLO file. The judging settings `min_samples`, `trend_alpha` and
`sub_windows` keep the run's values unless the file sets them: they describe how much data a verdict
needs, not what the product requires, and a default of 200 samples would silently turn a short run's
steps "insufficient". The SLO used is recorded in summary.json (`slo.source`, `slo.settings`), so
`llmload plan` follows the run directory's current analysis.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from llmload.config import SLO, Client, load_slo
from llmload.errors import ConfigError
from llmload.report.page import write_report
from llmload.report.text import verdict_table

__all__ = ["JUDGING_SETTINGS", "check_run_dir", "client_from_manifest", "current_slo", "reanalysis_slo", "rereport",
           "slo_from_manifest"]

#: SLO keys that say how much data a verdict needs: kept from the run unless a re-analysis file sets them
JUDGING_SETTINGS = ("min_samples", "trend_alpha", "sub_windows")


def check_run_dir(run_dir: str | Path) -> Path:
    """The run directory as a Path; a one-line ConfigError when it or its records.parquet is missing."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError("run directory not found", file=str(root))
    if not (root / "records.parquet").exists():
        raise ConfigError("no records.parquet: not a finished run directory", file=str(root))
    return root


def slo_from_manifest(manifest: dict, *, file: str = "manifest.json") -> SLO:
    """The SLO the run was configured with (`manifest["config"]["slo"]`); empty when none was set."""
    data = ((manifest or {}).get("config") or {}).get("slo")
    if not data:
        return SLO()
    try:
        return SLO.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("config", "slo", *err["loc"]))
        raise ConfigError(err["msg"], file=file, key=where) from None


def client_from_manifest(manifest: dict, *, file: str = "manifest.json") -> Client | None:
    """The generator limits the run was judged with (`manifest["config"]["client"]`), or None."""
    data = ((manifest or {}).get("config") or {}).get("client")
    if not data:
        return None
    try:
        return Client.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(err["msg"], file=file, key=".".join(str(p) for p in ("config", "client", *err["loc"]))) \
            from None


def reanalysis_slo(slo_path: str | Path, run_slo: SLO) -> tuple[SLO, list[str]]:
    """The SLO of `slo_path` with the judging settings it does not set taken from `run_slo` (see the
    module docstring); also the names of the settings kept from the run."""
    new = load_slo(slo_path)
    kept = [k for k in JUDGING_SETTINGS if k not in new.model_fields_set]
    return new.model_copy(update={k: getattr(run_slo, k) for k in kept}), kept


def current_slo(root: Path, manifest: dict) -> tuple[SLO, str]:
    """The SLO of the run directory's current analysis and where it came from: the one the last
    `llmload report --slo` recorded in summary.json, else the run's configured SLO."""
    manifest_file = str(root / "manifest.json")
    try:
        recorded = (json.loads((root / "summary.json").read_text(encoding="utf-8")).get("slo") or {})
    except (OSError, ValueError):
        recorded = {}
    source, settings = recorded.get("source"), recorded.get("settings")
    if source and source != "config" and isinstance(settings, dict):
        try:
            return SLO.model_validate(settings), f"the SLO of the last re-analysis ({source})"
        except ValidationError:
            pass
    return slo_from_manifest(manifest, file=manifest_file), "the run's configured SLO"


def _slo_text(slo: SLO) -> str:
    targets = ", ".join(slo.checked) or "nothing"
    return (f"checks {targets}; min_samples {slo.min_samples}, trend_alpha {slo.trend_alpha:g}, "
            f"sub_windows {slo.sub_windows}")


def rereport(run_dir: str | Path, *, slo_path: str | Path | None = None) -> int:
    """Re-analyse `run_dir`, rewrite summary.json, worksheet.csv and report.html; return the exit code.
    A run whose master died before finalising it is recovered first (`llmload.runtime.recover`)."""
    from llmload.runtime.recover import recover_run, unfinished

    if Path(run_dir).is_dir() and unfinished(run_dir):
        print(f"{run_dir}: {recover_run(run_dir)}")
    root = check_run_dir(run_dir)
    import analysis

    run = analysis.load_run(root)
    manifest_file = str(root / "manifest.json")
    run_slo = slo_from_manifest(run.manifest, file=manifest_file)
    slo, kept = (run_slo, []) if slo_path is None else reanalysis_slo(slo_path, run_slo)
    result = analysis.analyze(run, slo, client_from_manifest(run.manifest, file=manifest_file))
    result.summary.setdefault("slo", {}).update(source="config" if slo_path is None else str(slo_path),
                                                settings=slo.model_dump(mode="json"))
    analysis.write_outputs(result, root)
    report = write_report(result, root, manifest=run.manifest)
    source = f"SLO from {slo_path}" if slo_path is not None else "SLO from the run's config"
    print(f"{root}: re-analysed with the {source}: {_slo_text(slo)}")
    if kept:
        print(f"  kept from the run (not set in {slo_path}): {', '.join(kept)}; targets absent from "
              f"{slo_path} are not checked")
    print(verdict_table(result.steps, result.summary))
    print(f"report: {report}")
    return int(analysis.exit_code(result.summary))
