"""Little's law as a planning aid (issue 10, seed 003), for users: `llmload plan` and a report section.

    llmload plan RUN_DIR --users 50 --think-time 30s

From a run with a passing sustained step, a population of `users`, each alternating a think time Z and
one request of response time R, offers about `users / (Z + R)` requests per second and keeps about that
rate x R requests in flight (L = lambda W), in a steady state. `analysis.plan_in_flight` does the
arithmetic; this module words it, always with its assumptions, and never as "N users supported": the
capacity claim stays the knee (`analysis.knee.knee_of`) under the recorded conditions, judged with the
SLO of the run directory's current analysis (the last `llmload report --slo`, else the configured one).

With `--twin twin.yaml` (`llmload fit`), "what if" lines follow: the twin's knee for the run's own
request mix and SLO as fitted, with twice the slots (or `--slots`), with prompts x2 (`--prompt-scale`)
and with two replicas (`--replicas`), each with the range its fitted parameters' errors allow
(`llmload.sim.whatif`, in virtual time: seconds). `--users` and `--think-time` may then be left out.

Exit codes of `llmload plan`: 0 the expected arrival rate lies below the knee's interval (or, without a
knee, within the highest passing rate), 1 it lies inside or beyond the interval (test that rate first),
2 bad input, 3 no passing sustained step to plan from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from llmload.errors import ConfigError
from llmload.report.html import esc, kv_table
from llmload.units import parse_duration
from shapes.phases import sustained_phases

__all__ = ["LITTLE_LAW", "knee_verdict", "plan_lines", "plan_run", "planning_html", "what_if_lines"]

LITTLE_LAW = ("Little's law, L = λW: in a steady state the mean number of requests in flight equals the "
              "arrival rate times the mean time each spends in the system. A population of N users, each "
              "thinking Z seconds between requests that take R seconds, offers about N ÷ (Z + R) req/s.")
_SUSTAINED = sustained_phases()


def _num(value: float, unit: str = "", digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}{unit}"


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def plan_lines(plan: dict[str, Any], *, source: str = "") -> list[str]:
    """The planning figures of `analysis.plan_in_flight` as plain sentences (assumption included)."""
    head = (f"{plan['users']} users with a think time of {_num(plan['think_time_s'], ' s')}"
            + (f", from {source}" if source else ""))
    if plan.get("reference_step") is None:
        return [head, f"  {plan.get('note', 'nothing to plan from')}"]
    lines = [
        head,
        f"  response time R: {_num(plan['response_time_s'], ' s')} (mean user E2E of ok requests at step "
        f"{plan['reference_step']})",
        f"  arrival rate to expect: {_num(plan['arrival_rate'], ' req/s')} (users ÷ (think time + R))",
        f"  requests in flight to expect: {_num(plan['expected_in_flight'])} (arrival rate × R, Little's law)",
        f"  highest passing step: {_num(plan['last_passing_rate'], ' req/s')} offered: the expected rate is "
        + ("within it" if plan["within_passing_rate"] else "BEYOND it"),
    ]
    if plan.get("note"):
        lines.append(f"  note: {plan['note']}")
    lines.append(f"  assumption: {plan['assumption']}")
    return lines


def knee_verdict(knee: Any, rate: float) -> tuple[bool | None, str]:
    """(below the knee?, a line) for an expected arrival `rate`: below the knee's interval is safe;
    inside it is at the limit; above it is beyond. (None, "") without a knee rate to judge by."""
    from analysis.knee import knee_sentence

    if knee is None or knee.rate is None:
        return None, ""
    low = knee.low if knee.low is not None else 0.0
    if rate < low:
        where = "below the knee's interval"
    elif knee.high is None or rate <= knee.high:
        where = "INSIDE the knee's interval: at the limit, test that rate first"
    else:
        where = "BEYOND the knee"
    return rate < low, f"  {knee_sentence(knee)}: the expected rate is {where}"


def _reference(analysis: Any) -> tuple[pd.Series, float] | None:
    """The last passing sustained step and its mean user E2E of ok requests in the window (None: no such
    step, or no per-request times to take it from)."""
    steps = analysis.steps
    if steps is None or steps.empty:
        return None
    passing = steps[(steps["verdict"] == "pass") & steps["phase"].isin(_SUSTAINED) & steps["target_rate"].notna()]
    if passing.empty:
        return None
    realised = pd.to_numeric(passing["offered_rate"], errors="coerce").fillna(passing["target_rate"])
    last = passing.assign(_rate=realised).sort_values(["_rate", "index"], kind="stable").iloc[-1]
    req = analysis.requests
    if req is None or not {"step", "in_window", "outcome", "user_e2e_s"} <= set(req.columns):
        return None
    mask = (req["step"] == last["label"]) & req["in_window"].astype(bool) & (req["outcome"] == "ok")
    response_s = float(req.loc[mask, "user_e2e_s"].mean())
    return None if math.isnan(response_s) else (last, response_s)


def planning_html(analysis: Any) -> str | None:
    """The report's planning section, or None when no sustained step passed (nothing to plan from)."""
    found = _reference(analysis)
    if found is None:
        return None
    step, response_s = found
    offered = step.get("offered_rate")
    rate = float(offered) if offered is not None and offered == offered else float(step["target_rate"])
    # the check's three figures, each with one definition (METRICS.md: mean in-flight ≈ completion rate ×
    # mean E2E), so that the row agrees with its own arithmetic: check = measured ÷ (X × W)
    completion, e2e_mean = _float(step.get("completion_throughput")), _float(step.get("e2e_mean_s"))
    measured = _float(step.get("in_flight_mean"))
    expected = completion * e2e_mean
    check = measured / expected if expected > 0 else math.nan
    rows = [("reference step (highest passing sustained step)", f"{step['label']} at {rate:.3g} req/s offered"),
            ("mean user E2E there, R (ok requests in the window; what llmload plan uses)", _num(response_s, " s")),
            ("completion rate there, X (ok requests finished in the window ÷ window)", _num(completion, " req/s")),
            ("mean E2E there, W (completed requests of the window, from sending)", _num(e2e_mean, " s")),
            ("requests in flight Little's law expects there (X × W)", _num(expected)),
            ("requests in flight measured there (client view, time average over the window)", _num(measured)),
            ("Little's law check at that step (measured ÷ expected; ~1 in a steady state)", _num(check))]
    return (f'<p class="muted">{esc(LITTLE_LAW)}</p>' + kv_table(rows, table_id="planning-table")
            + '<p class="a">For a user population: <code>llmload plan RUN_DIR --users N --think-time 30s</code> '
              "gives the arrival rate and the requests in flight to expect, and says whether that rate lies "
              "within the last passing rate.</p>"
            + '<p class="muted">Assumptions: a steady state; users alternate thinking and one request; the '
              "response time measured here holds at the planned load; arrivals from the population behave "
              "like the tested arrival process. This is expected load, never a number of users supported: "
              "the capacity result is the last passing sustained rate under the recorded conditions.</p>")


def what_if_lines(rows: list[dict], *, twin: str, measured: Any = None, seconds: float | None = None) -> list[str]:
    """The what-if rows of `llmload.sim.whatif.what_if` as lines: each knee with its range and binding
    target, the measured knee beside the fitted one, and what the ranges cover."""
    from llmload.sim.whatif import RANGE_NOTE

    lines = [f"what if (the twin {twin}, in virtual time, the run's request mix and SLO"
             + (f"; {seconds:.0f} s" if seconds is not None else "") + "):"]
    for row in rows:
        if row["rate"] is None:
            text = "no knee: " + ("a target fails at every rate tried" if row.get("binding") else "no target to judge")
        else:
            span = (f" [{_num(row['low'])}, {_num(row['high'])}]" if row["low"] is not None and row["high"] is not None
                    else "")
            text = f"knee {_num(row['rate'], ' req/s')}{span}" + (f", {row['binding']} binds" if row.get("binding") else "")
        lines.append(f"  {row['what']}: {text} ({row['note']})")
        if row["what"] == "as fitted" and measured is not None and getattr(measured, "rate", None) is not None:
            from analysis.knee import knee_sentence

            lines.append(f"    measured in this run: {knee_sentence(measured)}")
    lines.append(f"  the ranges: {RANGE_NOTE}")
    return lines


def plan_run(run_dir: str | Path, *, users: int | None, think_time: str | None, slo_path: str | Path | None = None,
             twin: str | Path | None = None, what_if: dict | None = None, out: Callable[[str], None] = print) -> int:
    """Print the planning figures for `users` and `think_time` from a run directory, and with `twin` the
    what-if lines; return the exit code (module docstring; only what-if lines asked: 0)."""
    if (users is None) != (think_time is None) or (users is None and twin is None):
        raise ConfigError("give --users and --think-time together (Little's law), or --twin (what if)",
                          key="--users" if users is None else "--think-time")
    if users is not None and users < 1:
        raise ConfigError(f"expected at least 1 user, got {users}", key="--users")
    think_time_s = 0.0
    if think_time is not None:
        try:
            think_time_s = parse_duration(think_time)
        except ValueError as exc:
            raise ConfigError(str(exc), key="--think-time") from None
    from llmload.report.run_inputs import check_run_dir, client_from_manifest, current_slo, reanalysis_slo

    root = check_run_dir(run_dir)
    twin_read = None
    if twin is not None:
        from llmload.sim.whatif import read_twin

        twin_read = read_twin(twin)  # a bad or misfit twin: one line before any analysis
    import analysis

    run = analysis.load_run(root)
    manifest_file = str(root / "manifest.json")
    slo, judged = current_slo(root, run.manifest)
    if slo_path is not None:
        slo, judged = reanalysis_slo(slo_path, slo)[0], f"the SLO of {slo_path}"
    result = analysis.analyze(run, slo, client_from_manifest(run.manifest, file=manifest_file))
    from analysis.knee import knee_of

    code = 0
    if users is not None:
        plan = analysis.plan_in_flight(result, users, think_time_s)
        for line in plan_lines(plan, source=str(root)):
            out(line)
        below, line = (None, "") if plan.get("reference_step") is None else knee_verdict(
            knee_of(result.summary), float(plan["arrival_rate"]))
        if line:
            out(line)
        if plan.get("reference_step") is None:
            code = 3
        elif below is not None:
            code = 0 if below else 1
        else:
            code = 0 if plan["within_passing_rate"] else 1
    if twin_read is not None:
        import time

        from llmload.sim.whatif import sizes_from_records
        from llmload.sim.whatif import what_if as predict

        started = time.monotonic()
        arrival = str((((run.manifest or {}).get("config") or {}).get("shape") or {}).get("ladder", {}).get("arrival")
                      or "poisson")
        rows = predict(twin_read, lambda scale: sizes_from_records(run.records, input_scale=scale), slo,
                       arrival=arrival, **{k: v for k, v in (what_if or {}).items() if v is not None})
        for line in what_if_lines(rows, twin=str(twin), measured=knee_of(result.summary),
                                  seconds=time.monotonic() - started):
            out(line)
    out(f"  judged with {judged}")
    return code
