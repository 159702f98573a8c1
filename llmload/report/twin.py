"""`llmload fit RUN_DIR [-o twin.yaml]`: the sim settings fitted to a run (`analysis.fit`), printed with
their uncertainty, the ones the run could not observe named, and written as a sim YAML."""

from __future__ import annotations

from pathlib import Path

from llmload.report.run_inputs import check_run_dir

__all__ = ["fit_command"]


def fit_command(run_dir: str | Path, *, output: str | Path | None = None) -> int:
    """Fit, print one line per setting, write the YAML to `output` (stdout when None); exit code 0."""
    import analysis
    from analysis.fit import describe, fit_run, twin_yaml

    root = check_run_dir(run_dir)
    fit = fit_run(analysis.load_run(root))
    text = twin_yaml(fit, source=str(root))
    if output is None:
        print(text, end="")
        return 0
    width = max((len(k) for k in [e.key for e in fit.estimates] + list(fit.unobserved)), default=0)
    for e in fit.estimates:
        print(f"{e.key:<{width}}  {describe(e)}: {e.basis}")
    for key, why in fit.unobserved.items():
        print(f"{key:<{width}}  not observed: {why}")
    Path(output).write_text(text, encoding="utf-8")
    print(f"llmload: sim twin written to {output} (llmload sim --flavor {fit.flavor} --config {output})")
    return 0
