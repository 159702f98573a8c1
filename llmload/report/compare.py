"""`llmload compare A B [C...]`: runs of different deployments side by side (seed 003's question).

Per run: the knee with its interval and the target that binds (`analysis.knee.knee_of`, as every surface
reads it), the highest passing step's realised offered rate, goodput at the SLO (the goodput of the last passing step),
goodput per GPU, and with `conditions.cost_per_hour` the cost per million good output tokens and per
thousand good requests; where a run measured GPU energy, its joules per good output token at the knee
(summary.json `energy_at_knee`, METRICS.md "Energy"), a column shown only when some run has it. Per step (matched by phase and label, else by phase and target rate; two steps
of one run never share a row): the key numbers and their differences from the baseline run. And which
fixed conditions differ, because a capacity figure holds only for its conditions.

Each run is re-analysed with the SLO of its current analysis (the last `llmload report --slo`, else the
one it was configured with: `run_inputs.current_slo`), so every figure is its own report's; a run
re-analysed with another SLO is named in a note. Runs judged against different SLOs, sent different request mixes or
driven by a different number of generator processes are flagged: their figures are not like for like.
An invalid run (the generator fell behind) is never the baseline of the ratios and differences (the
first valid run is), and its goodput per GPU and costs are left blank.

The terminal view is narrow whatever the number of runs: the per-run figures are printed one figure a
line (runs as columns, in groups that fit `WIDTH` characters) and the steps one row per step and run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmload.errors import ConfigError
from llmload.report import plots
from llmload.report.answer import rate_of
from llmload.report.html import cell_text, esc, figure, is_blank, kv_table, page, section, table
from llmload.report.manifest_view import conditions_of, flatten
from llmload.report.run_inputs import check_run_dir, client_from_manifest, current_slo, slo_from_manifest
from llmload.report.text import text_table

__all__ = [
    "COST_DEFINITIONS",
    "WIDTH",
    "RunFigures",
    "baseline_index",
    "compare_runs",
    "condition_diff",
    "load_figures",
    "render_comparison",
    "run_figures",
    "setup_diff",
    "step_comparison",
]

#: the widest line the terminal view aims for
WIDTH = 120
#: run names longer than this are shown as #1, #2 ... with a legend in the terminal view
_NAME_WIDTH = 20

COST_DEFINITIONS = (
    ("goodput at the SLO", "goodput (req/s) of the last passing step: ok requests meeting every "
     "threshold ÷ window length"),
    ("good tokens per second", "output tokens of those good requests that finished in the window ÷ window"),
    ("goodput per GPU", "goodput at the SLO ÷ conditions.gpus"),
    ("cost per 1M good tokens", "cost_per_hour ÷ (good tokens per second × 3600) × 1e6"),
    ("cost per 1k good requests", "cost_per_hour ÷ (goodput at the SLO × 3600) × 1e3"),
    ("J per good token at the knee", "GPU energy over a step's window ÷ its good output tokens, interpolated "
     "between the judged steps around the knee rate (only where GPU energy was measured)"),
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
    #: the knee (`analysis.knee.Knee`) of the run's current analysis, None without a rate axis
    knee: Any = field(repr=False, default=None)
    #: where the SLO came from when it is not the run's configured one (the last `report --slo`)
    reanalysed: str | None = None
    #: the SLO the figures were judged with (None: the run's configured one)
    slo: Any = field(repr=False, default=None)
    #: summary.json's `energy_at_knee` (None: no GPU energy measured)
    energy_at_knee: dict | None = field(repr=False, default=None)

    @property
    def joules_per_good_token_at_knee(self) -> float | None:
        if not self.valid or not isinstance(self.energy_at_knee, dict):
            return None
        return _number(self.energy_at_knee.get("joules_per_good_output_token"))

    @property
    def knee_text(self) -> str | None:
        """`4.6 (4.4 to 4.8, 90%)`: the knee with its interval, as precise as the interval allows."""
        from analysis.knee import knee_sentence

        if self.knee is None:
            return None
        text = knee_sentence(self.knee)
        return text[len("knee "):].split(":")[0].replace(" req/s", "") if text.startswith("knee ") else text

    @property
    def valid(self) -> bool:
        """False for an invalid run: its generator fell behind, so its costs are not figures to compare."""
        return self.verdict != "invalid"

    @property
    def goodput_per_gpu(self) -> float | None:
        if not self.valid:
            return None
        return self.goodput_at_slo / self.gpus if self.goodput_at_slo is not None and self.gpus else None

    @property
    def cost_per_million_good_tokens(self) -> float | None:
        if not self.valid or self.cost_per_hour is None or not self.good_tokens_per_s:
            return None
        return self.cost_per_hour / (self.good_tokens_per_s * 3600) * 1e6

    @property
    def cost_per_thousand_good_requests(self) -> float | None:
        if not self.valid or self.cost_per_hour is None or not self.goodput_at_slo:
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
    distance = [abs((rate_of(s) or float("inf")) - last) for _, s in passed.iterrows()]
    return passed.iloc[distance.index(min(distance))]


def run_figures(name: str, steps: pd.DataFrame, summary: dict, manifest: dict | None,
                requests: pd.DataFrame | None) -> RunFigures:
    """The figures of one analysed run (pure: frames in, numbers out)."""
    from analysis.knee import knee_of
    from llmload.report.answer import last_passing_step

    step = last_passing_step(steps, summary)
    last = rate_of(step) if step is not None else _number((summary or {}).get("last_passing_rate"))
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
                      manifest=manifest or {}, knee=knee_of(summary or {}),
                      energy_at_knee=(summary or {}).get("energy_at_knee"))


def load_figures(run_dir: str | Path, name: str | None = None) -> RunFigures:
    """Re-analyse one run directory with its configured SLO and compute its figures."""
    root = check_run_dir(run_dir)
    import analysis

    run = analysis.load_run(root)
    manifest_file = str(root / "manifest.json")
    slo, source = current_slo(root, run.manifest)
    result = analysis.analyze(run, slo, client_from_manifest(run.manifest, file=manifest_file))
    figures = run_figures(name or root.name, result.steps, result.summary, run.manifest, result.requests)
    return replace(figures, reanalysed=None if source == "the run's configured SLO" else source, slo=slo)


def baseline_index(runs: Sequence[RunFigures]) -> int | None:
    """The run the ratios and differences are taken against: the first valid one (None: all invalid)."""
    return next((i for i, r in enumerate(runs) if r.valid), None)


def _step_keys(steps: pd.DataFrame, by_label: bool) -> pd.Series:
    """Each step's row key within its phase: its label, or its target rate when labels do not match
    across runs; a key repeated inside one run gets the label appended (two steps, two rows)."""
    labels = steps.get("label", pd.Series("", index=steps.index)).astype(str)
    if by_label or "target_rate" not in steps:
        keys = labels
    else:
        keys = steps["target_rate"].map(lambda r: "" if is_blank(r) else f"r{float(r):.2f}")
    phases = steps.get("phase", pd.Series("ladder", index=steps.index)).astype(str)
    repeated = pd.DataFrame({"phase": phases, "key": keys}).duplicated(keep=False)
    return keys.where(~repeated | (keys == labels), keys + " (" + labels + ")")


def step_comparison(runs: Sequence[RunFigures], base: int | None = 0) -> pd.DataFrame:
    """One row per (phase, step) present in any run: each run's key numbers and, for every other run,
    its differences and ratios from run `base` (none when `base` is None).

    Steps are matched by phase and label; a run whose labels share nothing with the first is matched by
    phase and target rate instead. Two steps of one run never share a row. Unrun steps contribute blanks.
    """
    base_labels = set(runs[0].steps.get("label", pd.Series(dtype=str)).astype(str))
    frames = []
    for i, run in enumerate(runs):
        steps = run.steps
        by_label = bool(base_labels & set(steps.get("label", pd.Series(dtype=str)).astype(str)))
        keys = _step_keys(steps, by_label)
        unrun = steps.get("status", pd.Series("run", index=steps.index)).astype(str) == "not_run"
        part = pd.DataFrame({"phase": steps.get("phase", pd.Series("ladder", index=steps.index)).astype(str)
                             .to_numpy(), "step": keys.to_numpy(),
                             "rate": np.array([rate_of(s) for _, s in steps.iterrows()], dtype=float)})
        for column, _, _ in _STEP_NUMBERS:
            values = pd.to_numeric(steps.get(column, pd.Series(float("nan"), index=steps.index)),
                                   errors="coerce").where(~unrun)
            part[f"{column}#{i}"] = values.to_numpy()
        part[f"verdict#{i}"] = steps.get("verdict", pd.Series("", index=steps.index)).astype(object).where(
            ~unrun, None).to_numpy()
        frames.append(part.set_index(["phase", "step"]))
    out = frames[0]
    for part in frames[1:]:
        out = out.join(part.drop(columns="rate"), how="outer")
        out["rate"] = out["rate"].fillna(part["rate"])
    for i in range(len(runs)):
        if base is None or i == base:
            continue
        for column in ("goodput", "ttft_p95_s", "e2e_p95_s"):
            out[f"{column}#diff{i}"] = out[f"{column}#{i}"] - out[f"{column}#{base}"]
            out[f"{column}#ratio{i}"] = out[f"{column}#{i}"] / out[f"{column}#{base}"]
    return out.reset_index().sort_values(["rate", "phase"], kind="stable").reset_index(drop=True)


def condition_diff(manifests: Sequence[dict]) -> list[tuple[str, list[Any]]]:
    """The fixed conditions (and the fingerprint) that differ between runs: (key, value per run).

    Each run is compared with the first by the telemetry's `diff_conditions` (a plain dict comparison
    when that module is absent), over the recorded conditions completed by the config's.
    """
    conditions = [conditions_of(m) for m in manifests]
    try:
        from llmload.telemetry.manifest import diff_conditions
    except ImportError:
        def diff_conditions(manifest_a: dict[str, Any], manifest_b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
            ca, cb = manifest_a.get("conditions") or {}, manifest_b.get("conditions") or {}
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


def _flat_differences(values: Sequence[Any], prefix: str) -> list[tuple[str, list[Any]]]:
    flat = [dict(flatten(v, prefix)) if isinstance(v, dict) else {prefix: v} for v in values]
    keys = sorted(set().union(*flat))
    return [(k, [f.get(k) for f in flat]) for k in keys
            if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat}) > 1]


def setup_diff(runs: Sequence[RunFigures]) -> list[tuple[str, list[Any]]]:
    """How the runs were measured, where it differs: the SLO each was judged with, the request mix, the
    generator's process count (key, value per run). Any row means the figures are not like for like."""
    slos, mixes = [], []
    for run in runs:
        config = (run.manifest or {}).get("config") or {}
        try:
            slo = (run.slo or slo_from_manifest(run.manifest)).model_dump(mode="json")
        except ConfigError:
            slo = config.get("slo")
        slos.append({_threshold_key(t): t["value_s"] for t in slo.pop("thresholds", [])} | slo
                    if isinstance(slo, dict) else slo)
        mixes.append(config.get("requests"))
    rows = _flat_differences(slos, "slo") + _flat_differences(mixes, "requests")
    workers = [(r.manifest or {}).get("workers") for r in runs]
    if len({json.dumps(w) for w in workers}) > 1:
        rows.append(("generator processes", workers))
    return rows


def _threshold_key(threshold: dict) -> str:
    """`ttft_p95_s` for a dumped threshold (metric ttft, percentile 95)."""
    return f"{threshold['metric']}_p{float(threshold['percentile']):g}_s"


def _run_rows(runs: Sequence[RunFigures], base: int | None) -> tuple[list[str], list[list[Any]]]:
    name = runs[base].name if base is not None else "baseline"
    headers = ["run", "verdict", "knee req/s", "binds", "last passing req/s", "goodput@SLO req/s", "good tok/s", "GPUs",
               "goodput/GPU", "cost/h", "cost per 1M good tok", "cost per 1k good req",
               f"last passing ÷ {name}", f"goodput/GPU ÷ {name}"]
    ref = runs[base] if base is not None else None
    rows = [[r.name, r.verdict, r.knee_text, getattr(r.knee, "binding", None), r.last_passing_rate,
             r.goodput_at_slo, r.good_tokens_per_s, r.gpus,
             r.goodput_per_gpu, r.cost_per_hour, r.cost_per_million_good_tokens,
             r.cost_per_thousand_good_requests,
             _ratio(r.last_passing_rate, ref.last_passing_rate) if ref and r.valid else None,
             _ratio(r.goodput_per_gpu, ref.goodput_per_gpu) if ref else None] for r in runs]
    if any(r.joules_per_good_token_at_knee is not None for r in runs):  # GPU energy measured somewhere
        at = headers.index("cost per 1k good req") + 1
        headers.insert(at, "J per good tok @knee")
        for r, row in zip(runs, rows, strict=True):
            row.insert(at, r.joules_per_good_token_at_knee)
    return headers, rows


def _definitions(runs: Sequence[RunFigures]) -> tuple[tuple[str, str], ...]:
    """COST_DEFINITIONS, the energy one only when some run has the figure (no GPU: nothing said)."""
    if any(r.joules_per_good_token_at_knee is not None for r in runs):
        return COST_DEFINITIONS
    return tuple(d for d in COST_DEFINITIONS if not d[0].startswith("J per good token"))


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def _step_rows(runs: Sequence[RunFigures], steps: pd.DataFrame,
               base: int | None) -> tuple[list[str], list[list[Any]]]:
    headers = ["phase", "step"]
    getters: list[Callable[[pd.Series], Any]] = [lambda row: row["phase"], lambda row: row["step"]]
    for i, run in enumerate(runs):  # the verdicts first: seen without scrolling, whatever the width
        headers.append(f"verdict [{run.name}]")
        getters.append(partial(_verdict_cell, f"verdict#{i}"))
    for column, label, scale in _STEP_NUMBERS:
        for i, run in enumerate(runs):
            headers.append(f"{label} [{run.name}]")
            getters.append(partial(_scaled_cell, f"{column}#{i}", scale))
        if column != "offered_rate":
            for i in range(len(runs)):
                if base is None or i == base:
                    continue
                headers.append(f"Δ{label.split()[0]} {runs[i].name}")
                getters.append(partial(_scaled_cell, f"{column}#diff{i}", scale))
    return headers, [[g(row) for g in getters] for _, row in steps.iterrows()]


def _scaled(value: Any, scale: float) -> float | None:
    return None if is_blank(value) else float(value) * scale


def _scaled_cell(column: str, scale: float, row: pd.Series) -> float | None:
    return _scaled(row[column], scale)


def _verdict_cell(column: str, row: pd.Series) -> str:
    return cell_text(row[column])


def _notes(runs: Sequence[RunFigures], base: int | None, setup: list[tuple[str, list[Any]]]) -> list[str]:
    """The sentences that qualify the figures: invalid runs, the baseline, what was measured differently."""
    out = []
    for run in runs:
        if run.reanalysed:
            out.append(f"{run.name} was re-analysed: its figures follow {run.reanalysed}, not its configured SLO.")
        if not run.valid:
            out.append(f"{run.name} is invalid (the generator fell behind): its goodput per GPU and costs are "
                       "left blank and it is not the baseline.")
    if base is None:
        out.append("Every run is invalid: no ratios or differences are taken.")
    elif base:
        out.append(f"Ratios and differences are taken against {runs[base].name}, the first valid run.")
    if setup:
        out.append("Not like for like: the runs differ in " + ", ".join(k for k, _ in setup)
                   + " (below); compare their figures with that in mind.")
    return out


def render_comparison(runs: Sequence[RunFigures]) -> str:
    """The comparison as a self-contained HTML page."""
    base = baseline_index(runs)
    steps = step_comparison(runs, base)
    run_headers, run_rows = _run_rows(runs, base)
    step_headers, step_rows = _step_rows(runs, steps, base)
    setup = setup_diff(runs)
    differing = setup + condition_diff([r.manifest for r in runs])
    diff_rows = [dict(zip(["condition", *[r.name for r in runs]], [k, *map(cell_text, v)], strict=True))
                 for k, v in differing]
    notes = "".join(f'<p class="a">{esc(n)}</p>' for n in _notes(runs, base, setup))
    overlay = [(r.name, r.steps) for r in runs]
    body = "".join([
        section("runs", "Capacity and cost per run",
                notes + table([dict(zip(run_headers, row, strict=True)) for row in run_rows],
                              table_id="runs-table")
                + kv_table(_definitions(runs), table_id="cost-definitions")),
        section("conditions", "What differs: measurement set-up and fixed conditions",
                table(diff_rows, table_id="conditions-table") if diff_rows
                else '<p class="muted">No recorded condition, SLO, request mix or process count differs.</p>'),
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
                nav=[("runs", "Capacity and cost"), ("conditions", "What differs"), ("steps", "Steps")])


def _transposed(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int = WIDTH) -> str:
    """Per-run rows printed one figure a line with runs as columns, in groups of runs that fit `width`."""
    texts = [[v if isinstance(v, str) else cell_text(v) for v in row] for row in rows]
    label_w = max(len(h) for h in headers[1:]) + 2
    groups: list[list[int]] = []
    used = width
    for i, row in enumerate(texts):
        need = max(len(v) for v in row) + 2
        if groups and used + need <= width:
            groups[-1].append(i)
            used += need
        else:
            groups.append([i])
            used = label_w + need
    return "\n\n".join(
        text_table(["figure", *[texts[i][0] for i in group]],
                   [[figure, *[texts[i][k + 1] for i in group]] for k, figure in enumerate(headers[1:])])
        for group in groups)


def _long_step_rows(runs: Sequence[RunFigures], steps: pd.DataFrame,
                    base: int | None) -> tuple[list[str], list[list[Any]]]:
    """Steps one row per (step, run), so the table is as narrow for five runs as for two."""
    headers = ["phase", "step", "run", "offered/s", "goodput/s", "TTFT p95 ms", "E2E p95 ms",
               "ΔTTFT ms", "ΔE2E ms", "verdict"]
    rows = []
    for _, row in steps.iterrows():
        for i, run in enumerate(runs):
            if is_blank(row[f"verdict#{i}"]) and is_blank(row[f"offered_rate#{i}"]):
                continue
            diff = base is not None and i != base
            rows.append([row["phase"], row["step"], run.name, _scaled(row[f"offered_rate#{i}"], 1.0),
                         _scaled(row[f"goodput#{i}"], 1.0), _scaled(row[f"ttft_p95_s#{i}"], 1000.0),
                         _scaled(row[f"e2e_p95_s#{i}"], 1000.0),
                         _scaled(row[f"ttft_p95_s#diff{i}"], 1000.0) if diff else None,
                         _scaled(row[f"e2e_p95_s#diff{i}"], 1000.0) if diff else None,
                         cell_text(row[f"verdict#{i}"])])
    return headers, rows


def _print_differences(rows: list[tuple[str, list[Any]]], labels: Sequence[str]) -> None:
    for key, values in rows:
        pairs = list(zip(labels, map(cell_text, values), strict=True))
        line = f"  {key}: " + " | ".join(f"{tag}={v}" for tag, v in pairs)
        print(line if len(line) <= WIDTH else f"  {key}:" + "".join(f"\n    {tag} = {v}" for tag, v in pairs))


def compare_runs(run_dirs: Sequence[str | Path], *, out: str | Path | None = None) -> int:
    """Print the comparison of two or more run directories; with `out`, also write it as HTML."""
    if len(run_dirs) < 2:
        raise ConfigError("compare needs at least two run directories")
    names = [Path(d).name or str(d) for d in run_dirs]
    if len(set(names)) < len(names):
        names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
    runs = [load_figures(d, n) for d, n in zip(run_dirs, names, strict=True)]
    base = baseline_index(runs)
    setup = setup_diff(runs)
    for note in _notes(runs, base, setup):
        print(f"llmload: note: {note}")
    labels = [r.name for r in runs]
    if max(len(n) for n in labels) > _NAME_WIDTH:  # long directory names: short tags, and a legend
        labels = [f"#{i + 1}" for i in range(len(runs))]
        print("runs:" + "".join(f"\n  {tag} = {r.name}" for tag, r in zip(labels, runs, strict=True)))
    shown = [replace(r, name=tag) for r, tag in zip(runs, labels, strict=True)]
    print(_transposed(*_run_rows(shown, base)))
    for term, definition in _definitions(runs):
        print(f"  {term}: {definition}")
    print()
    print(text_table(*_long_step_rows(shown, step_comparison(runs, base), base)))
    if base is not None and len(runs) > 1:
        print(f"  Δ: the run's value minus {labels[base]}'s")
    differing = condition_diff([r.manifest for r in runs])
    if setup:
        print("\nmeasured differently (not like for like):")
        _print_differences(setup, labels)
    print("\nfixed conditions that differ:" if differing else "\nno recorded fixed condition differs")
    _print_differences(differing, labels)
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_comparison(runs), encoding="utf-8")
        print(f"\ncomparison: {path}")
    return 0
