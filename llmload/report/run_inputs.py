"""A finished run directory and what it is judged with: its SLO (configured, or the last re-analysis's) and
its generator limits, read back from `manifest.json` and `summary.json`.

`llmload report` (`llmload.report.reanalyse`), `llmload plan` (`llmload.report.planning`) and `llmload
compare` read them; nothing here draws a page, so the report page and these commands do not import
each other in a circle.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from llmload.config import SLO, Client, load_slo
from llmload.errors import ConfigError

__all__ = ["JUDGING_SETTINGS", "check_run_dir", "client_from_manifest", "current_slo", "reanalysis_slo",
           "slo_from_manifest"]

#: SLO keys that say how much data a verdict needs (and at what confidence): kept from the run unless a re-analysis file sets them
JUDGING_SETTINGS = ("min_samples", "trend_alpha", "sub_windows", "confidence")


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
    """The SLO of the run directory's latest analysis and where it came from: the one the newest summary
    recorded (`summary.json`, or a `summary-slo-<stem>.json` that `llmload report --slo` wrote beside it),
    else the run's configured SLO."""
    manifest_file = str(root / "manifest.json")
    summaries = [p for p in (root / "summary.json", *root.glob("summary-slo-*.json")) if p.is_file()]
    try:
        newest = max(summaries, key=lambda p: p.stat().st_mtime_ns) if summaries else None
        recorded = (json.loads(newest.read_text(encoding="utf-8")).get("slo") or {}) if newest else {}
    except (OSError, ValueError, AttributeError):
        recorded = {}
    source, settings = recorded.get("source"), recorded.get("settings")
    if source and source != "config" and isinstance(settings, dict):
        try:
            return SLO.model_validate(settings), f"the SLO of the last re-analysis ({source})"
        except ValidationError:
            pass
    return slo_from_manifest(manifest, file=manifest_file), "the run's configured SLO"
