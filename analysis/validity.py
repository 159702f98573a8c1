"""Was the step a fair test of the server? The generator-validity rule (METRICS.md "invalid").

The question: could the load generator's own deviation have changed the load the server saw, or a
number the SLO judges? Each check gives the measured value, its limit, the config key that sets the
limit and what to do; any failed check makes the step `invalid`.

- `send_lag`: p99 of `sent_at - scheduled_at` over uncapped arrivals. Its limit is
  `client.max_send_lag_p99` when set; else the smallest of
  - the load term: `client.send_lag_share_of_interarrival` (1.0) x the step's mean inter-arrival time
    `1 / offered rate`. A loop stalled for L sends the arrivals due meanwhile together; under one mean
    gap that bunches at most about one other arrival with a late one, within a Poisson process's own
    clumping, so the server sees the planned load;
  - per judged latency threshold among `LAG_SENSITIVE`, the number term: the larger of
    `client.send_lag_share_of_target` (0.1) x the threshold and the measured value's distance from it.
    A loop that late also stamps tokens up to that late, so the judged number could be off by the lag:
    harmless while that is a small share of the target, or while the number is further from its
    threshold than the lag (its verdict cannot flip).
  30 ms is irrelevant at 4 req/s with a 1 s TTFT target (limit min(250 ms, 100 ms or more)), fatal at
  400 req/s with a 50 ms ITL target (limit min(2.5 ms, ...)). A step with neither term (closed loop,
  no latency threshold) has no send-lag limit.
- `rate_shortfall`: achieved rate under `(1 - client.max_rate_shortfall)` x offered (open loop only).
- `worker_cpu`: the busiest worker process's CPU while it was sending the step's arrivals (the
  `worker_cpu` telemetry of the step) over `client.max_worker_cpu`.
- `client_error`: any arrival failed inside the generator itself (outcome `client_error`).
- `client_cap`: at least `CLIENT_CAP_SHARE` of the window's arrivals waited for a free slot of the
  client's own cap (`client.max_concurrency`) and the server was sent (`received_rate`: requests sent
  inside the window / window) less than the offered rate by more than `client.max_rate_shortfall`,
  and the SLO judges no user-side wait (`client_wait`,
  `user_ttft`, `user_e2e`): the server was sent less than the offered load (the offered, achieved and
  goodput rates count those arrivals), so the step cannot pass on the server's figures alone. Whenever
  the cap holds that share back, judged or not, the row gets `limit: {kind: "client_cap", evidence:
  {capped_share, client_wait_p95_s, received_rate}, advice}` (`client_cap_limit`), which the
  live table, the closing lines and summary.json show.
- `clock`: a worker on another host runs on the master's clock as the master measured it
  (`llmload.runtime.wire.clocksync`); its error over the step, the offset's uncertainty (half the round trip)
  plus how far the offset drifted by the step's end, shifts that worker's arrivals and timestamps against
  the others' and the server's as a constant send lag would. Its limit is the send lag's.

The advice follows the cause (`generator_advice`): a lost worker, a server whose answers kept the
generator busy (most requests failed or were malformed while a worker's CPU was high) and requests that
failed inside llmload (a dataset or a hook raising) each get their own advice; only a generator that
was really CPU-bound is told `--processes N` (sized from the measured CPU: enough processes that each
would stay under half of `client.max_worker_cpu`), and only one that was not is told to find a
quieter machine.
"""

from __future__ import annotations

import math

from llmload import slo as slo_dims
from llmload.config import SLO, Client

__all__ = ["CLIENT_CAP_SHARE", "LAG_SENSITIVE", "client_cap_limit", "client_cap_line", "generator_advice",
           "generator_checks", "send_lag_limit", "suggested_processes"]

#: share of a step's arrivals held at the client's concurrency cap from which the cap bounds the load
CLIENT_CAP_SHARE = 0.5
#: latency targets that judge the user's side of the cap (planned arrival to token, or the wait itself)
_USER_SIDE = ("client_wait", "user_ttft", "user_e2e")

#: latency thresholds a late generator can shift by its lag (TPOT divides a delay over the whole
#: answer; the server queue is the server's own figure)
LAG_SENSITIVE = tuple(d.name for d in slo_dims.LATENCY if d.lag_sensitive)


def _nan(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(value: object) -> float | None:
    """`value` as a float, None when it is missing (None, NaN) or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or _nan(value):
        return None
    return float(value)


def send_lag_limit(offered_rate: float, slo: SLO, client: Client, metrics: dict | None = None
                   ) -> tuple[float | None, str, str]:
    """(limit in seconds or None, the config key that sets it, how it was derived) for one step;
    `metrics` (the step's row) gives the measured latencies whose distance from a threshold counts."""
    if client.max_send_lag_p99 is not None:
        return client.max_send_lag_p99, "client.max_send_lag_p99", "set in the config"
    terms: list[tuple[float, str, str]] = []
    if not _nan(offered_rate) and offered_rate > 0:
        share = client.send_lag_share_of_interarrival
        terms.append((share / offered_rate, "client.send_lag_share_of_interarrival",
                      f"{share:g} x {1000 / offered_rate:.3g} ms between arrivals at {offered_rate:.3g} req/s"))
    share = client.send_lag_share_of_target
    for t in slo.thresholds:
        if t.metric not in LAG_SENSITIVE:
            continue
        value = _number((metrics or {}).get(f"{t.key}_s"))
        basis = f"{share:g} x the {t.key} target {t.value_s * 1000:.4g} ms"
        allowed = share * t.value_s
        if value is not None and abs(value - t.value_s) > allowed:
            allowed = abs(value - t.value_s)
            basis = f"the {t.key} measured {value * 1000:.4g} ms is that far from its {t.value_s * 1000:.4g} ms target"
        terms.append((allowed, "client.send_lag_share_of_target", basis))
    if not terms:
        return None, "client.max_send_lag_p99", "no offered rate and no latency target: not limited"
    return min(terms, key=lambda term: term[0])


def suggested_processes(workers: int, cpu: float, client: Client) -> int:
    """Worker processes that keep each under half of `client.max_worker_cpu` at the measured CPU."""
    workers = max(1, workers)
    per_process = client.max_worker_cpu / 2
    return max(workers + 1, math.ceil(workers * cpu / per_process))


def _advice(metrics: dict, client: Client) -> str:
    cpu = _number(metrics.get("worker_cpu_max"))
    workers = int(metrics.get("workers") or 1) if not _nan(metrics.get("workers")) else 1
    if cpu is None:
        return f"run with --processes {workers + 1}, or on a quieter machine"
    if cpu >= client.max_worker_cpu / 2:
        return (f"run with --processes {suggested_processes(workers, cpu, client)} (the busiest worker "
                f"used {cpu:.0%} of a core while sending)")
    return (f"the busiest worker used only {cpu:.0%} of a core while sending, so other work on this machine "
            "held it up: run on a quieter machine (more --processes will not help)")


def client_cap_limit(metrics: dict, client: Client) -> dict | None:
    """`{kind: "client_cap", evidence, advice, message}` when at least `CLIENT_CAP_SHARE` of the step's
    arrivals waited at the client's concurrency cap; None otherwise."""
    share = _number(metrics.get("capped_share"))
    if share is None or share < CLIENT_CAP_SHARE:
        return None
    wait, received, offered = (_number(metrics.get(k)) for k in ("client_wait_p95_s", "received_rate", "offered_rate"))
    if offered is not None and received is not None and received >= offered * (1.0 - client.max_rate_shortfall):
        return None  # the arrivals waited a little, but the server was sent the offered load
    cap = f"client.max_concurrency {client.max_concurrency}" if client.max_concurrency else "the client's pool"
    evidence = {"capped_share": share, "client_wait_p95_s": wait, "received_rate": received,
                "offered_rate": offered, "max_concurrency": client.max_concurrency}
    rates = "" if received is None or offered is None else \
        f": the server was sent {received:.3g} req/s of {offered:.3g} offered"
    waited = "" if wait is None else f" (client wait p95 {wait:.3g} s)"
    above = f" above {client.max_concurrency}" if client.max_concurrency else ""
    advice = (f"raise client.max_concurrency{above}, or write a client_wait_p95 or user_ttft_p95 target to "
              "judge the cap as part of the system")
    return {"kind": "client_cap", "evidence": evidence, "advice": advice,
            "message": f"{share:.0%} of arrivals waited for a free slot of {cap}{waited}{rates}"}


def client_cap_line(label: str, row: dict) -> str | None:
    """One line for a step whose load the client cap held back and whose verdict does not already say so
    (an invalid `client_cap` step says it in its invalid reason); None otherwise."""
    limit = row.get("limit")
    if not isinstance(limit, dict) or limit.get("kind") != "client_cap":
        return None
    if any(r.get("check") == "client_cap" for r in row.get("invalid_reasons") or [] if isinstance(r, dict)):
        return None
    ev = limit.get("evidence") or {}
    sent = ev.get("received_rate")
    rates = f", the server was sent {sent:.3g} req/s" if isinstance(sent, (int, float)) and not _nan(sent) else ""
    return (f"step {label} limited by the client's cap: {ev.get('capped_share', 0):.0%} of arrivals waited for a "
            f"free slot{rates}: {limit.get('advice')}")


def _lost_workers(metrics: dict) -> list:
    lost = metrics.get("lost_workers")
    return list(lost) if isinstance(lost, (list, tuple)) else []


def generator_advice(metrics: dict, client: Client) -> str:
    """What to do about a generator that did not deliver the load, following its cause (module docstring)."""
    lost = _lost_workers(metrics)
    if lost:
        return (f"worker(s) {', '.join(map(str, lost))} were lost during the step (their planned arrivals are "
                "recorded cancelled): read the worker's log for why it died (killed, out of memory, a dataset "
                "or hook error), fix that and rerun; more --processes or a quieter machine will not help")
    outcomes = metrics.get("outcomes") or {}
    arrivals = metrics.get("arrivals") or 0
    errors = outcomes.get("client_error", 0)
    if errors and arrivals and errors >= arrivals / 2:
        return (f"{errors} of {arrivals} requests failed inside llmload (outcome client_error), usually a "
                "dataset entry or a request hook that raises: see their `error` in records.parquet and fix the "
                "dataset or hook; more --processes will not help")
    cpu = _number(metrics.get("worker_cpu_max"))
    flooded = sum(outcomes.get(k, 0) for k in ("malformed", "http_error", "timeout", "disconnect"))
    if cpu is not None and cpu >= client.max_worker_cpu / 2 and arrivals and flooded >= arrivals / 2:
        return (f"{flooded} of {arrivals} requests ended malformed, in an HTTP error, timed out or disconnected "
                f"while the busiest "
                f"worker used {cpu:.0%} of a core: the server's answers (endless or oversized lines, floods of "
                "events) kept the generator busy; check the server's output before adding --processes")
    return _advice(metrics, client)


def generator_checks(metrics: dict, slo: SLO, client: Client) -> list[dict]:
    """The failed generator checks of one step's `step_metrics` row (empty: the step is valid).

    Each: `check`, `measured`, `limit`, `key` (the config key of the limit), `advice`, `message`.
    A client cap that held back the load also puts its `limit` into `metrics` (`client_cap_limit`)."""
    failed: list[dict] = []
    offered, achieved = metrics["offered_rate"], metrics["achieved_rate"]
    advice = generator_advice(metrics, client)

    def fail(check: str, measured: float, limit: float | None, key: str | None, text: str, what: str) -> None:
        failed.append({"check": check, "measured": measured, "limit": limit, "key": key, "advice": what,
                       "message": f"{text}: {what}"})

    if not _nan(offered) and offered > 0 and achieved < offered * (1.0 - client.max_rate_shortfall):
        floor = offered * (1.0 - client.max_rate_shortfall)
        fail("rate_shortfall", achieved, floor, "client.max_rate_shortfall",
             f"achieved {achieved:.3g} req/s of {offered:.3g} offered, under the {floor:.3g} req/s floor "
             f"(client.max_rate_shortfall {client.max_rate_shortfall:g})", advice)
    lag = metrics["send_lag_p99_s"]
    limit, key, basis = send_lag_limit(offered, slo, client, metrics)
    if limit is not None and not _nan(lag) and lag > limit:
        fail("send_lag", lag, limit, key,
             f"send lag p99 {lag * 1000:.3g} ms over its limit {limit * 1000:.3g} ms ({key}: {basis})", advice)
    cpu = _number(metrics.get("worker_cpu_max"))
    if cpu is not None and cpu > client.max_worker_cpu:
        fail("worker_cpu", cpu, client.max_worker_cpu, "client.max_worker_cpu",
             f"worker CPU {cpu:.0%} of a core while sending, over client.max_worker_cpu "
             f"{client.max_worker_cpu:.0%}", advice)
    clock = metrics.get("clock")
    if limit is not None and isinstance(clock, dict) and not _nan(clock.get("error_s")) and clock["error_s"] > limit:
        name = clock["worker"]
        fail("clock", clock["error_s"], limit, key,
             f"worker {name}'s clock is known only to {clock['error_s'] * 1000:.3g} ms over the step "
             f"(half its round trip to the master {clock['uncertainty_s'] * 1000:.3g} ms, drift "
             f"{clock['drift_s'] * 1000:.3g} ms), over the limit {limit * 1000:.3g} ms ({key}: {basis})",
             f"sync worker {name}'s host with NTP (chrony) and run it nearer the master (a shorter round trip), "
             "or run without it")
    errors = (metrics.get("outcomes") or {}).get("client_error", 0)
    if errors:
        fail("client_error", float(errors), 0.0, None,
             f"{errors} request(s) failed inside llmload itself (outcome client_error, not the server's fault)",
             "see their `error` in records.parquet (a dataset entry or a request hook that raises: fix it); "
             "the server's counts leave them out")
    lost = _lost_workers(metrics)
    if lost:
        fail("worker_lost", float(len(lost)), 0.0, None,
             f"worker(s) {', '.join(map(str, lost))} lost during the step: the server did not get the planned load",
             advice)
    cap = client_cap_limit(metrics, client)
    if cap is not None:
        metrics["limit"] = {k: cap[k] for k in ("kind", "evidence", "advice")}
        if not any(t.metric in _USER_SIDE for t in slo.thresholds):
            fail("client_cap", cap["evidence"]["capped_share"], CLIENT_CAP_SHARE, "client.max_concurrency",
                 f"{cap['message']}; no client_wait, user_ttft or user_e2e target judges that wait",
                 cap["advice"])
    return failed
