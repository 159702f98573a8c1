"""A soak against the sim, every process's memory over time (issue 46): `llmload run` with a soak of
`--minutes` at `--rate` req/s against `llmload sim` (real processes: the launcher, the Locust master,
its forked worker(s), the sim), with a slow drift injected into the sim.

Measured:

- **RSS of every process** (psutil every `--sample-s`): the launcher, the master, each worker, the sim;
  per process the RSS at the load's start, after `--settle-min` minutes, at the load's end, its peak
  while loaded, its growth from the settle point to the end (flat: "nothing per request kept past its
  shipping"), and the peak after the load (the master's finish: the merge, the analysis, the report);
- **every record on disk**: `records.parquet` against the sim's own log (its ground truth, one JSON line
  per request it received, read line by line): each request the sim received has its record, with the
  same outcome class and the same output tokens; the records match the plan's arrivals;
- **the report's slices against the injected drift**: the sim's engine steps cost
  `step_base + growth x age` (`step_cost_growth_s_per_min`, `llmload.sim.engine`); the sim's own token
  times give the true decode step cost in each slice (median gap between consecutive tokens of the
  requests it received in the slice's window); the report's per-slice TPOT p50 must follow it, its
  trend test must flag TPOT, TTFT and E2E as drifting, and the Theil-Sen slope of TPOT p95 per hour must
  be the injected growth per hour (within `SLOPE_TOLERANCE`).

Request sizes: 16 prompt tokens, `--output-tokens` (2) output tokens (one decode gap: a request's
TPOT is one engine step), the sim's batch unlimited and its engine step 10 ms at the start: 300 req/s is
then 600 streamed tokens a second, which one worker and one sim each held at about 40% of a core on this
2-core machine when it was quiet (bench/README.md "Two-worker scaling": 300 req/s of 32 tokens took 37%
and 40%); longer answers would make the machine, not the run, the thing measured. Two worker processes
(`--processes 2`) by default: the machine is shared, and one process starved of its share fell behind
(the first 10-minute run, bench/README.md "Soak").

    python bench/soak.py                          # 30 minutes at 300 req/s (540,000 records), 1-min slices
    python bench/soak.py --minutes 10 --out bench/results/soak-10min.json
    python bench/soak.py --minutes 0.5 --rate 20 --slice-s 5 --settle-min 0.1 --growth-ms-per-min 60  # smoke test

Results: bench/results/soak.json; bench/README.md ("Soak") reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"

#: the report's TPOT p95 slope per hour within this share of the injected growth per hour
SLOPE_TOLERANCE = 0.35
#: a slice's TPOT p95 within this share (plus `SLICE_SLACK_S`) of the sim's own TPOT p95 in its window
SLICE_TOLERANCE = 0.25
SLICE_SLACK_S = 0.003
#: the sim's outcome a record's outcome is compared with (the client's names for what the server did)
SIM_OUTCOMES = {"ok": "ok", "rejected": "rejected", "http_error": "http_error", "oom": "oom",
                "disconnect": "disconnect", "stall": "ok", "malformed": "malformed", "client_gone": "cancelled"}


#: the pre-flight check's requests (`preflight.json`) are in the sim's log, not in the run's records
PREFLIGHT_PREFIX = "preflight-"


def sim_settings(base_ms: float, growth_ms_per_min: float) -> dict:
    """Unlimited batch, no prefill or per-sequence cost: every engine step costs the base plus the growth.
    Prefix caching off: with 10 million KV blocks nothing is ever evicted, so the cache would keep an entry
    for every prompt's full block, growing with every request; these prompts share no prefix anyway."""
    return {"max_num_seqs": 100000, "max_num_batched_tokens": 10000000, "num_blocks": 10000000,
            "block_size": 16, "step_base_s": f"{base_ms}ms", "prefill_cost_s": "0ms", "decode_cost_s": "0ms",
            "load_time_s": "0s", "max_model_len": 100000, "step_cost_growth_s_per_min": f"{growth_ms_per_min}ms",
            "enable_prefix_caching": False}


def run_config(url: str, *, rate: float, duration_s: float, slice_s: float, output_tokens: int) -> dict:
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm", "timeout": "60s"},
            "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                         "output_tokens": {"dist": "fixed", "value": output_tokens}, "seed": 1},
            "client": {"max_concurrency": 1024},
            "shape": {"soak": {"rate": rate, "duration": f"{duration_s:g}s", "slice": f"{slice_s:g}s",
                               "arrival": "poisson", "drain_timeout": "20s"}},
            # generous targets: the drift is what is measured, not a pass
            "slo": {"ttft_p95": "10s", "e2e_p95": "20s", "min_samples": 5},
            "telemetry": {"gpu": "off"}}


class RssSampler:
    """RSS of the launcher's process tree and of the sim every `interval_s`, in a thread:
    rows (time, pid, role, rss bytes). Roles: launcher, master (the launcher's child), worker-N (the
    master's children, oldest first), sim."""

    def __init__(self, launcher_pid: int, sim_pid: int, interval_s: float) -> None:
        self.launcher_pid, self.sim_pid, self.interval_s = launcher_pid, sim_pid, interval_s
        self.rows: list[tuple[float, int, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.roles: dict[int, str] = {launcher_pid: "launcher", sim_pid: "sim"}

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _role(self, proc, parent_pid: int) -> str:
        if proc.pid not in self.roles:
            if parent_pid == self.launcher_pid:
                self.roles[proc.pid] = "master"
            else:
                workers = sum(1 for r in self.roles.values() if r.startswith("worker"))
                self.roles[proc.pid] = f"worker-{workers}"
        return self.roles[proc.pid]

    def sample(self) -> None:
        import psutil

        now = time.time()
        try:
            launcher = psutil.Process(self.launcher_pid)
            procs = [(launcher, "launcher")]
            for child in launcher.children(recursive=True):
                try:
                    procs.append((child, self._role(child, child.ppid())))
                except psutil.Error:
                    continue
        except psutil.Error:
            procs = []
        with contextlib.suppress(psutil.Error):
            procs.append((psutil.Process(self.sim_pid), "sim"))
        for proc, role in procs:
            try:
                self.rows.append((now, proc.pid, role, proc.memory_info().rss))
            except psutil.Error:
                continue

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)


def rss_figures(rows: list[tuple[float, int, str, int]], load_start: float, load_end: float,
                settle_s: float) -> dict:
    """Per role: RSS (MiB) at the load's start, after the settle time, at the load's end, the peak while
    loaded, growth from the settle point to the end, the peak after the load, and one value a minute."""
    mib = 1 / 2**20
    out = {}
    for role in sorted({r[2] for r in rows}):
        mine = [(t, rss) for t, _pid, r, rss in rows if r == role]
        loaded = [(t, rss) for t, rss in mine if load_start <= t <= load_end]
        if not loaded:
            continue

        def at(when: float, series: list[tuple[float, int]] = loaded) -> float:
            return round(min(series, key=lambda x: abs(x[0] - when))[1] * mib, 1)

        settle = at(load_start + settle_s)
        after = [rss for t, rss in mine if t > load_end]
        per_minute: dict[int, int] = {}
        for t, rss in loaded:
            minute = int((t - load_start) // 60)
            per_minute[minute] = max(per_minute.get(minute, 0), rss)
        out[role] = {"start_mib": at(load_start), "settled_mib": settle, "end_mib": at(load_end),
                     "peak_loaded_mib": round(max(r for _, r in loaded) * mib, 1),
                     "growth_after_settle_mib": round(at(load_end) - settle, 1),
                     "peak_after_load_mib": round(max(after) * mib, 1) if after else None,
                     "max_per_minute_mib": [round(per_minute[m] * mib, 1) for m in sorted(per_minute)]}
    return out


def read_sim_log(path: Path) -> dict[str, tuple[str, int, float, float]]:
    """request_id -> (outcome, output tokens, received_at, the sim's TPOT: (last token time - first) /
    (tokens - 1) from its own token times), line by line (the log of 540,000 requests is ~200 MB of
    JSON; only these four values are kept)."""
    out = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            times = row.get("token_times") or []
            tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) >= 2 else math.nan
            out[row["request_id"]] = (row["outcome"], int(row["output_tokens"]), float(row["received_at"]), tpot)
    return out


def check_records(run_dir: Path, sim: dict[str, tuple[str, int, float, float]], load_s: float) -> dict:
    """Every record on disk against the sim's log and the plan: each planned arrival has exactly one
    record, each request the sim received (the pre-flight's aside) has its record, and no `ok` record is
    unknown to the sim. Outcomes are compared apart: a request the client cancelled at a drain timeout
    may have been finished by the sim in the same instant (`ok` there, `cancelled` here)."""
    import collections

    import pyarrow.parquet as pq

    table = pq.read_table(run_dir / "records.parquet",
                          columns=["request_id", "outcome", "output_tokens", "sent_at", "step"])
    ids = table.column("request_id").to_pylist()
    outcomes = table.column("outcome").to_pylist()
    tokens = table.column("output_tokens").to_pylist()
    sent = table.column("sent_at").to_pylist()
    plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    planned = sum(int(s.get("planned_arrivals") or 0) for s in plan["steps"])
    seen, unknown_ok, token_mismatch = set(), 0, 0
    pairs: collections.Counter = collections.Counter()
    for rid, outcome, out_tokens, sent_at in zip(ids, outcomes, tokens, sent, strict=True):
        seen.add(rid)
        row = sim.get(rid)
        if row is None:
            unknown_ok += sent_at is not None and outcome == "ok"  # an answer the sim never gave
            continue
        if SIM_OUTCOMES.get(row[0], row[0]) != outcome:
            pairs[f"sim {row[0]} / record {outcome}"] += 1
        elif outcome == "ok" and int(out_tokens or 0) != row[1]:
            token_mismatch += 1
    preflight = sum(1 for rid in sim if rid.startswith(PREFLIGHT_PREFIX))
    no_record = sum(1 for rid in sim if rid not in seen and not rid.startswith(PREFLIGHT_PREFIX))
    n_sent = sum(1 for s in sent if s is not None)
    return {"planned_arrivals": planned, "records": len(ids), "unique_request_ids": len(seen),
            "sim_log_rows": len(sim), "sim_preflight_rows": preflight, "sent": n_sent,
            "sent_per_s": round(n_sent / load_s, 1) if load_s > 0 else None,
            "outcomes": dict(collections.Counter(outcomes)),
            "sim_requests_without_record": no_record, "ok_records_unknown_to_sim": int(unknown_ok),
            "outcome_differences": dict(pairs), "output_token_mismatches": token_mismatch,
            "every_record_on_disk": (no_record == 0 and len(ids) == planned and len(seen) == len(ids)
                                     and unknown_ok == 0 and token_mismatch == 0)}


def _p95(values: list[float]) -> float:
    """Linear-interpolation p95 (numpy's default, as `analysis.stats.quantiles`)."""
    if not values:
        return math.nan
    values = sorted(values)
    at = 0.95 * (len(values) - 1)
    lo = int(at)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (at - lo)


def check_slices(run_dir: Path, sim: dict[str, tuple[str, int, float, float]], growth_s_per_min: float) -> dict:
    """The report's slices against the sim's truth: per slice the p95 of the sim's own TPOT (from its token
    times) of the requests it received in the slice's window beside the report's TPOT p95 of that slice;
    the trend test's verdicts and the TPOT p95 slope against the injected growth."""
    import bisect

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    soak = summary.get("soak") or {}
    report = {s["label"]: s for s in summary.get("steps") or []}
    received = sorted((v[2], v[3]) for v in sim.values() if v[0] == "ok" and not math.isnan(v[3]))
    times = [t for t, _ in received]
    rows = []
    for step in json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))["steps"]:
        if step.get("phase") != "soak" or step.get("status") == "not_run":
            continue
        lo, hi = bisect.bisect_left(times, step["window_start"]), bisect.bisect_left(times, step["window_end"])
        truth = _p95([g for _, g in received[lo:hi]])
        p95 = _float(report.get(step["label"], {}).get("tpot_p95_s"))
        within = abs(p95 - truth) <= SLICE_SLACK_S + SLICE_TOLERANCE * truth
        rows.append({"label": step["label"], "sim_tpot_p95_ms": round(truth * 1000, 2),
                     "report_tpot_p95_ms": round(p95 * 1000, 2), "within": bool(within)})
    trends = {t["metric"]: t for t in soak.get("trends") or []}
    injected = growth_s_per_min * 60.0
    slope = trends.get("tpot_p95_s", {}).get("slope_per_hour")
    return {"slices": soak.get("slices"), "slice_s": soak.get("slice_s"), "drifting": soak.get("drifting"),
            "injected_step_cost_growth_ms_per_hour": round(injected * 1000, 2),
            "report_tpot_p95_slope_ms_per_hour": None if slope is None else round(slope * 1000, 2),
            "slope_ratio": None if not slope or not injected else round(slope / injected, 3),
            "slope_true": bool(slope and injected and abs(slope / injected - 1) <= SLOPE_TOLERANCE),
            "drift_flagged": {m: m in (soak.get("drifting") or []) for m in ("tpot_p95_s", "ttft_p95_s", "e2e_p95_s")},
            "slices_within": sum(r["within"] for r in rows), "per_slice": rows,
            "trends": {m: {"p": t["p"], "slope_per_hour": t.get("slope_per_hour"), "drifting": t["drifting"]}
                       for m, t in trends.items()},
            "verdict": summary.get("verdict")}


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="the soak's length")
    parser.add_argument("--rate", type=float, default=300.0, help="req/s (Poisson)")
    parser.add_argument("--slice-s", type=float, default=60.0, help="the soak's slice")
    parser.add_argument("--output-tokens", type=int, default=2, help="2: one decode gap, TPOT = the step cost")
    parser.add_argument("--processes", type=int, default=2, help="Locust worker processes")
    parser.add_argument("--base-ms", type=float, default=10.0, help="the sim's engine step at the start")
    parser.add_argument("--growth-ms-per-min", type=float, default=5.0,
                        help="injected: step cost growth (5: 10 -> 160 ms in 30 minutes)")
    parser.add_argument("--sample-s", type=float, default=2.0, help="RSS sampling interval")
    parser.add_argument("--settle-min", type=float, default=2.0, help="RSS compared from this point to the end")
    parser.add_argument("--work", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    parser.add_argument("--no-report", action="store_true",
                        help="no report.html: the slices are read from summary.json either way; the peak RSS after "
                             "the load then leaves the report's drawing out")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args(argv)
    import yaml
    from _common import machine, start_sim, write_result

    before = machine()
    work = args.work or Path(tempfile.mkdtemp(prefix="llmload-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    duration_s = args.minutes * 60.0
    sim, url, truth_path = start_sim(work / "sim", settings=sim_settings(args.base_ms, args.growth_ms_per_min))
    run_dir = work / "run"
    config = work / "soak.yaml"
    config.write_text(yaml.safe_dump(run_config(url, rate=args.rate, duration_s=duration_s, slice_s=args.slice_s,
                                                output_tokens=args.output_tokens), sort_keys=False))
    cmd = [sys.executable, "-m", "llmload.cli", "run", str(config), "--out", str(run_dir),
           "--processes", str(args.processes)] + (["--no-report"] if args.no_report else [])
    try:
        with open(work / "run.log", "w", encoding="utf-8") as log:
            t_launch = time.time()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            with RssSampler(proc.pid, sim.proc.pid, args.sample_s) as sampler:
                code = proc.wait(timeout=duration_s + 1800)
            t_exit = time.time()
    finally:
        sim.stop()
    plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    soak_steps = [s for s in plan["steps"] if s.get("phase") == "soak"]
    load_start = float(soak_steps[0]["start_at"])
    load_end = max(float(s["window_end"]) for s in soak_steps)
    rss = rss_figures(sampler.rows, load_start, load_end, args.settle_min * 60.0)
    sim_rows = read_sim_log(truth_path)
    records = check_records(run_dir, sim_rows, load_end - load_start)
    slices = check_slices(run_dir, sim_rows, args.growth_ms_per_min / 1000.0)
    print(json.dumps({"exit_code": code, "rss": {r: {k: v for k, v in f.items() if k != "max_per_minute_mib"}
                                                 for r, f in rss.items()},
                      "records": records, "slices": {k: v for k, v in slices.items() if k != "per_slice"}},
                     indent=1), flush=True)
    write_result(args.out, "soak", argv, before, exit_code=code, minutes=args.minutes, rate=args.rate,
                 slice_s=args.slice_s, output_tokens=args.output_tokens, input_tokens=16, processes=args.processes,
                 sim={"step_base_ms": args.base_ms, "step_cost_growth_ms_per_min": args.growth_ms_per_min},
                 launch_to_load_s=round(load_start - t_launch, 2), load_s=round(load_end - load_start, 1),
                 finish_s=round(t_exit - load_end, 1), rss_sample_s=args.sample_s, settle_min=args.settle_min, report=not args.no_report,
                 rss=rss, records=records, slices=slices)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if code in (0, 1, 3) else 1


if __name__ == "__main__":
    sys.exit(main())
