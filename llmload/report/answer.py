"""The report's first words: the seed's question, the answer in plain sentences, and the warnings.

Pure functions over the `Analysis` (see docs/ARCHITECTURE.md): the knee with its interval and the target
that binds (`analysis.knee.knee_of`, the one reader every surface uses), why the knee search stopped, the
highest passing and the first failing step at their realised offered rates and what failed there, under
which fixed conditions; "invalid" and "insufficient"
are said plainly, never softened into a number. Warnings the analysis did not raise itself but that
the data show (generator behind, warm prefix cache, output lengths not honoured, too few samples, SLO
keys not checked) are added here so no report goes out without them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from llmload import slo as slo_dims
from llmload.report.html import as_number, cell_text, is_blank
from llmload.report.manifest_view import conditions_of
from shapes.boundary import REALISED_RATE_TOLERANCE
from shapes.boundary import realised_rate_note as rate_note
from shapes.phases import rate_phases, sustained_phases

#: the phases drawn and stated against offered rate (`llmload.report.plots.RATE_PHASES`, which imports
#: matplotlib: the summary's answer is made without it, e.g. in a run without a report)
_RATE_PHASES = rate_phases()

__all__ = [
    "BURST_QUESTION",
    "QUESTION",
    "SOAK_QUESTION",
    "question_of",
    "SLO_KEYS",
    "answer_sentences",
    "knee_text",
    "burst_sentences",
    "derived_warnings",
    "failing_detail",
    "first_failing_step",
    "fixed_conditions_text",
    "over_on_few_samples",
    "HEADLINE_CONDITIONS",
    "REALISED_RATE_TOLERANCE",
    "rate_of",
    "realised_rate_note",
    "soak_sentences",
    "thresholds_of",
]

QUESTION = ("With this model and this server configuration fixed, at what sustained arrival rate does "
            "the service stop meeting its response targets, and which target breaks first?")
#: the question of a run with no rate axis, only a trace replay (bursts against their uniform twin)
BURST_QUESTION = ("With this model and this server configuration fixed, what do the bursts of this traffic "
                  "cost against the same requests arriving evenly at the same mean rate, and which target "
                  "do they break?")
#: the question of a soak: does the service hold over time
SOAK_QUESTION = ("With this model and this server configuration fixed, does the service keep meeting its "
                 "response targets at a steady load over time, or does it drift?")


def question_of(steps: pd.DataFrame) -> str:
    """The question a run's report opens with: the rate question when any step is on the rate axis (a
    ladder, a knee search, `shape: auto`), else the burst question for a trace replay, the soak question
    for a soak, the rate question otherwise."""
    phases = set(steps.get("phase", pd.Series(dtype=object)).astype(str))
    if phases & set(rate_phases()):
        return QUESTION
    if phases & {"burst", "uniform"}:
        return BURST_QUESTION
    return SOAK_QUESTION if "soak" in phases else QUESTION

#: the SLO keys of CONFIG.md (`llmload.slo`); any of them absent from the SLO file is reported as "not checked"
SLO_KEYS = slo_dims.standard_keys()


def rate_of(step: pd.Series) -> float | None:
    """A step's offered rate, or its target rate when nothing was offered (not run)."""
    for key in ("offered_rate", "target_rate"):
        value = as_number(step.get(key))
        if value is not None:
            return value
    return None


def realised_rate_note(steps: pd.DataFrame, rate: Any) -> str:
    """` (offered 4.1 req/s realised)` when the passing sustained steps at target `rate` (the ladder
    result's last passing rate, a target) offered a rate more than `REALISED_RATE_TOLERANCE` off it,
    else "". Rates are the analysis' own: `target_rate` and `offered_rate` (METRICS.md)."""
    if is_blank(rate) or steps is None or steps.empty or "target_rate" not in steps or "offered_rate" not in steps:
        return ""
    target = float(rate)
    blank = pd.Series("", index=steps.index)
    phase = steps.get("phase", pd.Series("ladder", index=steps.index)).astype(str)
    verdict = steps.get("verdict", blank).astype(str)
    at = steps[phase.isin(sustained_phases()) & (verdict == "pass")
               & ((pd.to_numeric(steps["target_rate"], errors="coerce") - target).abs() < 1e-9)]
    return rate_note(target, pd.to_numeric(at["offered_rate"], errors="coerce").dropna())


def _rate_steps(steps: pd.DataFrame) -> pd.DataFrame:
    phase = steps.get("phase", pd.Series("ladder", index=steps.index)).astype(str)
    rated = steps[phase.isin(_RATE_PHASES)]
    if rated.empty:
        return rated
    order = pd.Series([rate_of(row) for _, row in rated.iterrows()], index=rated.index, dtype=float)
    return rated.assign(_rate=order).sort_values(["_rate", "index"] if "index" in rated else ["_rate"])


def first_failing_step(steps: pd.DataFrame, summary: dict | None = None) -> pd.Series | None:
    """The first failing sustained step: the one at `summary["first_failing_rate"]` when the analysis
    named it, else the lowest-rate ladder/refine step whose verdict is `fail`."""
    rated = _rate_steps(steps)
    failing = rated[rated.get("verdict", pd.Series("", index=rated.index)).astype(str) == "fail"]
    first_rate = as_number((summary or {}).get("first_failing_rate"))
    if first_rate is not None and "target_rate" in steps.columns:
        named = steps[(pd.to_numeric(steps["target_rate"], errors="coerce") == first_rate)
                      & (steps.get("verdict", pd.Series("", index=steps.index)).astype(str) == "fail")]
        if not named.empty:
            return named.iloc[0]
    return None if failing.empty else failing.iloc[0]


def thresholds_of(slo: Any) -> dict[str, tuple[float, float]]:
    """metric -> (percentile, seconds) from an SLO; the P95 one when a metric has several."""
    out: dict[str, tuple[float, float]] = {}
    for t in getattr(slo, "thresholds", []) or []:
        if t.metric not in out or t.percentile == 95:
            out[t.metric] = (t.percentile, t.value_s)
    return out


def failing_detail(step: pd.Series, slo: Any, names: list | None = None) -> list[str]:
    """Each failing dimension of a step (furthest over first, as the analysis orders them) with its
    measured value against the threshold when known."""
    if names is None:
        raw = step.get("failing")
        names = list(raw) if raw is not None and not isinstance(raw, str) else ([raw] if raw else [])
    limits = {t.key: t.value_s for t in getattr(slo, "thresholds", []) or []}
    out = []
    for name in names:
        found = slo_dims.dimension_of(str(name))
        column = found[0].figure_of(found[1]) if found and found[0].kind == "latency" else None
        value = as_number(step.get(column)) if column else None
        if value is not None and name in limits:
            out.append(f"{name} ({value * 1000:.0f} ms > {limits[name] * 1000:g} ms)")
        else:
            out.append(str(name))
    return out


def over_on_few_samples(step: pd.Series, slo: Any) -> str:
    """The thresholds a step is over on fewer than `min_samples` completions, with values ("" if none)."""
    raw = step.get("over_on_few_samples")
    names = [] if raw is None or isinstance(raw, (str, float)) else [str(n) for n in raw]
    if not names:
        return ""
    completed = as_number(step.get("completed"))
    count = "" if completed is None else f" on {int(completed)} completions"
    return ", ".join(failing_detail(step, slo, names)) + count


def _no_failure_sentence(steps: pd.DataFrame, last: float) -> str:
    """What is true when no sustained step failed: the capacity is above the highest rate tested only if
    the steps above the last passing rate all passed; otherwise they tell nothing, and the sentence says why."""
    rated = _rate_steps(steps)
    above = rated[(rated["_rate"] > last + 1e-9)] if len(rated) else rated
    verdicts = above.get("verdict", pd.Series("", index=above.index)).astype(str)
    unrun = above.get("status", pd.Series("run", index=above.index)).astype(str) == "not_run"
    verdicts = verdicts.where(~unrun, "not run")
    unjudged = verdicts[verdicts != "pass"]
    if unjudged.empty:
        return ("No tested rate failed: the capacity is above the highest rate tested; extend the ladder "
                "to find the boundary.")
    labels = above["label"].astype(str)[unjudged.index]
    parts = [f"{label} {v}" for label, v in zip(labels, unjudged, strict=True)]
    return (f"No tested rate failed, but the rates above {_rate_text(last)} req/s gave no verdict ({', '.join(parts)}): "
            f"the capacity is at least {_rate_text(last)} req/s and the boundary is not located; fix those steps "
            "(generator, duration) and test them again.")


def _located_without_failure(steps: pd.DataFrame) -> str:
    """What is true when the knee was placed but no step failed outright: the steps near it came close
    enough to their targets (their intervals straddle) for the estimate to place the crossing."""
    verdicts = steps.get("verdict", pd.Series("", index=steps.index)).astype(str)
    undecided = list(steps.loc[verdicts == "inconclusive", "label"].astype(str)) if "label" in steps else []
    named = f" ({', '.join(undecided[:6])}{', ...' if len(undecided) > 6 else ''})" if undecided else ""
    return ("No step failed outright: the knee is placed where the steps' tails cross their targets, from the "
            f"steps whose intervals straddle them{named}; a longer step there, or one above it, confirms it.")


#: the conditions named in the answer's last line (all of them are in the manifest section)
HEADLINE_CONDITIONS = ("model", "model_revision", "quantization", "server", "server_version", "gpus",
                       "gpu_model", "gpu_residency", "instances", "context_length", "max_num_seqs",
                       "prefix_cache", "kv_cache_dtype", "ollama_num_parallel", "ollama_max_queue",
                       "ollama_context_length", "client_max_concurrency", "server_admission_cap", "cache_state")


def fixed_conditions_text(manifest: dict | None) -> str:
    """One line naming the conditions the answer holds for."""
    manifest = manifest or {}
    conditions = conditions_of(manifest)
    target = (manifest.get("config") or {}).get("target") or {}
    if is_blank(conditions.get("model")) and not is_blank(target.get("model")):
        conditions = {"model": target.get("model"), **conditions}
    parts = [f"{key.replace('_', ' ')} {cell_text(conditions[key])}" for key in HEADLINE_CONDITIONS
             if not is_blank(conditions.get(key)) and not isinstance(conditions.get(key), dict)]
    return "; ".join(parts) if parts else "not recorded (no manifest conditions)"


def _rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g}"


def knee_text(summary: dict) -> str:
    """The knee sentence (`analysis.knee.knee_sentence` of `knee_of(summary)`) and why the knee search
    stopped (summary.json `search`); "" for a run with no rate axis (no knee to state)."""
    from analysis.knee import knee_of, knee_sentence
    from shapes.knee_search import search_stop_text, steps_text

    knee = knee_of(summary)
    search = summary.get("search") or {}
    if knee is None and not search:
        return ""
    text = knee_sentence(knee)
    text = text[0].upper() + text[1:] + "."
    if search.get("stopped"):
        steps = search.get("steps") or 0
        text += (f" The knee search stopped after {steps_text(steps, search.get('extensions') or 0)}: "
                 f"{search_stop_text(search)}.")
    return text


def last_passing_step(steps: pd.DataFrame, summary: dict | None = None) -> pd.Series | None:
    """The highest passing sustained step: the one the analysis named (`last_passing_target_rate`, else
    `last_passing_rate` read as a target label), else the passing ladder/refine step of highest rate."""
    rated = _rate_steps(steps)
    if rated.empty:
        return None
    passing = rated[rated.get("verdict", pd.Series("", index=rated.index)).astype(str) == "pass"]
    if passing.empty:
        return None
    for key in ("last_passing_target_rate", "last_passing_rate"):
        named = as_number((summary or {}).get(key))
        if named is not None and "target_rate" in passing.columns:
            at = passing[(pd.to_numeric(passing["target_rate"], errors="coerce") - named).abs() < 1e-9]
            if not at.empty:
                return at.iloc[-1]
    return passing.iloc[-1]


def answer_sentences(analysis: Any, manifest: dict | None) -> tuple[str, list[str]]:
    """The run verdict and the answer as short sentences, most important first."""
    summary = analysis.summary or {}
    steps = analysis.steps
    verdict = str(summary.get("verdict") or "unknown")
    verdicts = steps.get("verdict", pd.Series(dtype=object)).astype(str)
    labels = steps.get("label", pd.Series(dtype=object)).astype(str)
    out: list[str] = []
    invalid = list(labels[verdicts == "invalid"])
    if invalid:
        out.append(f"INVALID at {', '.join(invalid)}: the load generator did not deliver the offered load "
                   "there. Fix the generator (more workers, a lower cap, a faster client) before reading "
                   "any latency from those steps.")
    knee = knee_text(summary)
    if knee:
        out.append(knee)
    models = (summary.get("knee") or {}).get("share_models") or {}
    if models:  # the refine steps' TTFT shares were read against their arrivals (METRICS.md, the knee, 2a)
        from analysis.knee import target_label

        out.append("The refine steps' shares over their targets were read against their own arrivals, by a "
                   "queue model fitted on this run's requests (" + "; ".join(
                       f"{target_label(k)}: {v}" for k, v in models.items()) + "): the luck of the queue "
                   "episodes a step's arrivals met is taken out (docs/METRICS.md, the knee, 2a).")
    last = as_number(summary.get("last_passing_rate"))
    failing = first_failing_step(steps, summary)
    passing = last_passing_step(steps, summary)
    if passing is not None:
        out.append(f"Highest passing step: {_rate_text(rate_of(passing))} req/s offered (step "
                   f"{passing.get('label')}).")
    elif last is not None:
        out.append(f"Highest passing step: {last:.3g} req/s offered.")
    elif failing is not None:
        out.append("No tested rate passed: the lowest failing rate already broke the targets.")
    if failing is not None:
        named = summary.get("failed_first") or None
        what = ", ".join(failing_detail(failing, analysis.slo, list(named) if named else None)) or "not named"
        few = over_on_few_samples(failing, analysis.slo)
        out.append(f"First failing step: {_rate_text(rate_of(failing))} req/s offered (step {failing.get('label')}); "
                   f"what failed first: {what}."
                   + (f" Also over its target there on too few samples to judge: {few}." if few else ""))
    elif last is not None:
        located = ((summary.get("knee") or {}).get("rate") is not None
                   and (steps.get("verdict", pd.Series(dtype=object)).astype(str) == "inconclusive").any())
        passed = rate_of(passing) if passing is not None else None
        out.append(_located_without_failure(steps) if located
                   else _no_failure_sentence(steps, passed if passed is not None else last))
    from analysis.energy import energy_sentence  # GPU energy at the knee, beside its cost (issue 45)

    energy = energy_sentence(summary.get("energy_at_knee"))
    if energy:
        out.append(energy)
    for key, text in (("last_passing_concurrency", "Last passing concurrency (closed loop)"),
                      ("first_failing_concurrency", "First failing concurrency (closed loop)")):
        if not is_blank(summary.get(key)):
            out.append(f"{text}: {float(summary[key]):g} users.")
    out.extend(burst_sentences(getattr(analysis, "burst", None)))
    out.extend(soak_sentences(summary.get("soak")))
    from llmload.report.limits_view import answer_lines  # why it broke, what bursts cost (issue 30)
    out.extend(answer_lines(analysis))
    insufficient = steps[verdicts == "insufficient"]
    if len(insufficient):
        need = analysis.slo.min_samples
        named = []
        for _, step in insufficient.iterrows():
            few = over_on_few_samples(step, analysis.slo)
            window, had = step.get("needs_window_s"), step.get("window_s")
            longer = (f"needs about {float(window):,.0f} s, ran {float(had):,.0f} s"
                      if not is_blank(window) and not is_blank(had) else "")
            notes = "; ".join(n for n in (f"over its target anyway: {few}" if few else "", longer) if n)
            named.append(f"{step.get('label')}" + (f" ({notes})" if notes else ""))
        out.append(f"INSUFFICIENT at {', '.join(named)}: fewer than {need} completions (min_samples), too "
                   "few to form the tail's interval; run those steps longer.")
    not_run = list(labels[steps.get("status", pd.Series(dtype=object)).astype(str) == "not_run"])
    if not_run:
        out.append(f"Not run: {', '.join(not_run)} (left blank in every table, never counted as passing).")
    out.append(f"Holds only under these fixed conditions: {fixed_conditions_text(manifest)}.")
    return verdict, out


def burst_sentences(burst: pd.DataFrame | None) -> list[str]:
    """One sentence per burst/uniform pair: both verdicts and the p95 TTFT and E2E of each."""
    if burst is None or burst.empty or "burst_step" not in burst.columns:
        return []
    out = []
    for (b_step, u_step), rows in burst.groupby(["burst_step", "uniform_step"], sort=False):
        first = rows.iloc[0]
        parts = []
        for dim in (slo_dims.latency("ttft"), slo_dims.latency("e2e")):
            metric, name = dim.figure_of(95), f"{dim.display} p95"
            row = rows[rows["metric"] == metric]
            if len(row) and not is_blank(row.iloc[0]["burst"]) and not is_blank(row.iloc[0]["uniform"]):
                parts.append(f"{name} {float(row.iloc[0]['burst']) * 1000:.0f} ms vs "
                             f"{float(row.iloc[0]['uniform']) * 1000:.0f} ms")
        out.append(f"Burst vs uniform at the same mean rate: {b_step} {first.get('burst_verdict', '')}, "
                   f"{u_step} {first.get('uniform_verdict', '')}" + (f"; {', '.join(parts)}." if parts else ".")
                   + (" A uniform pass does not vouch for bursts." if first.get("uniform_verdict") == "pass"
                      and first.get("burst_verdict") != "pass" else ""))
    return out


def soak_sentences(soak: dict | None) -> list[str]:
    """One sentence on a soak's drift (summary["soak"]): a pass over a drifting soak does not hold for
    longer runs, so the answer says what rose, not only the verdict."""
    if not soak:
        return []
    drifting = list(soak.get("drifting") or [])
    bursts = list(soak.get("error_bursts") or [])
    span = f"across {soak.get('slices')} slices of {float(soak.get('slice_s') or 0):g} s"
    if int(soak.get("merged") or 1) > 1:  # a long soak: its plan's slices merged into at most 48 (analysis.soak)
        span += (f" (its {soak.get('plan_slices')} slices of {float(soak.get('plan_slice_s') or 0):g} s merged, "
                 f"up to {soak.get('merged')} in one)")
    if not drifting and not bursts:
        return [f"Soak: no drift {span} (trend test on p95 latencies, errors, waiting, KV and GPU memory)."]
    text = f"Soak: drifting upward {span}: {', '.join(drifting) or 'nothing'}"
    if soak.get("memory_growth"):
        text += " (memory growth)"
    if bursts:
        more = f" and {len(bursts) - 5} more" if len(bursts) > 5 else ""
        text += f"; error bursts in {', '.join(bursts[:5])}{more}"
    return [text + ". The verdict holds only for the soak's length; expect worse on longer runs."]


def _mentioned(warnings: list[str], *words: str) -> bool:
    text = " ".join(warnings).lower()
    return any(w in text for w in words)


def derived_warnings(analysis: Any, manifest: dict | None) -> list[str]:
    """The analysis's warnings plus the report's own checks on the same data, without repeats."""
    warnings = [str(w) for w in (analysis.warnings or [])]
    out = list(warnings)
    out += [f"manifest: {w}" for w in ((manifest or {}).get("warnings") or []) if str(w) not in warnings]
    steps, requests = analysis.steps, analysis.requests
    verdicts = steps.get("verdict", pd.Series(dtype=object)).astype(str)
    labels = steps.get("label", pd.Series(dtype=object)).astype(str)
    if (verdicts == "invalid").any() and not _mentioned(warnings, "behind", "invalid", "send lag"):
        out.append("The generator fell behind (invalid steps: "
                   f"{', '.join(labels[verdicts == 'invalid'])}): achieved send rate under offered, send "
                   "lag or worker CPU over its limit.")
    config = (manifest or {}).get("config") or {}
    ratio = ((config.get("requests") or {}).get("shared_prefix") or {}).get("ratio") or 0
    cached = 0
    if requests is not None and "cached_tokens" in requests.columns:
        cached = int(pd.to_numeric(requests["cached_tokens"], errors="coerce").fillna(0).sum())
    if (ratio or cached) and not _mentioned(warnings, "prefix", "cache"):
        out.append(f"The prefix cache may have been warm (shared_prefix ratio {ratio:g}, cached tokens "
                   f"reported {cached}): throughput can look higher than for traffic without repeats.")
    if "output_mismatch_ratio" in steps.columns:
        mism = pd.to_numeric(steps["output_mismatch_ratio"], errors="coerce")
        bad = labels[mism > 0.01]
        if len(bad) and not _mentioned(warnings, "output length", "mismatch", "honour", "honor"):
            out.append(f"Output lengths not honoured at {', '.join(bad)} (more than 1% of answers differ "
                       "from the planned length): the server may ignore ignore_eos / max_tokens.")
    if (verdicts == "insufficient").any() and not _mentioned(warnings, "sample", "insufficient"):
        out.append(f"Too few samples for a P95 at {', '.join(labels[verdicts == 'insufficient'])}.")
    checked = set(getattr(analysis.slo, "checked", []) or [])
    said = " ".join(w for w in warnings if "not checked" in w.lower())
    unchecked = [k for k in SLO_KEYS if k not in checked and k not in said]
    if unchecked:
        lead = "Also not checked" if said else "SLO keys not checked"
        out.append(f"{lead} (absent from the SLO): {', '.join(unchecked)}.")
    return out
