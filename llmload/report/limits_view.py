"""The report's "What limited it" section and its "Bursts and recovery" section (METRICS.md "What limited a
step", "Bursts and recovery"): what `analysis` put in the step rows' `limit` and in summary.json's
`bursts` / `burstiness`, drawn and said; nothing is recomputed here.

The limits chart puts each step's evidence on one scale, as shares (0-100%): running requests over the
slot count, KV usage peak, the share of the samples with requests waiting where the next one's KV blocks
exceeded the free blocks, the share of arrivals held at the client cap and prefill's share of queue +
prefill, each step labelled with its limit kind; the thresholds of the rules are the dotted lines.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.burst import burst_knee_sentence
from analysis.limits import (
    CLIENT_CAP_SHARE,
    KV_BLOCKED_SHARE,
    KV_FULL,
    PREFILL_SHARE,
    SLOTS_FULL_SHARE,
    limit_answer,
    limit_sentence,
)
from llmload.report.html import as_number, esc, figure, is_blank, table

__all__ = ["SINGLE_RATE_NOTE", "answer_lines", "burst_knee_plot", "bursts_html", "burstiness_sentences", "limits_html", "limits_plot"]

#: said instead of the charts against offered rate when every step ran at one mean rate
SINGLE_RATE_NOTE = ('<p class="muted" id="single-rate-note">Every step ran at one mean rate: the latency, '
                    "goodput and token charts against offered rate are left out (see the burst sections).</p>")

#: evidence drawn per step: (key, label, threshold line or None)
_BARS = (("running_at_slots_share", "running at the slot count (share of samples)", SLOTS_FULL_SHARE),
         ("kv_usage_peak", "KV usage peak", KV_FULL),
         ("kv_blocked_share", "next waiting request over the free KV blocks (share of samples)", KV_BLOCKED_SHARE),
         ("capped_share", "arrivals held at the client cap", CLIENT_CAP_SHARE),
         ("prefill_share", "prefill ÷ (server queue + prefill)", PREFILL_SHARE))
_COLOURS = ("#4f81bd", "#c0504d", "#8064a2", "#e0a040", "#9bbb59")


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _prefill_share(ev: dict) -> float:
    share = _num(ev.get("prefill_share"))
    if not math.isnan(share):
        return share
    queue, prefill = _num(ev.get("server_queue_mean_s")), _num(ev.get("prefill_mean_s"))
    return prefill / (queue + prefill) if queue + prefill > 0 else math.nan


def _limited(steps: pd.DataFrame | None) -> pd.DataFrame:
    if steps is None or steps.empty or "limit" not in steps:
        return pd.DataFrame()
    return steps[steps["limit"].map(lambda v: isinstance(v, dict))]


def limits_plot(steps: pd.DataFrame) -> str | None:
    """Grouped bars of each step's evidence (shares), the step's limit kind written above it."""
    data = _limited(steps)
    if data.empty:
        return None
    evidence = [row["limit"].get("evidence") or {} for _, row in data.iterrows()]
    values = np.array([[_prefill_share(ev) if key == "prefill_share" else _num(ev.get(key)) for key, _, _ in _BARS]
                       for ev in evidence], dtype=float)
    width = max(6.5, 0.9 * len(data) + 2.5)
    from llmload.report.plots import _figure, _svg  # matplotlib: only to draw (answer_lines draws nothing)

    fig, axes = _figure(width, 3.4, margins=(0.7, 0.2, 0.75, 0.45))
    ax = axes[0][0]
    xs = np.arange(len(data))
    bar = 0.8 / len(_BARS)
    for j, ((_, label, line), colour) in enumerate(zip(_BARS, _COLOURS, strict=True)):
        centres = xs - 0.4 + bar * (j + 0.5)
        ax.bar(centres, np.nan_to_num(values[:, j]) * 100, bar, color=colour, label=label)
        if line is not None:  # the rule's threshold, over each bar
            ax.hlines([line * 100] * len(xs), centres - bar / 2, centres + bar / 2, colors="#333",
                      linestyles=":", linewidth=1)
    for x, (_, row) in zip(xs, data.iterrows(), strict=True):
        ax.text(x, 103, str(row["limit"].get("kind")), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, [str(v) for v in data["label"]], fontsize=7)
    ax.set_ylim(0, 115)
    ax.set_ylabel("% (evidence)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    return _svg(fig, "limits")


def limits_html(analysis: Any) -> str | None:
    """The section body: the chart, then per step its limit, the evidence in words and the lever."""
    data = _limited(getattr(analysis, "steps", None))
    if data.empty:
        return None
    rows = [{"step": row["label"], "verdict": row.get("verdict"), "limit": row["limit"].get("kind"),
             "evidence and lever": limit_sentence(row["limit"])} for _, row in data.iterrows()]
    caption = ("Per step, the server's and the client's own figures the limit was read from, as shares: "
               f"running requests at the slot count (full when in ≥ {SLOTS_FULL_SHARE:.0%} of the samples, with "
               f"requests waiting; with no slot count written, running's plateau while requests waited), KV usage "
               f"peak (full at ≥ {KV_FULL:.0%}; any preemption counts too), the share of samples with requests "
               f"waiting where the next one's KV blocks (its prompt ÷ block size) exceeded the free blocks "
               f"(num_gpu_blocks × (1 − usage); full at ≥ {KV_BLOCKED_SHARE:.0%}, whatever the percentage), arrivals "
               f"held at the client's concurrency cap (binding at ≥ {CLIENT_CAP_SHARE:.0%}), and prefill's share "
               f"of server queue + prefill (prefill-bound at ≥ {PREFILL_SHARE:.0%} when TTFT fails). Dotted over "
               "each bar: its rule's threshold. A missing bar was not reported by the server (see the table).")
    return figure(limits_plot(analysis.steps), plot_id="plot-limits", caption=caption) + \
        table(pd.DataFrame(rows), table_id="limits-table")


def burstiness_sentences(summary: dict | None) -> list[str]:
    """One sentence per replayed trace: its inter-arrival CV and peak-to-mean per 10 s, against Poisson."""
    out = []
    for label, shape in ((summary or {}).get("burstiness") or {}).items():
        cv, peak = _num(shape.get("interarrival_cv")), _num(shape.get("peak_to_mean_10s"))
        if math.isnan(cv):
            continue
        versus = {"less": "less bursty than Poisson (CV under 1)", "more": "burstier than Poisson (CV over 1)",
                  "similar": "about as bursty as Poisson"}.get(str(shape.get("versus_poisson")), "")
        peak_text = f", peak-to-mean arrivals per 10 s {peak:.2f}" if not math.isnan(peak) else ""
        out.append(f"Trace {label}: inter-arrival coefficient of variation {cv:.2f}{peak_text}: {versus}.")
    return out


def answer_lines(analysis: Any) -> list[str]:
    """The answer's lines on why it broke and what bursts cost: the first failing sustained step's
    limit (`limit_answer`, at the knee's rate when there is one) and the trace's own knee
    (`burst_knee_sentence`)."""
    from analysis.knee import knee_of
    from shapes.phases import sustained_phases

    summary = getattr(analysis, "summary", None) or {}
    steps = getattr(analysis, "steps", None)
    out = []
    if isinstance(steps, pd.DataFrame) and not steps.empty and {"phase", "verdict", "limit"} <= set(steps.columns):
        failing = steps[steps["phase"].isin(sustained_phases()) & (steps["verdict"] == "fail")]
        if not failing.empty:
            row = {str(k): v for k, v in failing.sort_values("offered_rate", kind="stable").iloc[0].items()}
            knee = knee_of(summary)
            first = (list(row.get("failing") or []) or [None])[0]
            # the knee's rate when its binding target is what broke first there, else the step's own rate
            text = limit_answer(row, knee.rate if knee is not None and knee.binding == first else None)
            if text:
                out.append(text[0].upper() + text[1:] + ("" if text.endswith(".") else "."))
    burst = burst_knee_sentence(summary.get("burst_knee"))
    if burst:
        out.append(burst)
    return out


def burst_knee_plot(summary: dict) -> str | None:
    """The binding target's percentile against realised offered rate, the trace as recorded and its
    uniform twins as two lines (with each step's interval), the target dotted, each knee a vertical line."""
    from llmload import slo as slo_dims

    entry = summary.get("burst_knee") or {}
    key = entry.get("binding") or (entry.get("uniform") or {}).get("binding") or next(iter(entry.get("targets") or {}), None)
    parsed = slo_dims.parse_threshold_key(str(key)) if key else None
    dim = slo_dims.by_name(parsed[0]) if parsed else None
    if dim is None or parsed is None:
        return None
    column = dim.figure_of(parsed[1])
    steps = pd.DataFrame(summary.get("steps") or [])
    if steps.empty or not {"phase", "offered_rate", column} <= set(steps.columns):
        return None
    from llmload.report.plots import _figure, _svg  # matplotlib: only when a report is drawn

    fig, axes = _figure(7.5, 3.4, margins=(0.8, 0.2, 0.55, 0.2))
    ax = axes[0][0]
    drew = False
    from shapes.phases import phases_where

    sides = ((entry, "burst", "#c0504d", "as recorded (bursts)"),
             (entry.get("uniform") or {}, "uniform", "#4f81bd", "uniform twin"))
    for knee, side, colour, name in sides:
        rows = steps[steps["phase"].isin(phases_where(burst_pair=side))].assign(_x=lambda d: pd.to_numeric(d["offered_rate"], errors="coerce"),
                                                     _y=lambda d: pd.to_numeric(d[column], errors="coerce") * 1000)
        rows = rows.dropna(subset=["_x", "_y"]).sort_values("_x")
        if rows.empty:
            continue
        low = pd.to_numeric(rows.get(f"{column}_low", rows[column]), errors="coerce") * 1000
        high = pd.to_numeric(rows.get(f"{column}_high", rows[column]), errors="coerce") * 1000
        err = np.vstack([(rows["_y"] - low).clip(lower=0).fillna(0), (high - rows["_y"]).clip(lower=0).fillna(0)])
        ax.errorbar(rows["_x"], rows["_y"], yerr=err, color=colour, marker="o", markersize=3, linewidth=1,
                    capsize=2, label=name)
        if knee.get("rate") is not None:
            ax.axvline(float(knee["rate"]), color=colour, linestyle="--", linewidth=1)
        drew = True
    if not drew:
        return None
    threshold = (summary.get("slo") or {}).get("thresholds", {}).get(f"{key}_s")
    if threshold is not None:
        ax.axhline(float(threshold) * 1000, color="#333", linestyle=":", linewidth=1, label=f"target {key}")
    ax.set_yscale("log")
    ax.set_xlabel("mean offered rate (req/s)")
    ax.set_ylabel(f"{dim.display} p{parsed[1]:g} (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    return _svg(fig, "burst-knee")


def _burst_knee_html(summary: dict) -> str:
    entry = summary.get("burst_knee")
    if not entry:
        return ""
    sentence = burst_knee_sentence(entry) or ""
    rows = []
    for side, knee in (("as recorded (bursts)", entry), ("uniform twin", entry.get("uniform") or {})):
        bracket = knee.get("bracket") or [None, None]
        rows.append({"trace": side, "knee req/s": knee.get("rate"), "low": knee.get("low"),
                     "high": knee.get("high"), "confidence": knee.get("confidence"), "binding": knee.get("binding"),
                     "last passing req/s": bracket[0], "first failing req/s": bracket[1]})
    note = ('<p class="muted">The trace replayed time-scaled to each mean rate of <code>shape.trace.scales</code>, '
            "and its uniform twin at each: the knee (highest mean rate meeting the SLO, by realised offered "
            "rate) of each side with its interval, and the passing and failing mean rates it lies between "
            "(METRICS.md \"The trace\'s own knee\").</p>")
    caption = ("The binding target's percentile per step (bars: its interval) against the step's mean offered "
               "rate, the trace as recorded and its uniform twin; dotted: the target; dashed: each knee.")
    return (f'<p class="a" id="burst-knee">{esc(sentence)}</p>' + note
            + figure(burst_knee_plot(summary), plot_id="plot-burst-knee", caption=caption)
            + table(pd.DataFrame(rows), table_id="burst-knee-table"))


def bursts_html(summary: dict | None) -> str | None:
    """The trace's own knee, the bursts of each replayed trace with their queue, drain and recovery, and
    the burstiness."""
    summary = summary or {}
    if not summary.get("burstiness") and not summary.get("bursts"):
        return None
    body = _burst_knee_html(summary) + "".join(f'<p class="a">{esc(s)}</p>' for s in burstiness_sentences(summary))
    bursts = summary.get("bursts") or []
    if not bursts:
        return body + '<p class="muted">No burst: no sub-window\'s arrivals exceeded the rule (METRICS.md).</p>'
    rows = []
    for b in bursts:
        rows.append({"step": b.get("step"), "start s": _rel(b, "start", bursts), "duration s": b.get("duration_s"),
                     "arrivals": b.get("arrivals"), "rate ÷ mean": b.get("peak_to_mean"),
                     "queue basis": b.get("queue_basis"), "pre-burst queue": b.get("pre_burst_queue"),
                     "peak queue": b.get("peak_queue"), "drain s": b.get("drain_s"),
                     "SLO recovery s": b.get("recovery_s"), "TTFT p95 ms": _ms(b.get("ttft_p95_s")),
                     "good share": b.get("good_share"), "met SLO": b.get("met_slo")})
    note = ('<p class="muted">A burst: a run of 1-s bins whose 5-s rolling arrival rate exceeds 1.5 × the trace\'s '
            "mean and its Poisson noise. Drain: from the burst's end (or the queue's peak, if later) to the first "
            "sample with the server queue back at its pre-burst level (its mean over the 10 s before). SLO "
            "recovery: from the burst's end to the first second from which the TTFT percentile of the next 5 s' "
            "arrivals is within its target. Blank: never within the run. The bursts are shaded red on the timeline."
            "</p>")
    return body + note + table(pd.DataFrame(rows), table_id="bursts-table")


def _rel(burst: dict, key: str, bursts: list[dict]) -> float | None:
    """A burst time in seconds since the first burst step's first burst (display only)."""
    value = as_number(burst.get(key))
    if value is None:
        return None
    starts = [start for b in bursts if (start := as_number(b.get("start"))) is not None]
    return round(value - min(starts, default=0.0), 1)


def _ms(value: Any) -> float | None:
    return None if is_blank(value) else float(value) * 1000
