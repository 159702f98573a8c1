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

__all__ = ["COUNT_COLUMNS", "UNROUTED", "instance_indexes", "instance_names", "instance_table", "judged_step_row",
           "step_instance_rows", "step_table", "typed_table"]

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
        pos = groups.get(str(step["label"]), np.array([], dtype=np.int64))
        rows.append(judged_step_row(_take(base, pos) if step.get("status") != "not_run" else None, step, slo,
                                    client, tel, gaps, pos))
    return typed_table(rows)


def judged_step_row(requests: pd.DataFrame | None, step: dict, slo: SLO, client: Client | None,
                    tel: TelemetryIndex, gaps: EventGaps | None, pos: np.ndarray) -> dict:
    """One plan step's judged row from its own requests (scalar columns; `pos`: their positions in
    `gaps`). A step that did not run has the empty row (its `requests` are not read)."""
    if step.get("status") == "not_run":
        row = empty_metrics(step)
        row.update(judged_fields("not_run", [], {"unmeasured": [], "undecided": [], "invalid": [],
                                                 "over_on_few_samples": [], "undecided_targets": []}))
        return row
    assert requests is not None and gaps is not None, "a step that ran is judged from its requests"
    row = step_metrics(requests, step, slo, tel, gaps, pos)
    verdict, failing, details = judge(row, step, slo, client)
    row.update(judged_fields(verdict, failing, details))
    return row


def typed_table(rows: list[dict]) -> pd.DataFrame:
    """The step table from its rows (counts as nullable integers)."""
    return _typed(pd.DataFrame(rows))


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    # copy(): consolidates the blocks, so a caller's `assign` does not warn of a fragmented frame
    return table.astype({c: "Int64" for c in COUNT_COLUMNS if c in table}).copy()


def instance_names(instances: pd.Series) -> list | None:
    """The run's instances in the instance table's order (unrouted last); None when it had fewer than two."""
    if instances.dropna().nunique() < 2:
        return None
    inst = instances.astype(object).where(instances.notna(), UNROUTED)
    return sorted(inst.unique(), key=lambda n: (n == UNROUTED, str(n)))


def instance_table(requests: pd.DataFrame, plan_steps: list[dict], slo: SLO, tel: TelemetryIndex,
                   gaps: EventGaps) -> pd.DataFrame | None:
    """Per instance and step: the step numbers of that instance's requests (no verdict: the rate
    checks belong to the whole generator). None when the run had a single instance."""
    names = instance_names(requests["instance"]) if "instance" in requests else None
    if names is None:
        return None
    groups = _positions(requests, "step")
    base = _scalars(requests)
    indexes = instance_indexes(tel, names)
    rows = []
    for step in plan_steps:
        pos = groups.get(str(step["label"]))
        if pos is not None:
            rows.extend(step_instance_rows(_take(base, pos), step, names, slo, indexes, gaps, pos))
    return _typed(pd.DataFrame(rows)) if rows else None


def step_instance_rows(requests: pd.DataFrame, step: dict, names: list, slo: SLO,
                       indexes: dict[str, TelemetryIndex], gaps: EventGaps, pos: np.ndarray) -> list[dict]:
    """One plan step's rows of the instance table (`requests`: the step's, `pos` their positions in `gaps`)."""
    if step.get("status") == "not_run" or not len(requests):
        return []
    inst = requests["instance"].astype(object).where(requests["instance"].notna(), UNROUTED).astype(str)
    groups = {str(k): np.asarray(v) for k, v in inst.groupby(inst, sort=False).indices.items()}
    rows = []
    for name in names:
        own = groups.get(str(name))
        if own is None:
            continue
        row = step_metrics(_take(requests, own), step, slo, TelemetryIndex(None), gaps, pos[own])
        index = indexes.get(str(name))
        ws, we = row["window_start"], row["window_end"]
        nan = float("nan")
        row.update(running_mean=index.gauge_mean("running", ws, we) if index else nan,
                   waiting_mean=index.gauge_mean("waiting", ws, we) if index else nan,
                   kv_usage_peak=index.peak("kv_usage", ws, we) if index else nan)
        rows.append({"instance": name, **row})
    return rows


def instance_indexes(tel: TelemetryIndex, names: list) -> dict[str, TelemetryIndex]:
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
