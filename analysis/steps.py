"""The per-step table: one row per plan step (not-run steps included, their numbers NaN), with verdicts.

`step_table(requests, plan_steps, slo, client, tel, gaps)` runs `step_metrics` and `judge` on each
step's requests; `instance_table` does the same per instance (records column `instance`; requests
never routed to an instance form the group `(none)` so the counts add up to the combined ones).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics import empty_metrics, step_metrics
from analysis.requests import EventGaps
from analysis.telemetry_stats import TelemetryIndex
from analysis.verdict import judge, judged_fields
from llmload.config import SLO, Client

__all__ = ["COUNT_COLUMNS", "UNROUTED", "instance_table", "step_table"]

#: integer columns: nullable Int64 so a not-run step is <NA>, not a float NaN turning counts into 20.0
COUNT_COLUMNS = ("index", "arrivals", "sent", "completed", "ok", "tpot_excluded", "oom")

#: the instance name of requests that never reached an instance (not sent, connect errors)
UNROUTED = "(none)"


def _take(frame: pd.DataFrame, pos: np.ndarray) -> pd.DataFrame:
    """Rows at `pos`: a slice (no copy) when they are a contiguous run, as a step's rows usually are."""
    if pos.size and pos[-1] - pos[0] + 1 == pos.size and (pos.size < 2 or (np.diff(pos) == 1).all()):
        return frame.iloc[int(pos[0]):int(pos[-1]) + 1].reset_index(drop=True)
    return frame.iloc[pos].reset_index(drop=True)


def _scalars(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests without the per-event list columns (their gaps come from `EventGaps`)."""
    return requests.drop(columns=[c for c in ("token_times", "token_counts") if c in requests])


def _positions(requests: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    if requests.empty:
        return {}
    groups = requests.groupby(column, sort=False, dropna=False).indices
    return {str(k): np.asarray(v) for k, v in groups.items()}


def step_table(requests: pd.DataFrame, plan_steps: list[dict], slo: SLO, client: Client | None,
               tel: TelemetryIndex, gaps: EventGaps) -> pd.DataFrame:
    """One judged row per plan step, in plan order."""
    groups = _positions(requests, "step")
    base = _scalars(requests)
    rows = []
    for step in plan_steps:
        if step.get("status") == "not_run":
            row = empty_metrics(step)
            row.update(judged_fields("not_run", [], {"unmeasured": [], "undecided": [], "invalid": [],
                                                     "over_on_few_samples": [], "undecided_targets": []}))
            rows.append(row)
            continue
        pos = groups.get(str(step["label"]), np.array([], dtype=np.int64))
        row = step_metrics(_take(base, pos), step, slo, tel, gaps, pos)
        verdict, failing, details = judge(row, step, slo, client)
        row.update(judged_fields(verdict, failing, details))
        rows.append(row)
    return _typed(pd.DataFrame(rows))


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    # copy(): consolidates the blocks, so a caller's `assign` does not warn of a fragmented frame
    return table.astype({c: "Int64" for c in COUNT_COLUMNS if c in table}).copy()


def instance_table(requests: pd.DataFrame, plan_steps: list[dict], slo: SLO, tel: TelemetryIndex,
                   gaps: EventGaps) -> pd.DataFrame | None:
    """Per instance and step: the step numbers of that instance's requests (no verdict: the rate
    checks belong to the whole generator). None when the run had a single instance."""
    if "instance" not in requests or requests["instance"].dropna().nunique() < 2:
        return None
    inst = requests["instance"].astype(object).where(requests["instance"].notna(), UNROUTED)
    base = _scalars(requests)
    groups = _positions(base.assign(_key=inst.astype(str) + "\x00" + requests["step"].astype(str)), "_key")
    rows = []
    names = sorted(inst.unique(), key=lambda n: (n == UNROUTED, str(n)))
    indexes = _instance_indexes(tel, names)
    for step in plan_steps:
        if step.get("status") == "not_run":
            continue
        for name in names:
            pos = groups.get(f"{name}\x00{step['label']}")
            if pos is None:
                continue
            row = step_metrics(_take(base, pos), step, slo, TelemetryIndex(None), gaps, pos)
            own = indexes.get(str(name))
            ws, we = row["window_start"], row["window_end"]
            nan = float("nan")
            row.update(running_mean=own.gauge_mean("running", ws, we) if own else nan,
                       waiting_mean=own.gauge_mean("waiting", ws, we) if own else nan,
                       kv_usage_peak=own.peak("kv_usage", ws, we) if own else nan)
            rows.append({"instance": name, **row})
    return _typed(pd.DataFrame(rows)) if rows else None


def _instance_indexes(tel: TelemetryIndex, names: list) -> dict[str, TelemetryIndex]:
    """A telemetry index per instance, from the source `server:<instance>` (absent: no entry)."""
    frame = tel.frame
    if frame is None or frame.empty:
        return {}
    source = frame["source"].astype(str)
    out = {}
    for name in names:
        own = frame[source == f"server:{name}"]
        if not own.empty:
            out[str(name)] = TelemetryIndex(own)
    return out
