"""`write_report(analysis, run_dir)`: the self-contained `report.html` of one run.

Order follows the reader: the question and the answer first, then warnings, the seed's worksheet, the
plots (each with a caption naming what it shows and which definition), the decision record, the
manifest and the definitions with the name map to vLLM / GuideLLM / AIPerf. The page draws only what
`analysis.analyze` computed; nothing is recomputed here except display units.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from llmload import slo as slo_dims
from llmload.redaction import redact_text
from llmload.report import plots
from llmload.report.answer import answer_sentences, derived_warnings, question_of, thresholds_of
from llmload.report.definitions import DEFINITIONS, NAME_MAP
from llmload.report.html import cell_text, esc, figure, fold, is_blank, kv_table, page, section, table
from llmload.report.limits_view import SINGLE_RATE_NOTE, bursts_html, limits_html
from llmload.report.manifest_view import flatten, redact

__all__ = ["render_report", "step_table", "worksheet_table", "write_report"]

#: "Steps at a glance": the verdict and what failed first, then what they were judged on; narrow enough
#: for a 1280-px window (the SLO's other latency thresholds are appended, see `_slo_columns`)
_STEP_COLUMNS = ("label", "verdict", "failing", "status", "target_rate", "offered_rate", "goodput",
                 "slo_attainment", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms")
#: every figure of a step, in a second table folded under the first
_STEP_DETAIL_COLUMNS = ("label", "verdict", "phase", "status", "target_rate", "offered_rate", "achieved_rate",
                        "completed", "goodput", "slo_attainment", "output_tokens_per_s", "total_tokens_per_s",
                        "good_output_tokens_per_s", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms",
                        "client_wait_p95_ms", "server_queue_p95_ms")
_HEADERS = {"target_rate": "target req/s", "offered_rate": "offered req/s", "achieved_rate": "achieved req/s",
            "goodput": "goodput req/s", "slo_attainment": "SLO attainment", "ttft_p95_ms": "TTFT p95 ms",
            "tpot_p95_ms": "TPOT p95 ms", "e2e_p95_ms": "E2E p95 ms", "client_wait_p95_ms":
            "client wait p95 ms", "server_queue_p95_ms": "server queue p95 ms",
            "output_tokens_per_s": "output tok/s", "total_tokens_per_s": "total tok/s",
            "good_output_tokens_per_s": "good output tok/s"}
_INSTANCE_COLUMNS = ("instance", "label", "offered_rate", "achieved_rate", "arrivals", "completed", "ok",
                     "completion_throughput", "goodput", "slo_attainment", "ttft_p95_s", "tpot_p95_s",
                     "e2e_p95_s", "in_flight_mean", "running_mean", "waiting_mean", "kv_usage_peak")
#: worksheet columns that identify or plan a step (kept for an unrun step; everything else is blanked)
_PLAN_NAMES = {"label", "step", "phase", "status", "arrival", "concurrency", "index", "target_rate",
               "planned_window_s", "window_s"}


def _not_run(steps: pd.DataFrame) -> pd.Series:
    status = steps.get("status", pd.Series("run", index=steps.index)).astype(str)
    verdict = steps.get("verdict", pd.Series("", index=steps.index)).astype(str)
    return (status == "not_run") | (verdict == "not_run")


def display_frame(frame: pd.DataFrame, preferred: tuple[str, ...] = ()) -> pd.DataFrame:
    """A frame for display: `preferred` columns first (when present), seconds shown as milliseconds and
    KV usage (vLLM's 0-1 ratio of blocks) as a percent, as the timeline and the answer show it."""
    columns = [c for c in preferred if c in frame.columns] or list(frame.columns)
    out = frame[columns].copy()
    renames = {}
    for column in columns:
        if str(column).startswith("kv_usage") and pd.api.types.is_numeric_dtype(out[column]) \
                and not pd.api.types.is_bool_dtype(out[column]):
            out[column] = out[column] * 100
            renames[column] = f"{column}_pct"
            continue
        if not str(column).endswith("_s") or "window" in str(column) or pd.api.types.is_bool_dtype(out[column]):
            continue
        numbers = pd.to_numeric(out[column], errors="coerce")
        if numbers.notna().sum() == out[column].notna().sum():  # every present value is a number
            out[column] = numbers * 1000
            renames[column] = str(column)[:-2] + "_ms"
    return out.rename(columns=renames)


def _slo_columns(slo: Any) -> tuple[list[str], dict[str, str]]:
    """The step table's columns for the SLO's latency thresholds (`slo.LATENCY` figures, in ms), so that the
    table shows what each verdict was judged on: the fixed p95 columns get the threshold in their header,
    any other threshold (a p99, an ITL, a user TTFT) a column of its own before the verdict."""
    extra: list[str] = []
    headers: dict[str, str] = {}
    for t in getattr(slo, "thresholds", []) or []:
        dim = slo_dims.by_name(t.metric)
        if dim is None or dim.kind != "latency":
            continue
        column = dim.figure_of(t.percentile)[:-2] + "_ms"
        base = _HEADERS.get(column, f"{dim.display} p{t.percentile:g} ms")
        headers[column] = f"{base} (SLO ≤ {t.value_s * 1000:g})"
        if column not in _STEP_COLUMNS and column not in extra:
            extra.append(column)
    return extra, headers


def step_table(steps: pd.DataFrame, slo: Any = None) -> str:
    """The verdict table: one row per plan step, the verdict and what failed first, then the figures they
    were judged on (with `slo`, a column for each further latency threshold, see `_slo_columns`); every
    other figure in a second table folded under it. Unrun steps are blank (never "pass")."""
    df = steps.copy()
    for column in [c for c in df.columns if c.endswith("_s")]:
        df[column[:-2] + "_ms"] = pd.to_numeric(df[column], errors="coerce") * 1000
    unrun = _not_run(df)
    measured = [c for c in df.columns if c not in ("label", "index", "phase", "status", "target_rate",
                                                    "concurrency")]
    df = df.astype(object)
    if "server_queue_p95_range_s" in df.columns and "server_queue_basis" in df.columns:
        # a quantile read from histogram buckets is only known to its bucket: show the bucket, not a point
        hist = df["server_queue_basis"].astype(str) == "histogram"
        df.loc[hist, "server_queue_p95_ms"] = [_range_text(r) for r in df.loc[hist, "server_queue_p95_range_s"]]
    df.loc[unrun, measured] = None
    extra, slo_headers = _slo_columns(slo)
    if saw_reasoning(steps) and "ttfa_p95_ms" not in extra:  # TTFA beside TTFT when answers reasoned
        extra = ["ttfa_p95_ms", "reasoning_tokens_per_s", "answer_tokens_per_s", *extra]
    headers = {**_HEADERS, **slo_headers, "ttfa_p95_ms": "TTFA p95 ms", "reasoning_tokens_per_s":
               "reasoning tok/s", "answer_tokens_per_s": "answer tok/s"}
    row_class = ["not-run" if u else "" for u in unrun]
    glance = table(df, columns=list(_STEP_COLUMNS) + extra, headers=headers, table_id="steps-table",
                   row_class=row_class)
    energy = []  # GPU energy per step, only where it was measured (METRICS.md "Energy")
    if "energy_basis" in steps.columns and steps["energy_basis"].notna().any():
        energy = ["energy_j", "joules_per_good_output_token", "energy_basis"]
        headers.update(energy_j="GPU energy J", joules_per_good_output_token="J per good output token",
                       energy_basis="energy basis")
    detail = table(df, columns=list(_STEP_DETAIL_COLUMNS) + extra + energy, headers=headers,
                   table_id="steps-detail", row_class=row_class)
    return glance + fold("Every figure of each step (rates, tokens/s, client wait, server queue)", detail,
                         fold_id="steps-detail-fold")


def saw_reasoning(steps: Any) -> bool:
    """Whether any step's answers carried reasoning tokens (then TTFA is shown beside TTFT)."""
    if steps is None or "reasoning_tokens_per_s" not in steps:
        return False
    return bool((pd.to_numeric(steps["reasoning_tokens_per_s"], errors="coerce") > 0).any())


def _range_text(value: Any) -> str | None:
    """`[low, high]` seconds as "in (low, high] (histogram bucket)" in ms; None when unknown."""
    if not isinstance(value, (list, tuple)) or len(value) != 2 or is_blank(value[0]):
        return None
    high = "∞" if is_blank(value[1]) or float(value[1]) == float("inf") else f"{float(value[1]) * 1000:.4g}"
    return f"in ({float(value[0]) * 1000:.4g}, {high}] (histogram bucket)"


def _worksheet_keep(column: str) -> bool:
    """Worksheet columns an unrun step keeps: what was planned, and run-level conditions and decisions."""
    name = str(column).lower()
    if name.startswith("condition."):
        return True
    if name.startswith("decision."):
        return not name.endswith(("goodput", "slo_attainment", "verdict", ".failing"))
    return name.rsplit(".", 1)[-1] in _PLAN_NAMES or "planned" in name


def worksheet_table(worksheet: pd.DataFrame, steps: pd.DataFrame) -> str:
    """The seed's worksheet from `analysis.worksheet`, in its four groups.

    Columns the same on every row (fixed conditions `condition.*`, run-level `decision.*`) are shown
    once above the per-step table. Cells of unrun steps are blank whatever the frame held (never
    "pass"); seconds are shown as milliseconds.
    """
    if worksheet is None or worksheet.empty:
        return '<p class="nodata">No worksheet rows.</p>'
    df = worksheet.astype(object).copy()
    unrun_labels = set(steps.loc[_not_run(steps), "label"].astype(str)) if "label" in steps else set()
    labels = set(steps.get("label", pd.Series(dtype=str)).astype(str))
    key = next((c for c in df.columns if df[c].astype(str).isin(labels).any()), None)
    unrun = df[key].astype(str).isin(unrun_labels) if key is not None else pd.Series(False, index=df.index)
    df.loc[unrun, [c for c in df.columns if c != key and not _worksheet_keep(c)]] = None
    once = [c for c in df.columns if str(c).startswith(("condition.", "decision.")) and _worksheet_keep(c)
            and df[c].astype(str).nunique(dropna=False) == 1]
    parts = []
    for prefix, title in (("condition.", "Fixed conditions"), ("decision.", "Final decision")):
        items = [(str(c)[len(prefix):], df[c].iloc[0]) for c in once if str(c).startswith(prefix)]
        items = [(k, v) for k, v in items if not is_blank(v)]
        if items:
            parts.append(f"<h3>{esc(title)}</h3>" + kv_table(items, table_id=f"worksheet-{prefix[:-1]}"))
    per_step = display_frame(df.drop(columns=once))
    parts.append("<h3>Per step: traffic shape and observations</h3>"
                 + table(per_step, table_id="worksheet", css_class="data worksheet",
                         row_class=["not-run" if u else "" for u in unrun]))
    return "".join(parts)


def _value_html(value: Any) -> str:
    value = redact(value)
    if isinstance(value, dict):
        return kv_table([(str(k), v) if not isinstance(v, (dict, list)) else (str(k), cell_text(v))
                         for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return table(pd.DataFrame(value))
    if isinstance(value, list):
        return "<ul>" + "".join(f"<li>{esc(cell_text(v))}</li>" for v in value) + "</ul>" if value else ""
    return esc(cell_text(value))


def _decision_html(decision: dict | None) -> str:
    if not decision:
        return '<p class="nodata">No decision record.</p>'
    rows = "".join(f"<tr><th>{esc(str(k).replace('_', ' '))}</th><td>{_value_html(v)}</td></tr>"
                   for k, v in redact(decision).items())
    return f'<div class="scroll"><table class="kv" id="decision-table"><tbody>{rows}</tbody></table></div>'


def _answer_html(analysis: Any, manifest: dict | None, answer: tuple[str, list[str]] | None = None) -> str:
    verdict, sentences = answer if answer is not None else answer_sentences(analysis, manifest)
    badge = verdict if verdict in ("pass", "fail", "inconclusive", "invalid", "insufficient") else "unknown"
    items = "".join(f'<p class="a">{esc(s)}</p>' for s in sentences)
    return (f'<div class="answer"><p class="q">{esc(question_of(analysis.steps))}</p>'
            f'<p class="a">Run verdict: <span class="badge b-{badge}" id="run-verdict">{esc(verdict)}</span>'
            f"</p>{items}</div><h3>Steps at a glance</h3>{step_table(analysis.steps, analysis.slo)}")


def _plots_html(analysis: Any) -> str:
    steps, slo = analysis.steps, analysis.slo
    thresholds = thresholds_of(slo)
    lines = ", ".join(f"{m} p{p:g} ≤ {v * 1000:g} ms" for m, (p, v) in thresholds.items()) or "none set"
    from analysis.knee import knee_of

    knee = knee_of(analysis.summary or {})
    marked = (" The knee (dash-dot line) and its interval (shaded) are marked." if knee is not None
              and knee.rate is not None else "")
    parts = [figure(plots.latency_plot(steps, thresholds, knee), plot_id="plot-latency", caption=(
        "Latency percentiles (p50 dotted, p95 solid with its interval, p99 dashed) against realised offered "
        "rate, per ladder/refine step; dots colour the step verdict." + marked
        + " TTFT = first output − sent_at; TPOT = (E2E − TTFT) ÷ "
        f"(output tokens − 1), 1-token answers left out; E2E = last output − sent_at. SLO lines: {lines}."))]
    parts.append(figure(plots.goodput_plot(steps, knee), plot_id="plot-goodput", caption=(
        "Goodput (ok requests meeting every per-request threshold ÷ window) and completion throughput "
        "(ok requests finished in the window ÷ window) against offered rate; the dotted diagonal is the "
        "offered load. Completion throughput near the diagonal with goodput below it means the service "
        "finishes the work but too slowly.")))
    parts.append(figure(plots.tokens_plot(steps), plot_id="plot-tokens", caption=(
        "Token throughput against offered rate: output tokens/s and total (input + output) tokens/s of the ok "
        "requests that finished in the window, and good output tokens/s (output tokens of those of them that "
        "arrived in the window and met every per-request threshold, so never above output tokens/s), each ÷ "
        "window seconds.")))
    if plots.single_x(steps):  # latency, goodput and tokens at one x: a vertical line, left out
        parts = [SINGLE_RATE_NOTE]
    svg, missing = plots.timeline_plot(analysis.timeline, steps, (analysis.summary or {}).get("bursts"))
    note = f" Not measured in this run (not reported by this server, or not scraped): {', '.join(missing)}." \
        if missing else ""
    parts.append(figure(svg, plot_id="plot-timeline", caption=(
        "Timeline in 1-s bins with a shaded band per step's measurement window: arrivals and completions, "
        "client in-flight, server running/waiting, KV usage (vLLM's 0–1 ratio of KV blocks shown as a percent, not GPU "
        "memory; llama.cpp reports none, so the context its busy slots hold ÷ all slots' context, from /slots), GPU "
        "memory used, TTFT p95 of requests sent in the bin." + note)))
    parts.append(figure(plots.distribution_plot(analysis.requests, steps), plot_id="plot-distributions",
                        caption=("Empirical CDFs of TTFT and E2E per step, ok requests in the measurement "
                                 "window (log scale when they span more than ×10; the dotted line marks the 95th percentile).")))
    return "".join(parts)


def _split_html(analysis: Any) -> str:
    split = analysis.split
    basis = ""
    if split is not None and "basis" in getattr(split, "columns", []):
        basis = " Basis: " + "; ".join(sorted({str(b) for b in split["basis"].dropna()})) + "."
    body = figure(plots.split_plot(split, analysis.steps), plot_id="plot-split", caption=(
        "Where the time went, mean per request per step, over every completed request of the step (warm-up "
        "included): client wait (sent_at − scheduled_at) + server queue + prefill to first token + decode "
        "(first to last token) = user E2E. Each row says its basis: per_request (measured per request: "
        "client times, Ollama durations, llama.cpp timings), histogram (the server's histogram, read from "
        "the step's start to its drained end: exact mean, p95 only as its bucket) or remainder (what is "
        "left of TTFT once the other part is known: inferred, not measured)." + basis))
    if split is not None and not split.empty:  # four rows a step: the chart says it, the rows are detail
        body += fold(f"The split's {len(split)} rows (four components per step, with p50 and p95)",
                     table(display_frame(split), table_id="split-table"), fold_id="split-rows")
    return body


def _optional_sections(analysis: Any) -> list[tuple[str, str, str]]:
    out = []
    burst = analysis.burst
    if burst is not None and not burst.empty:
        out.append(("burst", "Burst vs uniform arrivals", figure(plots.burst_plot(burst), plot_id="plot-burst",
                   caption=("Burst ÷ uniform for each metric at the same mean rate and request mix (red: "
                            "the bursty arrivals did worse, green: better, grey: within the noise, a difference of at most 5% or "
                            "at most 5 ms, 0.05 req/s, 0.01 of a ratio or 1 request). A pass under uniform arrivals does not vouch for "
                            "bursts."))
                    + table(burst, table_id="burst-table")))
    slices = getattr(analysis, "slices", None)
    if slices is not None and not slices.empty:
        out.append(("soak", "Soak: drift across time slices", _soak_html(analysis, slices)))
    instances = getattr(analysis, "instances", None)
    if instances is not None and not instances.empty:
        out.append(("instances", "Per instance", (
            '<p class="muted">The step numbers of each instance\'s requests (no verdict per instance: the '
            "generator checks belong to the whole run). Counts add up to the combined step table.</p>"
            + table(display_frame(instances, _INSTANCE_COLUMNS), table_id="instances-table"))))
    from analysis.turns import turn_table

    turns = turn_table(analysis.requests) if getattr(analysis, "requests", None) is not None else None
    if turns is not None and not turns.empty:
        shown = turns.assign(ttft_p50_ms=turns["ttft_p50_s"] * 1000, ttft_p95_ms=turns["ttft_p95_s"] * 1000,
                             ttfa_p95_ms=turns["ttfa_p95_s"] * 1000)
        columns = ["turn", "requests", "ttft_p50_ms", "ttft_p95_ms", "input_tokens_mean", "cached_tokens_mean"]
        if saw_reasoning(analysis.steps):
            columns.insert(4, "ttfa_p95_ms")
        out.append(("turns", "Sessions: TTFT by turn", (
            '<p class="muted">Every finished session turn of the run, by turn index (0: the session\'s first '
            "turn, an arrival; later turns carry the whole conversation so far). A prefix cache keeps TTFT "
            "flat while the prompt grows.</p>" + table(shown[columns], table_id="turns-table"))))
    from llmload.report.planning import planning_html

    planning = planning_html(analysis)
    if planning is not None:
        out.append(("planning", "Planning aid: Little's law", planning))
    return out


def _soak_html(analysis: Any, slices: pd.DataFrame) -> str:
    soak = (analysis.summary or {}).get("soak") or {}
    verdicts = []
    if soak:
        drifting = ", ".join(soak.get("drifting") or []) or "none"
        listed = list(soak.get("error_bursts") or [])
        bursts = (", ".join(listed[:10]) + (f" and {len(listed) - 10} more" if len(listed) > 10 else "")) or "none"
        verdicts.append(f"Drifting series: {drifting}. Memory growth: "
                        f"{'yes' if soak.get('memory_growth') else 'no'}. Error bursts in slices: {bursts}.")
    body = "".join(f'<p class="a" id="soak-verdict">{esc(v)}</p>' for v in verdicts)
    merged = ""
    if int(soak.get("merged") or 1) > 1:  # a long soak (analysis.soak.MAX_SLICES)
        merged = (f" The run's {soak.get('plan_slices')} slices of {float(soak.get('plan_slice_s') or 0):g} s are "
                  f"shown merged, consecutive, up to {soak.get('merged')} in one (column slices): each merged "
                  "slice's figures are computed from its own requests, as one slice that long; error bursts are "
                  "tested per slice of the run.")
    body += figure(plots.slices_plot(slices), plot_id="plot-slices", caption=(
        "Per time slice of the soak: p95 TTFT/TPOT/E2E (ms), error rate (every non-ok outcome of a sent "
        "request ÷ sent), server waiting, KV usage peak and GPU memory peak. Drift is judged by a one-sided "
        "Mann-Kendall trend test with a minimum rise (table below), not by eye." + merged))
    # elapsed (h:mm:ss since the soak's start) reads better than the window's wall-clock seconds
    shown = slices.drop(columns=[c for c in ("window_start", "window_end") if "elapsed" in slices], errors="ignore")
    body += table(display_frame(shown), table_id="slices-table")
    if soak.get("trends"):
        body += "<h3>Trend tests</h3>" + table(display_frame(pd.DataFrame(soak["trends"])),
                                                table_id="trends-table")
    return body


def _manifest_rows(manifest: dict) -> list[tuple[str, Any]]:
    """Flattened manifest rows without the empty ones (None, "", [], {}: nothing to read); wall-clock
    `*_at` seconds also shown as UTC time."""
    rows = []
    for key, value in flatten(manifest):
        if is_blank(value):
            continue
        if key.endswith("_at") and isinstance(value, (int, float)) and value > 1e9:
            stamp = datetime.fromtimestamp(float(value), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            value = f"{stamp} ({value:.3f})"
        rows.append((key, value))
    return rows


def render_report(analysis: Any, *, manifest: dict | None = None, title: str | None = None,
                  answer: tuple[str, list[str]] | None = None) -> str:
    """The whole report page as text (`answer`: `answer_sentences(analysis, manifest)` when the caller
    already has it)."""
    manifest = manifest or {}
    warnings = derived_warnings(analysis, manifest)
    warn_html = ('<ul class="warnings">' + "".join(f"<li>{esc(w)}</li>" for w in warnings) + "</ul>"
                 if warnings else '<p class="muted">No warnings.</p>')
    sections = [("answer", "The question and the answer", _answer_html(analysis, manifest, answer)),
                ("warnings", "Warnings", warn_html),
                ("worksheet-section", "Load-test worksheet", (
                    '<p class="muted">The worksheet of a capacity test (worksheet.csv in the run directory): '
                    "fixed conditions, traffic shape, observations and decision, one row per step; blank where "
                    "a step was not run or a number was not measurable. Fixed conditions are in the manifest, "
                    "the final decision in the decision record below.</p>"
                    + fold("The worksheet: fixed conditions, then one row per step",
                           worksheet_table(analysis.worksheet, analysis.steps), fold_id="worksheet-fold"))),
                ("plots", "Latency, goodput and the timeline", _plots_html(analysis)),
                ("split", "Queueing split", _split_html(analysis))]
    sections += [(sid, heading, body) for sid, heading, body in (("limits", "What limited it", limits_html(analysis)),
                 ("bursts", "Bursts and recovery", bursts_html(analysis.summary))) if body]
    sections += _optional_sections(analysis)
    rows = _manifest_rows(manifest)
    sections += [("decision", "Decision record", fold("The decision record: thresholds, verdicts, owner, "
                                                      "re-test triggers", _decision_html(analysis.decision),
                                                      fold_id="decision-fold")),
                 ("manifest", "Manifest: fixed conditions, versions, seeds",
                  fold(f"{len(rows)} recorded settings (empty ones left out)",
                       kv_table(rows, table_id="manifest-table"), fold_id="manifest-fold") if manifest
                  else '<p class="nodata">No manifest.</p>'),
                 ("definitions", "Definitions and name map",
                  fold("What each figure means, and the same words in vLLM, GuideLLM and AIPerf",
                       kv_table(DEFINITIONS, table_id="definitions-table")
                       + "<h3>Same word, different quantity: name map</h3>"
                       + table([dict(zip(("llmload", "vllm bench serve", "GuideLLM", "AIPerf"), row, strict=True))
                                for row in NAME_MAP], table_id="name-map", css_class="namemap"),
                       fold_id="definitions-fold"))]
    body = "".join(section(sid, heading, html) for sid, heading, html in sections)
    nav = [(sid, heading.split(":")[0]) for sid, heading, _ in sections]
    name = title or f"llmload report: {manifest.get('run_id') or manifest.get('name') or 'run'}"
    if (analysis.summary or {}).get("simulation"):  # `llmload run --virtual`: said in the title and first
        name = f"SIMULATION: {name}"
        body = f'<p class="warnings" id="simulation"><strong>{esc(warnings[0])}</strong></p>' + body
    return page(name, body, nav=nav)


def _read_manifest(run_dir: Path) -> dict | None:
    path = run_dir / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_report(analysis: Any, run_dir: str | Path, *, manifest: dict | None = None,
                 answer: tuple[str, list[str]] | None = None, suffix: str = "") -> Path:
    """Write `run_dir/report.html` from an `Analysis` (`suffix`: `report<suffix>.html`, beside the run's
    own: a re-analysis); returns its path.

    Without `manifest`, the run directory's `manifest.json` is used when it is there. `answer`: see
    `render_report`.
    """
    path = Path(run_dir) / f"report{suffix}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    if manifest is None:
        manifest = _read_manifest(path.parent)
    text = redact_text(render_report(analysis, manifest=manifest, answer=answer))  # secrets registered in this process
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
