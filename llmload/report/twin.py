"""`llmload fit RUN_DIR [-o twin.yaml]`: the sim settings fitted to a run (`analysis.fit`), printed with
their uncertainty, the ones the run could not observe named, and written as a sim YAML."""

from __future__ import annotations

import sys
from pathlib import Path

from llmload.report.run_inputs import check_run_dir

__all__ = ["fit_command"]


def fit_command(run_dir: str | Path, *, output: str | Path | None = None) -> int:
    """Fit, print one line per setting, write the YAML to `output` (stdout when None); exit code 0, or 1
    when the run does not fit the engine's model (`Fit.misfit`: said on stderr, and the YAML is marked so
    that `llmload plan --twin` and `refine.prior` refuse it)."""
    import analysis
    from analysis.fit import describe, fit_run, twin_yaml

    root = check_run_dir(run_dir)
    fit = fit_run(analysis.load_run(root))
    text = twin_yaml(fit, source=str(root))
    for why in fit.misfit:
        print(f"llmload: the run does not fit the twin's model: {why}", file=sys.stderr)
    code = 1 if fit.misfit else 0
    if output is None:
        print(text, end="")
        return code
    width = max((len(k) for k in [e.key for e in fit.estimates] + list(fit.unobserved)), default=0)
    for e in fit.estimates:
        print(f"{e.key:<{width}}  {describe(e)}: {e.basis}")
    for key, why in fit.unobserved.items():
        print(f"{key:<{width}}  not observed: {why}")
    Path(output).write_text(text, encoding="utf-8")
    what = "NOT a twin (marked so)" if fit.misfit else "sim twin"
    print(f"llmload: {what} written to {output} (llmload sim --flavor {fit.flavor} --config {output})")
    return code
