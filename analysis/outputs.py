"""Writing the analysis into the run directory: `summary.json` and `worksheet.csv` (METRICS.md).

Both are written to a temporary name and renamed, so a reader never sees half a file. JSON has null
for what was not measured (`allow_nan=False` guards it); the CSV leaves those cells empty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.summary import json_value
from llmload.redaction import redact_text

if TYPE_CHECKING:
    from analysis.pipeline import Analysis

__all__ = ["write_outputs"]


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(redact_text(text), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a write cut short (a full disk) leaves no partial file


def write_outputs(analysis: Analysis, run_dir: str | Path, *, suffix: str = "") -> tuple[Path, Path]:
    """Write summary.json and worksheet.csv into `run_dir` (`suffix`: `summary<suffix>.json` and
    `worksheet<suffix>.csv`, beside the run's own: a re-analysis); return their paths."""
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    summary_path, sheet_path = root / f"summary{suffix}.json", root / f"worksheet{suffix}.csv"
    _replace(summary_path, json.dumps(json_value(analysis.summary), indent=2, allow_nan=False) + "\n")
    _replace(sheet_path, analysis.worksheet.to_csv(index=False, na_rep=""))
    return summary_path, sheet_path
