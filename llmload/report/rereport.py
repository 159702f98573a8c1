"""`llmload report RUN_DIR [--slo FILE]`: re-analyse a finished run, with its own SLO or another one.

A run directory its master never finalised (killed) is recovered first: records merged, the running
step marked partial (`llmload.runtime.recover`).

Another SLO file gives new verdicts without re-running the load: summary.json, worksheet.csv and
report.html are rewritten, a short verdict table is printed and the exit code follows the new verdict.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from llmload.config import SLO, Client, load_slo
from llmload.errors import ConfigError
from llmload.report.page import write_report
from llmload.report.text import verdict_table

__all__ = ["check_run_dir", "client_from_manifest", "rereport", "slo_from_manifest"]


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


def rereport(run_dir: str | Path, *, slo_path: str | Path | None = None) -> int:
    """Re-analyse `run_dir`, rewrite summary.json, worksheet.csv and report.html; return the exit code.
    A run whose master died before finalising it is recovered first (`llmload.runtime.recover`)."""
    from llmload.runtime.recover import recover_run, unfinished

    if Path(run_dir).is_dir() and unfinished(run_dir):
        print(f"{run_dir}: {recover_run(run_dir)}")
    root = check_run_dir(run_dir)
    import analysis

    run = analysis.load_run(root)
    slo = load_slo(slo_path) if slo_path is not None else slo_from_manifest(
        run.manifest, file=str(root / "manifest.json"))
    result = analysis.analyze(run, slo, client_from_manifest(run.manifest, file=str(root / "manifest.json")))
    analysis.write_outputs(result, root)
    report = write_report(result, root, manifest=run.manifest)
    source = f"SLO from {slo_path}" if slo_path is not None else "SLO from the run's config"
    print(f"{root}: re-analysed with the {source}")
    print(verdict_table(result.steps, result.summary))
    print(f"report: {report}")
    return int(analysis.exit_code(result.summary))
