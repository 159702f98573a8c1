"""`llmload compare A B [C...]`: runs of different deployments side by side (seed 003's question).

Per run: the last passing sustained rate, goodput at the SLO (the goodput of the last passing step),
goodput per GPU, and with `conditions.cost_per_hour` the cost per million good output tokens and per
thousand good requests. Per step (matched by label, else by target rate): the key numbers and their
differences from the first run. And which fixed conditions differ, because a capacity figure holds only
for its conditions. Each run is re-analysed with the SLO it was configured with, so every figure comes
from the same definitions as its own report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmload.errors import ConfigError
from llmload.report import plots
from llmload.report.answer import rate_of
from llmload.report.html import cell_text, figure, is_blank, kv_table, page, section, table
from llmload.report.manifest_view import conditions_of
from llmload.report.rereport import check_run_dir, client_from_manifest, slo_from_manifest
from llmload.report.text import text_table

__all__ = [
    "COST_DEFINITIONS",
    "RunFigures",
    "compare_runs",
    "condition_diff",
    "load_figures",
    "render_comparison",
    "run_figures",
    "step_comparison",
]

COST_DEFINITIONS = (
    ("goodput at the SLO", "goodput (req/s) of the last passing step: ok requests meeting every "
     "threshold ÷ window length"),
    ("good tokens per second", "output tokens of those good requests ÷ window length of that step"),
    ("goodput per GPU", "goodput at the SLO ÷ conditions.gpus"),
    ("cost per 1M good tokens", "cost_per_hour ÷ (good tokens per second × 3600) × 1e6"),
    ("cost per 1k good requests", "cost_per_hour ÷ (goodput at the SLO × 3600) × 1e3"),
)
_STEP_NUMBERS = (("offered_rate", "offered/s", 1.0), ("goodput", "goodput/s", 1.0),
                 ("ttft_p95_s", "TTFT p95 ms", 1000.0), ("e2e_p95_s", "E2E p95 ms", 1000.0))


@dataclass
class RunFigures:
    """One run's capacity and cost figures (see COST_DEFINITIONS)."""

    name: str
    verdict: str
    last_passing_rate: float | None
    goodput_at_slo: float | None
    good_tokens_per_s: float | None
    gpus: float | None
    cost_per_hour: float | None
    steps: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    manifest: dict = field(repr=False, default_factory=dict)

    @property
    def goodput_per_gpu(self) -> float | None:
        return self.goodput_at_slo / self.gpus if self.goodput_at_slo is not None and self.gpus else None

    @property
    def cost_per_million_good_tokens(self) -> float | None:
        if self.cost_per_hour is None or not self.good_tokens_per_s:
            return None
        return self.cost_per_hour / (self.good_tokens_per_s * 3600) * 1e6

    @property
    def cost_per_thousand_good_requests(self) -> float | None:
        if self.cost_per_hour is None or not self.goodput_at_slo:
            return None
        return self.cost_per_hour / (self.goodput_at_slo * 3600) * 1e3


def _number(value: Any) -> float | None:
    return None if is_blank(value) else float(value)


def _passing_step(steps: pd.DataFrame, last: float | None) -> pd.Series | None:
    if last is None or steps.empty:
        return None
    passed = steps[steps.get("verdict", pd.Series("", index=steps.index)).astype(str) == "pass"]
    if passed.empty:
        return None
    distance = passed.apply(lambda s: abs((rate_of(s) or float("inf")) - last), axis=1)
    return passed.loc[distance.idxmin()]


def run_figures(name: str, steps: pd.DataFrame, summary: dict, manifest: dict | None,
                requests: pd.DataFrame | None) -> RunFigures:
    """The figures of one analysed run (pure: frames in, numbers out)."""
    last = _number((summary or {}).get("last_passing_rate"))
    step = _passing_step(steps, last)
    goodput = tokens = None
    if step is not None:
        goodput = _number(step.get("goodput"))
        window = _number(step.get("window_s"))
        tokens = _number(step.get("good_output_tokens_per_s"))  # the step table's (analysis.metrics)
        if tokens is None and requests is not None and window and \
                {"step", "good", "output_tokens"} <= set(requests.columns):
            mine = requests[requests["step"].astype(str) == str(step.get("label"))]
            if "in_window" in mine.columns:
                mine = mine[mine["in_window"].fillna(False).astype(bool)]
            good = mine[mine["good"].fillna(False).astype(bool)]
            tokens = float(pd.to_numeric(good["output_tokens"], errors="coerce").fillna(0).sum()) / window
    conditions = conditions_of(manifest)
    return RunFigures(name=name, verdict=str((summary or {}).get("verdict") or ""), last_passing_rate=last,
                      goodput_at_slo=goodput, good_tokens_per_s=tokens, gpus=_number(conditions.get("gpus")),
                      cost_per_hour=_number(conditions.get("cost_per_hour")), steps=steps,
                      manifest=manifest or {})


def load_figures(run_dir: str | Path, name: str | None = None) -> RunFigures:
    """Re-analyse one run directory with its configured SLO and compute its figures."""
    root = check_run_dir(run_dir)
    import analysis

    run = analysis.load_run(root)
    manifest_file = str(root / "manifest.json")
    result = analysis.analyze(run, slo_from_manifest(run.manifest, file=manifest_file),
                              client_from_manifest(run.manifest, file=manifest_file))
    return run_figures(name or root.name, result.steps, result.summary, run.manifest, result.requests)


def _step_key(step: pd.Series) -> str:
    return str(step.get("label"))


def step_comparison(runs: Sequence[RunFigures]) -> pd.DataFrame:
    """One row per step present in any run: each run's key numbers, and differences from the first run.

    Steps are matched by label; a run whose labels share nothing with the first is matched by target
    rate instead. Unrun steps contribute blanks.
    """
    base_labels = set(runs[0].steps.get("label", pd.Series(dtype=str)).astype(str))
    frames = []
    for i, run in enumerate(runs):
        steps = run.steps
        by_label = bool(base_labels & set(steps.get("label", pd.Series(dtype=str)).astype(str)))
        keys = steps["label"].astype(str) if by_label or "target_rate" not in steps else \
            steps["target_rate"].map(lambda r: f"r{float(r):.2f}")
        unrun = steps.get("status", pd.Series("run", index=steps.index)).astype(str) == "not_run"
        part = pd.DataFrame({"step": keys.to_numpy(), "rate": steps.apply(rate_of, axis=1).to_numpy()})
        for column, _, _ in _STEP_NUMBERS:
            values = pd.to_numeric(steps.get(column, pd.Series(float("nan"), index=steps.index)),
                                   errors="coerce").where(~unrun)
            part[f"{column}#{i}"] = values.to_numpy()
        part[f"verdict#{i}"] = steps.get("verdict", pd.Series("", index=steps.index)).astype(object).where(
            ~unrun, None).to_numpy()
        frames.append(part.drop_duplicates("step").set_index("step"))
    out = frames[0]
    for part in frames[1:]:
        out = out.join(part.drop(columns="rate"), how="outer")
        out["rate"] = out["rate"].fillna(part["rate"])
    for i in range(1, len(runs)):
        for column in ("goodput", "ttft_p95_s", "e2e_p95_s"):
            out[f"{column}#diff{i}"] = out[f"{column}#{i}"] - out[f"{column}#0"]
            out[f"{column}#ratio{i}"] = out[f"{column}#{i}"] / out[f"{column}#0"]
    return out.sort_values("rate", kind="stable").reset_index()


def condition_diff(manifests: Sequence[dict]) -> list[tuple[str, list[Any]]]:
    """The fixed conditions (and the fingerprint) that differ between runs: (key, value per run).

    Each run is compared with the first by the telemetry's `diff_conditions` (a plain dict comparison
    when that module is absent), over the recorded conditions completed by the config's.
    """
    conditions = [conditions_of(m) for m in manifests]
    try:
        from llmload.telemetry.manifest import diff_conditions
    except ImportError:
        def diff_conditions(a: dict, b: dict) -> list[tuple[str, Any, Any]]:
            ca, cb = a.get("conditions") or {}, b.get("conditions") or {}
            return [(k, ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb))
                    if json.dumps(ca.get(k), sort_keys=True, default=str)
                    != json.dumps(cb.get(k), sort_keys=True, default=str)]
    keys: list[str] = []
    for other in conditions[1:]:
        for key, *_ in diff_conditions({"conditions": conditions[0]}, {"conditions": other}):
            if key not in keys:
                keys.append(key)
    rows = [(f"conditions.{k}", [c.get(k) for c in conditions]) for k in sorted(keys)]
    prints = [json.dumps((m or {}).get("fingerprint"), sort_keys=True, default=str) for m in manifests]
    if len(set(prints)) > 1:
        rows.append(("fingerprint", [(m or {}).get("fingerprint") for m in manifests]))
    return rows


def _run_rows(runs: Sequence[RunFigures]) -> tuple[list[str], list[list[Any]]]:
    headers = ["run", "verdict", "last passing req/s", "goodput@SLO req/s", "good tok/s", "GPUs",
               "goodput/GPU", "cost/h", "cost per 1M good tok", "cost per 1k good req",
               f"last passing ÷ {runs[0].name}", f"goodput/GPU ÷ {runs[0].name}"]
    base = runs[0]
    rows = [[r.name, r.verdict, r.last_passing_rate, r.goodput_at_slo, r.good_tokens_per_s, r.gpus,
             r.goodput_per_gpu, r.cost_per_hour, r.cost_per_million_good_tokens,
             r.cost_per_thousand_good_requests, _ratio(r.last_passing_rate, base.last_passing_rate),
             _ratio(r.goodput_per_gpu, base.goodput_per_gpu)] for r in runs]
    return headers, rows


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def _step_rows(runs: Sequence[RunFigures], steps: pd.DataFrame) -> tuple[list[str], list[list[Any]]]:
    headers, getters = ["step"], [lambda row: row["step"]]
    for column, label, scale in _STEP_NUMBERS:
        for i, run in enumerate(runs):
            headers.append(f"{label} [{run.name}]")
            getters.append(lambda row, c=f"{column}#{i}", s=scale: _scaled(row[c], s))
        if column != "offered_rate":
            for i in range(1, len(runs)):
                headers.append(f"Δ{label.split()[0]} {runs[i].name}")
                getters.append(lambda row, c=f"{column}#diff{i}", s=scale: _scaled(row[c], s))
    for i, run in enumerate(runs):
        headers.append(f"verdict [{run.name}]")
        getters.append(lambda row, c=f"verdict#{i}": cell_text(row[c]))
    return headers, [[g(row) for g in getters] for _, row in steps.iterrows()]


def _scaled(value: Any, scale: float) -> float | None:
    return None if is_blank(value) else float(value) * scale


def render_comparison(runs: Sequence[RunFigures]) -> str:
    """The comparison as a self-contained HTML page."""
    steps = step_comparison(runs)
    run_headers, run_rows = _run_rows(runs)
    step_headers, step_rows = _step_rows(runs, steps)
    differing = condition_diff([r.manifest for r in runs])
    diff_rows = [dict(zip(["condition", *[r.name for r in runs]], [k, *map(cell_text, v)], strict=True))
                 for k, v in differing]
    overlay = [(r.name, r.steps) for r in runs]
    body = "".join([
        section("runs", "Capacity and cost per run",
                table([dict(zip(run_headers, row, strict=True)) for row in run_rows], table_id="runs-table")
                + kv_table(COST_DEFINITIONS, table_id="cost-definitions")),
        section("conditions", "Fixed conditions that differ",
                table(diff_rows, table_id="conditions-table") if diff_rows
                else '<p class="muted">No recorded condition differs.</p>'),
        section("steps", "Step by step",
                table([dict(zip(step_headers, row, strict=True)) for row in step_rows], table_id="steps-table")
                + figure(plots.rates_overlay_plot(overlay, "goodput", "goodput (req/s)", salt="cmp-goodput"),
                         plot_id="plot-compare-goodput",
                         caption="Goodput against offered rate, one line per run (ladder/refine steps).")
                + figure(plots.rates_overlay_plot(overlay, "ttft_p95_s", "TTFT p95 (ms)", 1000.0,
                                                  salt="cmp-ttft"), plot_id="plot-compare-ttft",
                         caption="TTFT p95 (first output − sent_at) against offered rate, one line per run.")),
    ])
    return page("llmload compare: " + " vs ".join(r.name for r in runs), body,
                nav=[("runs", "Capacity and cost"), ("conditions", "Conditions"), ("steps", "Steps")])


def compare_runs(run_dirs: Sequence[str | Path], *, out: str | Path | None = None) -> int:
    """Print the comparison of two or more run directories; with `out`, also write it as HTML."""
    if len(run_dirs) < 2:
        raise ConfigError("compare needs at least two run directories")
    names = [Path(d).name or str(d) for d in run_dirs]
    if len(set(names)) < len(names):
        names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
    runs = [load_figures(d, n) for d, n in zip(run_dirs, names, strict=True)]
    run_headers, run_rows = _run_rows(runs)
    print(text_table(run_headers, run_rows))
    for term, definition in COST_DEFINITIONS:
        print(f"  {term}: {definition}")
    print()
    step_headers, step_rows = _step_rows(runs, step_comparison(runs))
    print(text_table(step_headers, step_rows))
    differing = condition_diff([r.manifest for r in runs])
    print("\nfixed conditions that differ:" if differing else "\nno recorded fixed condition differs")
    for key, values in differing:
        print(f"  {key}: " + " | ".join(f"{r.name}={cell_text(v)}" for r, v in zip(runs, values, strict=True)))
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_comparison(runs), encoding="utf-8")
        print(f"\ncomparison: {path}")
    return 0
