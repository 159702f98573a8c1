"""The report's plots: matplotlib figures rendered to inline SVG text.

Uses matplotlib's object API (`Figure`, no pyplot), so no global backend is chosen and nothing opens a
window; SVG ids are salted per plot so several plots can live in one page. Each function takes the
analysis frames and returns SVG text, or None when there is nothing to draw. Latencies are drawn in
milliseconds (display only); data stay in seconds.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.ticker import (
    AutoLocator,
    FixedLocator,
    FuncFormatter,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from shapes.phases import closed_loop_phases, phases_where, rate_phases

__all__ = [
    "RATE_PHASES",
    "bridge_gaps",
    "nice_ticks",
    "noise_floor",
    "burst_plot",
    "distribution_plot",
    "goodput_plot",
    "knee_label",
    "latency_plot",
    "mark_knee",
    "rate_axis",
    "rates_overlay_plot",
    "ratio_colours",
    "single_x",
    "slices_plot",
    "split_plot",
    "timeline_plot",
    "tokens_plot",
]

RATE_PHASES = rate_phases()
_VERDICT_COLOURS = {"pass": "#1b7f3b", "fail": "#b3261e", "inconclusive": "#b58900", "invalid": "#8a4b00",
                    "insufficient": "#5a4fb3"}
_SPLIT_ORDER = ("client_wait", "server_queue", "prefill_to_first_token", "prefill", "decode")
_SPLIT_COLOURS = {"client_wait": "#e0a040", "server_queue": "#c0504d", "prefill_to_first_token": "#4f81bd",
                  "prefill": "#4f81bd", "decode": "#9bbb59"}
#: split rows that are totals of the others: drawn as a marker, never stacked
_SPLIT_TOTALS = ("user_e2e",)


#: at most this many major ticks per linear axis (matplotlib's default asks for up to ~10 on a wide axis,
#: and every tick is two marker lines and a text: the ticks were the plots' biggest CPU item)
MAX_TICKS = 6


#: tick steps of a linear axis: 1, 2 or 5 x 10^k (matplotlib's default also takes 2.5, read as
#: 0, 2.5, 5, 7.5 or, rounded, 0, 3, 5, 8)
NICE_STEPS = (1, 2, 5, 10)


def nice_ticks(fig: Figure) -> None:
    """At most `MAX_TICKS` major ticks of nice steps (`NICE_STEPS`) on every default linear axis of `fig`,
    no minor ticks; an axis given its own locator (fixed, log, integer) keeps it."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            locator = axis.get_major_locator()
            if isinstance(locator, AutoLocator):
                axis.set_major_locator(MaxNLocator(nbins=MAX_TICKS, steps=list(NICE_STEPS)))
            if not isinstance(locator, FixedLocator):
                axis.set_minor_locator(NullLocator())


def _svg(fig: Figure, salt: str) -> str:
    nice_ticks(fig)
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue().decode("utf-8")
    return text[text.index("<svg"):]


#: margins (inches) around the axes: left, right, bottom, top; gaps between panels (inches)
_MARGINS = (0.75, 0.2, 0.55, 0.35)


def _figure(width: float, height: float, rows: int = 1, cols: int = 1, *,
            margins: tuple[float, float, float, float] = _MARGINS, wgap: float = 0.7, hgap: float = 0.15,
            **kw) -> tuple[Figure, np.ndarray]:
    """A figure with fixed margins in inches. No layout engine: constrained layout drew every figure a
    second time to measure its text (about 40% of the report's CPU); labels here have known lengths."""
    fig = Figure(figsize=(width, height))
    left, right, bottom, top = margins
    inner_w = max(width - left - right, 0.5)
    inner_h = max(height - bottom - top, 0.3)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=wgap * cols / max(inner_w - wgap * (cols - 1), 0.1),
                        hspace=hgap * rows / max(inner_h - hgap * (rows - 1), 0.1))
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def _text_inches(labels: Sequence[str], fontsize: float) -> float:
    """About how wide the longest label is (inches) at `fontsize` points (0.55 em per character)."""
    return max((len(str(x)) for x in labels), default=0) * fontsize * 0.55 / 72


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all-NaN when the frame lacks it."""
    if name in df.columns:
        return pd.to_numeric(df[name], errors="coerce").astype(float)
    return pd.Series(np.nan, index=df.index, dtype=float)


def rate_axis(steps: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """The steps to draw against load, sorted, with the x column and its axis label.

    Ladder and refine steps against offered rate; a closed-loop run against concurrency. Unrun steps
    are left out (they have no numbers). Burst, uniform and soak phases have their own plots.
    """
    run = steps[steps.get("status", pd.Series("run", index=steps.index)).astype(str) != "not_run"]
    phase = run.get("phase", pd.Series("ladder", index=run.index)).astype(str)
    rated = run[phase.isin(RATE_PHASES)]
    closed = phase.isin(closed_loop_phases())
    if rated.empty and closed.any():
        conc = run[closed].assign(_x=lambda d: _col(d, "concurrency"))
        return conc.sort_values("_x"), "_x", "concurrency (closed loop, users)"
    if rated.empty:
        # a trace at several mean rates (`shape.trace.scales`): the trace as recorded; its uniform twins
        # are drawn beside it in the bursts section
        bursts = run[phase.isin(phases_where(burst_pair="burst"))]
        rated = bursts if _col(bursts, "offered_rate").round(9).nunique() > 1 else run
    offered = _col(rated, "offered_rate").fillna(_col(rated, "target_rate"))
    return rated.assign(_x=offered).dropna(subset=["_x"]).sort_values("_x"), "_x", "offered rate (req/s)"


def knee_label(knee: Any) -> str:
    """The legend text of the knee: `knee 4.6 req/s (4.4 to 4.8, 90%)` (`analysis.knee.knee_sentence`)."""
    from analysis.knee import knee_sentence

    return knee_sentence(knee).split(":")[0]


def mark_knee(ax: Any, knee: Any, *, scale: float = 1.0) -> None:
    """The knee on a realised-offered-rate axis: a line at its rate and its interval shaded."""
    if knee is None or knee.rate is None:
        return
    if knee.low is not None and knee.high is not None:
        ax.axvspan(knee.low * scale, knee.high * scale, color="#b58900", alpha=0.15, linewidth=0)
    ax.axvline(knee.rate * scale, color="#b58900", linestyle="-.", linewidth=1.2, label=knee_label(knee))


def latency_plot(steps: pd.DataFrame, thresholds: dict[str, tuple[float, float]], knee: Any = None) -> str | None:
    """TTFT, TPOT, E2E p50/p95/p99 against realised offered rate, each p95 with its interval (when the
    analysis gave one); `thresholds` maps metric -> (percentile, s); `knee` (`analysis.knee.Knee`) is
    marked with its interval."""
    data, x, xlabel = rate_axis(steps)
    if data.empty:
        return None
    # one legend for the three panels (the same lines and colours), in a row under them: beside or over
    # the E2E panel it covered its data
    fig, axes = _figure(11.5, 3.9, 1, 3, margins=(0.7, 0.2, 0.95, 0.35), wgap=0.75)
    drew = False
    legend: dict[str, Artist] = {}
    for ax, metric, title in zip(axes[0], ("ttft", "tpot", "e2e"), ("TTFT", "TPOT", "E2E"), strict=True):
        for q, style in (("p50", ":"), ("p95", "-"), ("p99", "--")):
            y = _col(data, f"{metric}_{q}_s") * 1000
            if y.notna().any():
                legend[q] = ax.plot(data[x], y, style, marker="o", markersize=3, color="#33414e")[0]
                drew = True
        p95 = _col(data, f"{metric}_p95_s") * 1000
        low, high = _col(data, f"{metric}_p95_s_low") * 1000, _col(data, f"{metric}_p95_s_high") * 1000
        bars = p95.notna() & low.notna() & high.notna()
        if bars.any():
            legend["p95 interval"] = ax.errorbar(
                data[x][bars], p95[bars], yerr=[(p95 - low)[bars].clip(lower=0), (high - p95)[bars].clip(lower=0)],
                fmt="none", ecolor="#33414e", elinewidth=0.8, capsize=2)
        if knee is not None and knee.rate is not None:
            mark_knee(ax, knee)
            legend[knee_label(knee)] = ax.lines[-1]
        verdicts = data.get("verdict", pd.Series("", index=data.index)).astype(str)
        for verdict, colour in _VERDICT_COLOURS.items():
            mask = (verdicts == verdict) & p95.notna()
            if mask.any():
                legend[verdict] = ax.scatter(data[x][mask], p95[mask], s=36, color=colour, zorder=3)
        if metric in thresholds:  # its value in the panel's title: the legend is shared
            pct, value_s = thresholds[metric]
            legend["SLO threshold"] = ax.axhline(value_s * 1000, color="#b3261e", linestyle="--", linewidth=1.2)
            title = f"{title} (SLO p{pct:g} ≤ {value_s * 1000:g} ms)"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
    if legend:
        fig.legend(list(legend.values()), list(legend), fontsize=7, loc="lower center", ncol=min(len(legend), 8),
                   frameon=False)
    return _svg(fig, "latency") if drew else None


def _rate_lines_plot(steps: pd.DataFrame, series: Sequence[tuple[str, str, str]], ylabel: str, height: float,
                     salt: str, *, diagonal: bool = False, knee: Any = None) -> str | None:
    """Lines of `series` (column, label, line style) against the steps' realised offered rate, from 0;
    with `diagonal`, the y = x line of the offered rate; `knee` marked with its interval. None when no
    column has a value."""
    data, x, xlabel = rate_axis(steps)
    if data.empty:
        return None
    fig, axes = _figure(7.5, height, margins=(0.75, 0.2, 0.55, 0.15))
    ax = axes[0][0]
    xs = data[x].astype(float)
    if diagonal and xlabel.startswith("offered"):
        top = float(np.nanmax(xs)) if len(xs) else 1.0
        ax.plot([0, top], [0, top], color="#999", linestyle=":", label="offered (y = x)")
    drew = False
    for column, label, style in series:
        y = _col(data, column)
        if y.notna().any():
            ax.plot(xs, y, style, marker="o", markersize=4, label=label)
            drew = True
    if not drew and not diagonal:
        return None
    mark_knee(ax, knee)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig, salt)


def goodput_plot(steps: pd.DataFrame, knee: Any = None) -> str | None:
    """Goodput, completion throughput and achieved send rate against realised offered rate, with the
    diagonal; the knee (`analysis.knee.Knee`) marked with its interval."""
    return _rate_lines_plot(steps, (("completion_throughput", "completion throughput", "-"),
                                    ("goodput", "goodput (met every threshold)", "-"),
                                    ("achieved_rate", "achieved send rate", "--")),
                            "requests per second", 4.2, "goodput", diagonal=True, knee=knee)


#: timeline panels that count requests (integer ticks)
_COUNT_COLUMNS = ("arrivals", "completed", "in_flight", "running", "waiting")
_TIMELINE_PANELS = (
    (("arrivals", "completed"), "requests per 1-s bin", 1.0),
    (("in_flight",), "in flight (client)", 1.0),
    (("running", "waiting"), "server running / waiting", 1.0),
    (("kv_usage",), "KV usage (%; llama.cpp: slot context held)", 100.0),
    (("gpu_memory_used_bytes",), "GPU memory (GiB)", 1.0 / 2 ** 30),
    (("ttft_p95_s",), "TTFT p95 (ms)", 1000.0),
)


#: a timeline line is drawn across missing bins up to this long (between steps nothing is sent, so no
#: TTFT, and the master's judging can delay a telemetry poll); longer gaps stay visible as gaps
MAX_BRIDGED_GAP_S = 10.0


def bridge_gaps(t: np.ndarray, values: np.ndarray, max_gap_s: float = MAX_BRIDGED_GAP_S) -> tuple[np.ndarray, np.ndarray]:
    """The points of a line without its NaN bins, so short gaps are drawn through; a NaN is kept
    between two points more than `max_gap_s` apart so a long gap still breaks the line."""
    keep = ~np.isnan(values)
    x, y = t[keep], values[keep]
    if x.size < 2:
        return x, y
    breaks = np.where(np.diff(x) > max_gap_s)[0] + 1
    return np.insert(x, breaks, np.nan), np.insert(y, breaks, np.nan)


def single_x(steps: pd.DataFrame) -> bool:
    """True when the charts against offered rate would stack every step on one x (a trace replay and its
    uniform twin at the same mean rate): a vertical line that says nothing about rate."""
    data, x, _ = rate_axis(steps)
    return len(data) > 1 and data[x].round(9).nunique() < 2


def timeline_plot(timeline: pd.DataFrame, steps: pd.DataFrame,
                  bursts: Sequence[dict] | None = None) -> tuple[str | None, list[str]]:
    """Stacked time series with a band per step window (and a red band per burst of a trace replay,
    `summary.json` `bursts`); returns the SVG and the panels not measured."""
    if timeline is None or timeline.empty or "t" not in timeline.columns:
        return None, [p[1] for p in _TIMELINE_PANELS]
    panels: list[tuple[list[str], str, float]] = []
    missing: list[tuple[list[str], str, float]] = []
    for columns, label, scale in _TIMELINE_PANELS:
        present = [c for c in columns if _col(timeline, c).notna().any()]
        (panels if present else missing).append((present, label, scale))
    missing_labels = [m[1] for m in missing]
    if not panels:
        return None, missing_labels
    t = _col(timeline, "t")
    ran = steps[steps.get("status", pd.Series("run", index=steps.index)).astype(str) != "not_run"]
    starts = _col(ran, "window_start")
    t0 = float(np.nanmin([t.min(), starts.min()])) if starts.notna().any() else float(t.min())
    left = _text_inches([p[1] for p in panels], 7) + 0.55  # horizontal panel labels, then tick labels
    fig, axes = _figure(11.5, 1.55 * len(panels) + 0.6, len(panels), 1, margins=(left, 0.2, 0.5, 0.1),
                        sharex=True)
    for i, (shown, label, scale) in enumerate(panels):
        ax = axes[i][0]
        for _, step in ran.iterrows():
            ws, we = step.get("window_start"), step.get("window_end")
            if pd.isna(ws) or pd.isna(we):
                continue
            shade = "#dfe8f1" if int(step.get("index", 0) or 0) % 2 == 0 else "#eef0e2"
            ax.axvspan(float(ws) - t0, float(we) - t0, color=shade, zorder=0)
            if i == 0:
                ax.text((float(ws) + float(we)) / 2 - t0, 0.97, str(step.get("label", "")),
                        transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=7,
                        bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1})
        for burst in bursts or ():
            ax.axvspan(float(burst["start"]) - t0, float(burst["end"]) - t0, color="#f4b6b0", alpha=0.6, zorder=0.5)
        for column in shown:
            x, y = bridge_gaps((t - t0).to_numpy(dtype=float), (_col(timeline, column) * scale).to_numpy(dtype=float))
            ax.plot(x, y, linewidth=1, label=column)
        ax.set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center")
        if shown and shown[0] in _COUNT_COLUMNS:  # whole requests: 0, 1, 2, never 0.5 or 1.3
            ax.yaxis.set_major_locator(MaxNLocator(nbins=4, steps=list(NICE_STEPS), integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(shown) > 1:
            ax.legend(fontsize=6, loc="upper left")
    axes[-1][0].set_xlabel("seconds since the first step window")
    return _svg(fig, "timeline"), missing_labels


def _ecdf_points(sorted_values: np.ndarray, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """ECDF points of sorted values; above `max_points`, the values at evenly spaced fractions (the
    curve keeps its shape and the page stays small for runs of millions of requests)."""
    n = len(sorted_values)
    fractions = np.arange(1, n + 1) / n
    if n <= max_points:
        return sorted_values, fractions
    keep = np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
    return sorted_values[keep], fractions[keep]


def distribution_plot(requests: pd.DataFrame, steps: pd.DataFrame) -> str | None:
    """Empirical CDFs of TTFT and E2E per step (ok requests in the measurement window)."""
    if requests is None or requests.empty or "step" not in requests.columns:
        return None
    # only the columns drawn: filtering the whole frame copied every request's event lists per step
    req = requests[[c for c in ("step", "in_window", "outcome", "ttft_s", "e2e_s") if c in requests.columns]]
    if "in_window" in req.columns:
        req = req[req["in_window"].fillna(False).astype(bool)]
    if "outcome" in req.columns:
        req = req[req["outcome"] == "ok"]
    step_of = req["step"].astype(str)
    order = [str(s) for s in steps.sort_values("index")["label"]] if "index" in steps.columns \
        else sorted(step_of.unique())
    rows = {s: (step_of == s).to_numpy() for s in order}
    labels = [s for s in order if rows[s].any()]
    if not labels:
        return None
    values_of = {column: _col(req, column).to_numpy() for column in ("ttft_s", "e2e_s")}
    fig, axes = _figure(11.5, 3.8, 1, 2)
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(labels)))
    drew = False
    for ax, column, title in zip(axes[0], ("ttft_s", "e2e_s"), ("TTFT", "E2E"), strict=True):
        for label, colour in zip(labels, colours, strict=True):
            values = values_of[column][rows[label]]
            values = np.sort(values[~np.isnan(values)])
            values = values[values > 0] * 1000
            if len(values):
                xs, ys = _ecdf_points(values)
                ax.step(xs, ys, where="post", color=colour, label=f"{label} (n={len(values)})", linewidth=1.1)
                drew = True
        if ax.lines:
            lo, hi = ax.dataLim.x0, ax.dataLim.x1
            if lo > 0 and hi / lo > 10:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.legend(fontsize=6, ncol=2 if len(labels) > 8 else 1)
        ax.axhline(0.95, color="#999", linestyle=":", linewidth=0.8)
        ax.set_title(f"{title} distribution per step")
        ax.set_xlabel("ms (log scale when the values span more than ×10)")
        ax.set_ylabel("fraction of requests ≤ x")
        ax.grid(alpha=0.3)
    return _svg(fig, "distributions") if drew else None


def tokens_plot(steps: pd.DataFrame) -> str | None:
    """Output, total and good output tokens per second against offered rate (ladder/refine steps)."""
    return _rate_lines_plot(steps, (("total_tokens_per_s", "total tokens/s (input + output)", "--"),
                                    ("output_tokens_per_s", "output tokens/s", "-"),
                                    ("good_output_tokens_per_s", "good output tokens/s (goodput requests)", "-")),
                            "tokens per second", 4.0, "tokens")


def split_plot(split: pd.DataFrame, steps: pd.DataFrame) -> str | None:
    """Stacked mean client wait / server queue / prefill / decode per step."""
    if split is None or split.empty or not {"step", "component", "mean_s"} <= set(split.columns):
        return None
    table = split.pivot_table(index="step", columns="component", values="mean_s", aggfunc="first")
    order = [s for s in steps.sort_values("index")["label"].astype(str) if s in table.index] \
        if "index" in steps.columns else list(table.index)
    table = table.reindex(order)
    components = [c for c in _SPLIT_ORDER if c in table.columns] + \
        [c for c in table.columns if c not in _SPLIT_ORDER and c not in _SPLIT_TOTALS]
    if table.empty or not components or table[components].isna().all().all():
        return None
    names = [c.replace("_", " ") for c in components] + [f"{t.replace('_', ' ')} (total)" for t in _SPLIT_TOTALS]
    right = _text_inches(names, 7) + 0.6  # the legend sits right of the axes
    bottom = _text_inches([str(s) for s in table.index], 7) * 0.71 + 0.3  # tick labels at 45 degrees
    fig, axes = _figure(max(6.0, 0.55 * len(table) + 3) + right - 0.2, 3.8 + bottom - 0.55,
                        margins=(0.75, right, bottom, 0.15))
    ax = axes[0][0]
    stacked = np.zeros(len(table))
    for component in components:
        values = table[component].fillna(0).to_numpy(dtype=float) * 1000
        ax.bar(range(len(table)), values, bottom=stacked, label=component.replace("_", " "),
               color=_SPLIT_COLOURS.get(component))
        stacked += values
    for total in (t for t in _SPLIT_TOTALS if t in table.columns):
        ax.scatter(range(len(table)), table[total].to_numpy(dtype=float) * 1000, marker="_", s=300,
                   color="#111", zorder=3, label=f"{total.replace('_', ' ')} (total)")
    ax.set_xticks(range(len(table)), [str(s) for s in table.index], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("mean ms per request")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig, "split")


#: the noise rule of the burst ÷ uniform colours: a difference is coloured (better or worse) only when it
#: is both more than `SAME_RATIO` relative AND more than its metric's absolute floor (`noise_floor`); the
#: burst table has no intervals, so these floors stand for the run-to-run noise of one short step
SAME_RATIO = 0.05
#: absolute floors: latencies 5 ms (a p95 of a few dozen requests moves by that between identical runs,
#: and the generator's own scheduling jitter is of that order), rates 0.05 req/s, ratios 0.01 (one
#: point), request counts and means of queues 1 request
LATENCY_FLOOR_S, RATE_FLOOR, FRACTION_FLOOR, COUNT_FLOOR = 0.005, 0.05, 0.01, 1.0
RATIO_WORSE, RATIO_BETTER, RATIO_SAME = "#b3261e", "#1b7f3b", "#8a8a8a"


def noise_floor(metric: str) -> float:
    """The smallest absolute difference of `metric` that is coloured (see `SAME_RATIO`)."""
    if metric.endswith("_s"):
        return LATENCY_FLOOR_S
    if re.search("ratio|attainment", metric):
        return FRACTION_FLOOR
    if re.search("rate|goodput|throughput", metric):
        return RATE_FLOOR
    return COUNT_FLOOR


def ratio_colours(metrics: Sequence[str], ratios: np.ndarray,
                  differences: Sequence[float] | np.ndarray | None = None) -> list[str]:
    """Bar colours of burst ÷ uniform ratios: red where the burst is worse, green where better, grey when
    the difference is within its noise: within `SAME_RATIO` of 1, or (given `differences`, burst −
    uniform) not above `noise_floor` of its metric (higher is better for goodput, throughput, attainment
    and rates; lower for latencies)."""
    out = []
    diffs = [None] * len(metrics) if differences is None else list(differences)
    for metric, ratio, diff in zip(metrics, ratios, diffs, strict=True):
        small = diff is not None and not np.isnan(diff) and abs(diff) <= noise_floor(metric)
        if abs(ratio - 1.0) <= SAME_RATIO or small:
            out.append(RATIO_SAME)
            continue
        higher_better = re.search("goodput|throughput|attainment|achieved|offered", metric) is not None
        out.append(RATIO_WORSE if (ratio < 1) == higher_better else RATIO_BETTER)
    return out


def burst_plot(burst: pd.DataFrame) -> str | None:
    """Burst ÷ uniform ratio per metric at the same mean rate (1 = no difference: grey within its noise,
    `ratio_colours`; red = burst worse, green = burst better)."""
    if burst is None or burst.empty or not {"metric", "ratio"} <= set(burst.columns):
        return None
    data = burst.assign(_r=_col(burst, "ratio"), _m=burst["metric"].astype(str)).dropna(subset=["_r"])
    if data.empty:
        return None
    if "burst_step" in data and data["burst_step"].nunique() > 1:  # a trace at several mean rates
        data = data.assign(metric=data["metric"].astype(str) + " · " + data["burst_step"].astype(str))
    fig, axes = _figure(7.5, 0.35 * len(data) + 1.4,
                        margins=(_text_inches(data["metric"].astype(str).tolist(), 7) + 0.25, 0.2, 0.55, 0.15))
    ax = axes[0][0]
    differences = _col(data, "difference").to_numpy(dtype=float) if "difference" in data else None
    colours = ratio_colours(data["_m"].tolist(), data["_r"].to_numpy(dtype=float), differences)
    ax.barh(range(len(data)), data["_r"], color=colours)
    ax.set_yticks(range(len(data)), [str(m) for m in data["metric"]], fontsize=7)
    ax.axvline(1.0, color="#333", linewidth=1)
    ax.set_xlabel("burst ÷ uniform")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig, "burst")


_SLICE_PREFERRED = ("error_rate", "waiting_mean", "kv_usage_peak", "gpu_memory_peak_bytes", "errors")


def slices_plot(slices: pd.DataFrame) -> str | None:
    """Soak drift: p95 latencies (ms) in one panel, then error rate, waiting, KV and GPU memory peaks."""
    if slices is None or slices.empty:
        return None
    xs = np.arange(len(slices))
    numeric = [c for c in slices.columns if pd.api.types.is_numeric_dtype(slices[c])
               and not pd.api.types.is_bool_dtype(slices[c]) and slices[c].notna().any()]
    latency = [c for c in numeric if c.endswith("_p95_s") or c.endswith("_p99_s")]
    other = [c for c in _SLICE_PREFERRED if c in numeric][:4]
    panels = ([("latency p95 (ms)", latency, 1000.0)] if latency else []) + \
        [(f"{c} (%)", [c], 100.0) if c.startswith("kv_usage") else  # vLLM's 0-1 ratio, as a percent
         (c.replace("_bytes", " (GiB)"), [c], 1.0 / 2 ** 30 if c.endswith("_bytes") else 1.0) for c in other]
    if not panels:
        return None
    by_time = "elapsed" in slices.columns and slices["elapsed"].astype(str).str.len().gt(0).all()
    names = (slices["elapsed"].astype(str).tolist() if by_time else  # h:mm:ss: readable at any length
             slices["label"].astype(str).tolist() if "label" in slices.columns else [str(x) for x in xs])
    bottom = _text_inches(names, 7) * 0.71 + 0.5  # slice names at 45 degrees, then the axis label
    fig, axes = _figure(11.5, 1.6 * len(panels) + 0.8 + bottom - 0.55, len(panels), 1,
                        margins=(0.85, 0.2, bottom, 0.1), sharex=True)
    for ax, (label, columns, scale) in zip(axes[:, 0], panels, strict=True):
        for column in columns:
            ax.plot(xs, _col(slices, column) * scale, marker="o", markersize=3, label=column)
        ax.set_ylabel(label, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(columns) > 1:
            ax.legend(fontsize=6)
    step = max(1, len(names) // 16)
    axes[-1][0].set_xticks(xs[::step], names[::step], rotation=45, ha="right", fontsize=7)
    axes[-1][0].set_xlabel("slice start since the soak's start (h:mm:ss)" if by_time else "slice")
    return _svg(fig, "slices")


def rates_overlay_plot(runs: Sequence[tuple[str, pd.DataFrame]], column: str, ylabel: str,
                       scale: float = 1.0, salt: str = "overlay") -> str | None:
    """One line per run of `column` against offered rate (for `llmload compare`)."""
    fig, axes = _figure(7.5, 3.8, margins=(0.75, 0.2, 0.55, 0.15))
    ax = axes[0][0]
    for name, steps in runs:
        data, x, xlabel = rate_axis(steps)
        y = _col(data, column) * scale
        if y.notna().any():
            ax.plot(data[x], y, marker="o", markersize=4, label=name)
            ax.set_xlabel(xlabel)
    if not ax.lines:
        return None
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig, salt)
