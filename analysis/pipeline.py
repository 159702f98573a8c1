"""The analysis pipeline, `analyze(run, slo) -> Analysis`: every table the summary, the worksheet and
the report draw from.

Composition only: derive per-request columns once, explode the event times once (numpy), build the
telemetry index once, then per step `step_metrics` + `judge` (the same code `judge_step` runs live),
and from the step table the split, burst comparison, soak slices, instance tables, timeline, decision
record and summary. Pure: the `Run` is not modified.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.api.types import union_categoricals

from analysis import share_cv
from analysis.burst import burst_summary, burst_vs_uniform
from analysis.conditions import fixed_conditions
from analysis.energy import energy_at_knee
from analysis.limits import PromptCounts, add_limits, request_figures, step_limits
from analysis.requests import FLOAT32_GAPS_ABOVE, PER_REQUEST_COLUMNS, derive_requests
from analysis.run import KEPT_ONLY_COLUMNS, UNREAD_COLUMNS, RecordSource, Run
from analysis.share_cv import History
from analysis.soak import merged_slice_row, soak_slices
from analysis.split import queueing_split
from analysis.steps import (
    instance_indexes,
    instance_names,
    judged_step_row,
    step_instance_rows,
    typed_table,
)
from analysis.summary import build_summary, not_checked
from analysis.telemetry_stats import TelemetryIndex
from analysis.timeline import timeline
from analysis.worksheet import worksheet
from llmload.config import SLO, Client, Conditions
from shapes.phases import is_closed_loop, phases_where

__all__ = ["Analysis", "analyze", "needs_text"]


class Later:
    """A field of `Analysis` made when first read: `make(analysis)` gives its value."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[Analysis], Any]) -> None:
        self.make = make


def _later(make: Callable[[Analysis], pd.DataFrame]) -> pd.DataFrame:
    """A `Later` in a frame's field: `Analysis.__getattribute__` makes the frame when the field is first
    read, so a reader only ever sees a frame (typed as one)."""
    return cast(pd.DataFrame, Later(make))


@dataclass
class Analysis:
    """What `analyze` returns (docs/ARCHITECTURE.md "Analysis"). `requests` (the run's `RUN_COLUMNS`, one
    row per request) and `timeline` may be `Later`: made when first read (the figures do not need them,
    and a long run's requests are read back from its records then, a step at a time: `analyze`)."""

    steps: pd.DataFrame
    summary: dict
    worksheet: pd.DataFrame
    requests: pd.DataFrame
    split: pd.DataFrame
    burst: pd.DataFrame | None
    timeline: pd.DataFrame
    slices: pd.DataFrame | None
    instances: pd.DataFrame | None
    decision: dict
    warnings: list[str] = field(default_factory=list)
    slo: SLO = field(default_factory=SLO)

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if isinstance(value, Later):
            value = value.make(self)
            object.__setattr__(self, name, value)
        return value


def _windows(plan_steps: list[dict]) -> dict[str, tuple[float, float]]:
    out = {}
    for s in plan_steps:
        if s.get("window_start") is not None and s.get("window_end") is not None:
            out[str(s["label"])] = (float(s["window_start"]), float(s["window_end"]))
    return out


def needs_text(row: pd.Series | dict) -> str:
    """How long an undecided or insufficient step would have to run, e.g. "about 410 completions would
    decide it: a window of about 105 s at this rate (this one 30 s)" ("" when the row says nothing)."""
    needs, window, had = (_number(row.get(k)) for k in ("needs_completions", "needs_window_s", "window_s"))
    if needs is None:
        return ""
    if needs == float("inf"):
        return "its tail sits on the threshold at this rate: no window of a sensible length decides it"
    text = (f"it needs {needs:,.0f} completions (min_samples) to be judged" if row.get("verdict") == "insufficient"
            else f"about {needs:,.0f} completions would decide it")
    if window is not None and window > 0:
        text += f": a window of about {window:,.0f} s at this rate" + (f" (this one {had:,.0f} s)" if had else "")
    return text


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def _warnings(stray: list[str], plan_steps: list[dict], steps: pd.DataFrame, slo: SLO,
              telemetry: pd.DataFrame) -> list[str]:
    """The run's warnings; `stray`: the step labels of records not in the plan."""
    out = []
    if stray:
        out.append(f"records of steps not in plan.json are left out: {', '.join(stray[:5])}")
    if telemetry is None or telemetry.empty:
        out.append("no telemetry: server running/waiting, KV, GPU memory and server queue are not measured; "
                   "queue growth is judged on client in-flight")
    for step in plan_steps:
        if step.get("lost_workers"):
            lost = step.get("lost_requests")
            count = f"; {int(lost)} of their planned requests recorded as cancelled (worker lost)" if lost else ""
            out.append(f"step {step.get('label')}: workers lost during the step: "
                       f"{', '.join(map(str, step['lost_workers']))}{count}")
    for _, r in steps.iterrows():
        if r["status"] == "partial":
            out.append(f"step {r['label']} was stopped early (partial): its rates use the {r['window_s']:.1f} s "
                       "it ran; judged on what ran, it cannot pass")
        for reason in r.get("invalid_reasons") or []:
            out.append(f"step {r['label']} invalid: {reason['message']}")
        for key in r.get("unmeasured") or []:
            out.append(f"step {r['label']}: {key} could not be measured and was not judged")
        for key in r.get("undecided") or []:
            out.append(f"step {r['label']}: {key} from the server histogram lies in a bucket that straddles "
                       f"the threshold: not judged (finer buckets or per-request server timings decide it)")
        few = [str(k) for k in (r.get("over_on_few_samples") or [])]
        if few:
            limits = {t.key: t.value_s for t in slo.thresholds}
            over = ", ".join(f"{k} {float(r[f'{k}_s']) * 1000:.0f} ms > {limits[k] * 1000:g} ms" for k in few)
            out.append(f"step {r['label']}: {over} on only {int(r['completed'])} completions (fewer than "
                       f"min_samples {slo.min_samples}): over its target but not judged; run the step longer")
        if r["verdict"] in ("inconclusive", "insufficient") and (needs := needs_text(r)):
            why = (f"undecided ({', '.join(map(str, r.get('undecided_targets') or []))})"
                   if r["verdict"] == "inconclusive" else f"insufficient ({int(r['completed'] or 0)} completions)")
            out.append(f"step {r['label']}: {why}: {needs}")
        missing = r.get("unrecorded_arrivals")
        if missing is not None and missing == missing and missing > 0:
            out.append(f"step {r['label']}: {int(missing)} planned arrivals have no record (a worker lost?): "
                       "its offered and achieved rates are understated")
        mismatched = r.get("usage_mismatch")
        if mismatched is not None and mismatched == mismatched and mismatched > 0:
            out.append(f"step {r['label']}: usage_mismatch: {int(mismatched)} of {int(r['completed'])} answers did "
                       f"not match the request ({r.get('usage_mismatch_note') or 'usage'}): the server did not "
                       "do the work asked, so its token rates and latencies do not measure it")
        if r.get("server_queue_note"):
            out.append(f"step {r['label']}: {r['server_queue_note']}")
        if is_closed_loop(r["phase"]) and r["verdict"] != "not_run":
            out.append(f"step {r['label']} is closed-loop: no offered rate, no rate-shortfall check")
    missing = not_checked(slo)
    if missing:
        out.append(f"not checked (absent from the SLO): {', '.join(missing)}")
    return out


def simulation_warning(simulation: dict) -> str:
    """The line a simulated run's summary and report open their warnings with."""
    return (f"SIMULATION: no server was measured. This run was played in virtual time against the engine of "
            f"{simulation.get('server', 'the simulated server')} (llmload run --virtual): its numbers are "
            "that model's, a rehearsal of the plan, not a capacity of the target")


#: the per-request columns the whole-run consumers read (`Analysis.requests`: timeline, limits, planning,
#: turns, the report's plots and answer, compare), kept for every request; the rest of a step's derived
#: requests (and its per-event lists) live only while the step is analysed. `OPTIONAL_COLUMNS` are kept
#: only where some request has a value (their readers treat an absent column as all-null).
RUN_COLUMNS = ("request_id", "step", "outcome", "scheduled_at", "sent_at", "end_at", "in_window", "finished",
               "good", "capped", "ttft_s", "e2e_s", "user_e2e_s", "input_tokens", "output_tokens", "tokens_estimated")
OPTIONAL_COLUMNS = ("ttfa_s", "cached_tokens", "turn")
#: kept as categories (a small code per request, not a pointer to a string)
CATEGORY_COLUMNS = ("step", "outcome")
#: kept as Arrow strings (one buffer, not a Python object per request): every figure traces to its records
STRING_COLUMNS = ("request_id",)


#: a run of at most this many records keeps its requests' `RUN_COLUMNS` as it is analysed (about 110 MB
#: a million); a longer one reads them back from its records when `Analysis.requests` is first read
KEEP_REQUESTS_UP_TO = 2_000_000


def analyze(run: Run, slo: SLO, client: Client | None = None, *,
            conditions: Conditions | None = None) -> Analysis:
    """Analyse a loaded run against an SLO (and the generator limits of `client`).

    A step at a time: each plan step's records are read (`Run.source`), derived, their event gaps
    exploded, the step judged, its instance rows and what its limit reads of its requests made; then
    the step's requests are dropped. So the memory is one step's working set, whatever the run's length:
    the run's figures need nothing per request across steps. `Analysis.requests` (the `RUN_COLUMNS` of
    every request, for the report) is kept as the steps go for a run of up to `KEEP_REQUESTS_UP_TO`
    records, else read back a step at a time when first asked for. The event gaps are float32 where the
    run's events are over `FLOAT32_GAPS_ABOVE`, as when the run was analysed whole."""
    plan_steps = list(run.plan.get("steps", []))
    source = run.source
    windows = _windows(plan_steps)
    tel = TelemetryIndex(run.telemetry)
    conds = fixed_conditions(run.manifest, conditions)
    float32_above = -1 if source.total_events() > FLOAT32_GAPS_ABOVE else math.inf
    groups = source.groups()
    names = instance_names(source.column("instance")) if groups else None
    indexes = instance_indexes(tel, names) if names is not None else {}
    bursts = set(phases_where(burst_pair="burst"))
    columns = RUN_COLUMNS + OPTIONAL_COLUMNS + (tuple(c for c in PER_REQUEST_COLUMNS.values() if c) if any(
        s.get("phase") in bursts for s in plan_steps) else ())
    total = sum(pos.size for pos in groups.values())
    keep = total <= KEEP_REQUESTS_UP_TO
    # the requests the TTFT shares are read against (`analysis.share_cv`): a run of rate steps not too long
    poisson = {str(s.get("label")) for s in plan_steps if s.get("arrival") in share_cv.POISSON}
    sent: list[History] | None = [] if poisson and total <= share_cv.MAX_REQUESTS else None
    kept = _KeptColumns(columns)  # every request's (a short run), else the burst steps' (burst_summary)
    read: list[tuple[str, np.ndarray]] = []  # (label, positions) in the order the steps were read
    done: set[str] = set()
    figures: dict[str, dict[str, float]] = {}  # what each step's limit reads of its requests
    prompts = PromptCounts()  # the median prompt of every request, for the slot count's inference
    rows: list[dict] = []
    instance_rows: list[dict] = []
    empty = np.array([], dtype=np.int64)
    for step in plan_steps:
        label = str(step["label"])
        pos = groups.get(label, empty)
        ran = step.get("status") != "not_run"
        if not ran and (label in done or not pos.size):
            rows.append(judged_step_row(None, step, slo, client, tel, None, empty))
            continue
        kept_here = label not in done and (keep or step.get("phase") in bursts)
        records, gaps = source.rows_and_gaps(pos, float32_above,
                                             UNREAD_COLUMNS + (() if kept_here else KEPT_ONLY_COLUMNS))
        req = derive_requests(records, windows, slo)
        del records
        if label not in done:
            done.add(label)
            read.append((label, pos))
            prompts.add(req)
            if kept_here:
                kept.add(label, req, pos)
            if sent is not None and ran:
                sent.append(share_cv.history_of(req))
        at = np.arange(len(req))
        gaps.disposable = names is None  # read once by the step's row, unless the instance rows read them after
        row = judged_step_row(req if ran else None, step, slo, client, tel, gaps, at)  # type: ignore[arg-type]
        rows.append(row)
        figures.setdefault(label, request_figures(req, _f(row.get("window_start")), _f(row.get("window_end"))))
        if names is not None and ran:
            instance_rows.extend(step_instance_rows(req, step, names, slo, indexes, gaps, at))  # type: ignore[arg-type]
        del req, gaps
    others = [pos for label, pos in groups.items() if label not in done]  # of no plan step
    stray: list[str] = []
    if others or not groups:
        pos = np.sort(np.concatenate(others)) if others else empty
        req = derive_requests(source.scalar_rows(pos), windows, slo)
        labels = {str(s.get("label")) for s in plan_steps}
        stray = sorted({str(v) for v in req["step"].dropna().unique()} - labels) if len(req) else []
        prompts.add(req)
        read.append(("\x00others", pos))
        if keep:
            kept.add("\x00others", req, pos)
        del req
    models: dict[str, str] = {}
    if sent:
        rows, models = share_cv.adjust_rows(rows, History.concat(sent), slo, poisson)
    steps = typed_table(rows)
    instances = typed_table(instance_rows) if instance_rows else None
    if not steps.empty:
        limits = step_limits(steps, None, tel, conds, figures=figures, prompt_tokens=prompts.median)
        steps = steps.assign(limit=pd.Series(limits, index=steps.index, dtype=object))
    burst = burst_vs_uniform(steps)
    slices, soak = soak_slices(steps, alpha=slo.trend_alpha, merge=lambda labels: merged_slice_row(
        labels, plan_steps, lambda pos: source.rows_and_gaps(pos, float32_above), groups, windows, slo, client, tel))
    source.done()  # no more gaps are read
    warnings = _warnings(stray, plan_steps, steps, slo, run.telemetry)
    simulation = dict(run.plan["simulation"]) if isinstance(run.plan.get("simulation"), dict) else None
    if simulation is not None:  # `llmload run --virtual`: no server was measured, said first
        warnings = [simulation_warning(simulation), *warnings]
    summary = build_summary(steps, slo, conds, warnings=warnings, soak=soak, burst=burst)
    if models and isinstance(summary.get("knee"), dict):  # the model each TTFT share was read against
        summary["knee"]["share_models"] = models
    add_limits(summary, steps)
    energy = energy_at_knee(steps, summary.get("knee"), cost_per_hour=conds.get("cost_per_hour"))
    if energy is not None:  # no GPU energy (or no knee between steps): nothing said
        summary["energy_at_knee"] = energy
    burst_labels = [str(s.get("label")) for s in plan_steps if s.get("phase") in bursts]
    if burst_labels:  # the burst steps' requests
        summary.update(burst_summary(kept.frame(burst_labels), steps, plan_steps, tel, slo) or {})
    if isinstance(run.plan.get("search"), dict):  # the knee search's record (why it stopped, its steps)
        summary["search"] = dict(run.plan["search"])
    if simulation is not None:
        summary["simulation"] = simulation
    decision = summary["decision"]
    make_requests = kept.frame if keep else partial(_read_requests, source, read, windows, slo, columns)
    return Analysis(
        steps=steps, summary=summary, worksheet=worksheet(steps, plan_steps, conds, decision),
        requests=_later(lambda _: make_requests()), split=queueing_split(None, steps), burst=burst,
        timeline=_later(lambda analysis: timeline(analysis.requests, plan_steps, run.telemetry)), slices=slices,
        instances=instances, decision=decision, warnings=warnings, slo=slo,
    )


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _read_requests(source: RecordSource, read: list[tuple[str, np.ndarray]], windows: dict[str, tuple[float, float]],
                   slo: SLO, columns: tuple[str, ...]) -> pd.DataFrame:
    """`Analysis.requests` of a long run: its records read again a step at a time (without their event
    times), derived as `analyze` derived them, and only `columns` kept."""
    kept = _KeptColumns(columns)
    for label, pos in read:
        kept.add(label, derive_requests(source.scalar_rows(pos), windows, slo), pos)
    return kept.frame()


class _KeptColumns:
    """The kept columns of every step's requests, as arrays (freed one by one as the run's frame is made)."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self.parts: dict[str, dict[str, Any]] = {}  # arrays, and Categoricals for CATEGORY_COLUMNS
        self.positions: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, list] = {}

    def __contains__(self, label: str) -> bool:
        return label in self.parts

    def add(self, label: str, requests: pd.DataFrame, positions: np.ndarray) -> None:
        if label in self.parts:
            return
        # copies: a view of one column would keep the step's whole block of columns alive
        self.parts[label] = {c: pd.Categorical(requests[c]) if c in CATEGORY_COLUMNS else
                             pa.array(requests[c].astype(object), type=pa.string()) if c in STRING_COLUMNS else
                             requests[c].to_numpy(copy=True) for c in self.columns if c in requests.columns}
        self.positions[label] = positions

    def frame(self, labels: list[str] | None = None) -> pd.DataFrame:
        """One frame in the records' order: of every step kept, its arrays freed as they are joined; or of
        the steps `labels`, which stay kept."""
        keep = labels is not None
        labels = list(self.parts) if labels is None else [k for k in labels if k in self.parts]
        order = np.concatenate([self.positions[k] for k in labels]) if labels else np.array([], dtype=np.int64)
        sort = np.argsort(order, kind="stable") if order.size > 1 and (np.diff(order) < 0).any() else None
        out = {}
        for column in self.columns:
            arrays = [self.parts[k][column] if keep else self.parts[k].pop(column)
                      for k in labels if column in self.parts[k]]
            if len(arrays) != len(labels):
                continue
            if column in OPTIONAL_COLUMNS and not any(pd.notna(a).any() for a in arrays):
                continue
            if column in CATEGORY_COLUMNS:
                values = union_categoricals(arrays) if len(arrays) > 1 else arrays[0]
            elif column in STRING_COLUMNS:
                joined = pa.concat_arrays(arrays) if arrays else pa.array([], type=pa.string())
                del arrays
                if sort is not None:
                    joined = joined.take(pa.array(sort))
                out[column] = joined.to_pandas(types_mapper=pd.ArrowDtype)
                continue
            else:
                values = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
            del arrays
            out[column] = values[sort] if sort is not None else values
        return pd.DataFrame(out)
