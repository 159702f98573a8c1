"""The twin against the real llama.cpp engine (issue 45): a short ladder against llama-server with Gemma 3
270M (`--parallel P`), `llmload fit` on it, the twin's knee (`llmload.sim.whatif.knee_with_range`, with
the ladder's own request mix) for `--parallel P` and for another `--parallel`, and the knee a live knee
search (ladder + refine) measures at each.

    eval "$(llmload engine path)"; PYTHONPATH=$PWD python bench/twin_real.py [--parallel 4] [--other 2] [--interleave]

`--interleave` runs a second fit ladder between the two searches, so that each search is predicted by a
fit made minutes before it (the engine's speed follows the shared VM's load); every live run records the
load average before and after it; `--search-around-twin 0.6 0.85 1.1 1.4` sets each search's ladder at those
multiples of the knee the fit just before it predicts (fixed rates all passed, or all failed, in rounds 1-4
and 6, as the VM's load moved the engine's speed tenfold). Beside the knees: each live search's own records fitted (what the
twin says when fitted in the searched minutes) and each live run's own requests replayed through each
twin in virtual time (`replay`: TTFT and TPOT per live step, measured and the twin's). Run directories
already in `--work` are reused, so a finished round is re-analysed without the engine.

Each live run starts its own llama-server on 127.0.0.1 (`llmload.llama_server.start_llama_server`, one
thread, 4096 context) and stops it. Slow: the engine serves one stream at about 27 tok/s on a shared
2-core VM, so every run is a few minutes (`--quick`: seconds, for the smoke test; its figures mean
nothing). Writes bench/results/twin_real.json (or `--out`); the run directories stay in `--work`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import machine, write_result

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "twin_real.json"
#: loose targets: on the shared 2-core VM (load 12-14 from other jobs) one llama-server thread gets a
#: fraction of a core, and a 100-token prompt takes seconds
SLO = {"ttft_p95": "5s", "tpot_p95": "1s", "min_samples": 5}


#: the request mix: prompt tokens (uniform, min and max), answer tokens, and the ladder's warm-up (s); `--quick`'s
#: are smaller (its figures mean nothing): one thread serves a request of 16-96 + 8 tokens in about 0.3 s of CPU,
#: 8-24 + 4 in about half that, and a 1-s warm-up sends fewer (the engine's 4.5 s of the smoke test -> 2.7 s); the
#: 0.5-s warm-up at the quick rates (at most 1 req/s) sends none
MIX = ((16, 96), 8, 3.0)
QUICK_MIX = ((8, 24), 4, 0.5)


def config(url: str, *, rates: list[float], step_s: float, refine: dict | None, quick: bool = False) -> dict:
    (low, high), output, warmup_s = QUICK_MIX if quick else MIX
    ladder = {"arrival": "poisson_exact", "warmup": f"{warmup_s:g}s", "drain_timeout": "30s", "stop_after_failures": 1,
              "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in rates]}
    if refine is not None:
        ladder["refine"] = refine
    else:
        ladder["stop_after_failures"] = None  # the fit's ladder: every step, the overload too
    return {"target": {"url": url, "api": "openai-chat", "model": "gemma3-270m", "server": "llamacpp",
                       "timeout": "300s", "idle_timeout": "300s"},  # queued past the slots: no headers yet
            "requests": {"input_tokens": {"dist": "uniform", "min": low, "max": high},
                         "output_tokens": {"dist": "fixed", "value": output}, "ignore_eos": True, "seed": 1},
            "client": {"max_concurrency": 64, "max_send_lag_p99": "200ms", "max_worker_cpu": 1.0},
            "slo": dict(SLO), "shape": {"ladder": ladder},
            "telemetry": {"interval": "500ms", "gpu": "off"},
            "conditions": {"instances": 1, "notes": "llama-server --threads 1 --ctx-size 4096, Gemma 3 270M"}}


class Servers:
    """The llama-servers of the live runs: a fresh one for each run (each run meets an engine just started), or,
    with `keep` (`--quick`), one per `--parallel` kept for every run at it and stopped by `close` (a start is a
    second of CPU: the model's load and warm-up)."""

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self.running: dict[int, tuple[str, subprocess.Popen]] = {}

    def start(self, parallel: int, log_path: Path) -> str:
        from llmload.llama_server import start_llama_server

        if parallel not in self.running:
            self.running[parallel] = start_llama_server(port=0, parallel=parallel, threads=1, ctx_size=4096,
                                                        log_path=log_path)
        return self.running[parallel][0]

    def done(self, parallel: int) -> None:
        if not self.keep:
            self._stop(parallel)

    def close(self) -> None:
        for parallel in list(self.running):
            self._stop(parallel)

    def _stop(self, parallel: int) -> None:
        from llmload.llama_server import stop_llama_server

        if parallel in self.running:
            stop_llama_server(self.running.pop(parallel)[1])


def live(name: str, work: Path, parallel: int, cfg_of, servers: Servers) -> Path:
    """A run against a llama-server with `parallel` slots (`servers`'; reused when it finished before)."""
    folder = work / name
    run_dir = folder / "run"
    if (run_dir / "summary.json").exists():
        return run_dir
    folder.mkdir(parents=True, exist_ok=True)
    load_before = [round(x, 2) for x in os.getloadavg()]
    url = servers.start(parallel, folder / "llama-server.log")
    started = time.monotonic()
    try:
        path = folder / "run.yaml"
        path.write_text(yaml.safe_dump(cfg_of(url), sort_keys=False))
        done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(path), "--out", str(run_dir),
                               "--no-report"],  # summary.json and the records are read: no report.html
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
                              env={**os.environ})
    finally:
        servers.done(parallel)
    (folder / "run.log").write_text(done.stdout)
    (folder / "wall.json").write_text(json.dumps({"wall_s": time.monotonic() - started, "load_before": load_before,
                                                  "load_after": [round(x, 2) for x in os.getloadavg()],
                                                  "ended_at": time.strftime("%H:%M:%SZ", time.gmtime())}))
    return run_dir


def measured_knee(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    knee = summary.get("knee") or {}
    return {k: knee.get(k) for k in ("rate", "low", "high", "binding")} | {
        "search": (summary.get("search") or {}).get("stopped")}


def fit_twin(ladder_dir: Path, twin_path: Path) -> dict:
    """`llmload fit` on a run: its estimates (printed), what it could not observe, misfits; the twin YAML
    at `twin_path` (None there when the run does not fit)."""
    import analysis
    from analysis.fit import describe, fit_run, twin_yaml

    fit = fit_run(analysis.load_run(ladder_dir))
    twin_path.write_text(twin_yaml(fit, source=str(ladder_dir)))
    for e in fit.estimates:
        print(f"  fit of {ladder_dir.parent.name} {e.key}: {describe(e)}", flush=True)
    for why in fit.misfit:
        print(f"  fit of {ladder_dir.parent.name}: DOES NOT FIT: {why}", flush=True)
    return {"fit": {e.key: {"value": e.value, "error": e.error, "basis": e.basis} for e in fit.estimates},
            "unobserved": dict(fit.unobserved), "misfit": list(fit.misfit), "twin": twin_path.read_text()}


def predict(twin_path: Path, sizes, parallels: tuple[int, ...], *, quick: bool) -> dict:
    """The twin's knee with its range (`knee_with_range`) at each `--parallel`; {} for a misfit twin or a
    twin the sim refuses (e.g. a negative fitted intercept)."""
    from llmload.config import SLO as SLOModel
    from llmload.errors import ConfigError
    from llmload.sim.whatif import knee_with_range, read_twin

    try:
        twin = read_twin(twin_path)
    except ConfigError as exc:
        print(f"  no prediction from {twin_path.name}: {exc}", flush=True)
        return {}
    unseen = [k for k in ("step_base_s", "decode_cost_s", "prefill_cost_s") if twin.unwritten(k)]
    if unseen:  # the sim's defaults would stand in for the server's costs: no prediction
        print(f"  no prediction from {twin_path.name}: not observed: {', '.join(unseen)}", flush=True)
        return {}
    out = {}
    for parallel in parallels:
        t0 = time.monotonic()
        got = knee_with_range(twin, sizes, SLOModel.model_validate(SLO), changes={twin.slots_key: parallel},
                              arrivals=400 if quick else 3000, arrival="poisson")
        out[parallel] = {**got, "seconds": round(time.monotonic() - t0, 1)}
        print(f"  twin {twin_path.name} --parallel {parallel}: knee {got['rate']} [{got['low']}, {got['high']}]",
              flush=True)
    return out


def _gaps(sent, first, token_times) -> dict:
    """Inter-token gaps split by whether a prompt was in flight (another request sent before the gap's
    end and given its first token after its start): counts and means (s)."""
    import numpy as np

    s_sorted, f_sorted = np.sort(sent), np.sort(first)
    gaps, busy = [], []
    for t in token_times:
        t = np.asarray(t, dtype=float)
        if len(t) < 2:
            continue
        a, b = t[:-1], t[1:]
        gaps.append(b - a)
        busy.append(np.searchsorted(s_sorted, b, side="left") - np.searchsorted(f_sorted, a, side="right") > 0)
    if not gaps:
        return {}
    g, w = np.concatenate(gaps), np.concatenate(busy)
    mean = lambda v: round(float(v.mean()), 4) if len(v) else None  # noqa: E731
    return {"itl_quiet_n": int((~w).sum()), "itl_quiet_mean": mean(g[~w]), "itl_prompt_n": int(w.sum()),
            "itl_prompt_mean": mean(g[w])}


def replay(twin_path: Path, run_dir: Path) -> list[dict]:
    """The live run's own requests (send times, prompt and output tokens, in order) served by the twin in
    virtual time (`run_virtual`, with the live server's slots): per live step, the measured TTFT and
    TPOT p50 / p95 beside the twin's for the same requests, and the inter-token gaps split by whether a
    prompt was in flight (`_gaps`: a model that takes a prompt in fewer steps than the server has fewer,
    longer gaps beside a prompt). Where the twin's are higher at the same arrivals, its costs are higher
    than the live server's were then (or its model is wrong)."""
    import numpy as np

    import analysis
    from llmload.errors import ConfigError
    from llmload.sim.truth import engine_limits, run_virtual
    from llmload.sim.whatif import read_twin

    try:
        twin = read_twin(twin_path)
    except ConfigError:
        return []
    if any(twin.unwritten(k) for k in ("step_base_s", "decode_cost_s", "prefill_cost_s")):
        return []  # the sim's defaults, not the server's costs
    run = analysis.load_run(run_dir)
    r = run.records
    r = r[r["sent_at"].notna() & r["input_tokens"].notna() & r["output_tokens"].notna()].sort_values("sent_at")
    parallel = int(run.manifest["conditions"]["max_num_seqs"])
    limits = engine_limits(twin.sim_settings(**{twin.slots_key: parallel}), twin.flavor)
    sent = r["sent_at"].to_numpy(dtype=float)
    outputs = np.maximum(r["output_tokens"].to_numpy(dtype=int), 1)
    frame = run_virtual(limits, sent - sent[0], r["input_tokens"].to_numpy(dtype=int), outputs, tokens=True)
    live_first = r["first_token_at"].to_numpy(dtype=float)
    twin_first = (frame["arrival_s"] + frame["ttft_s"]).to_numpy() + sent[0]
    twin_times = [np.asarray(t) + sent[0] for t in frame["token_times_s"]]
    live_times = list(r["token_times"])
    ttft = (r["first_token_at"] - r["sent_at"]).to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (r["last_token_at"] - r["first_token_at"]).to_numpy(dtype=float) / (outputs - 1),
                        np.nan)
    rows = []
    labels = r["step"].to_numpy()
    for label in dict.fromkeys(labels):
        m = labels == label
        span = sent[m].max() - sent[m].min()

        def q(values, p, m=m):
            v = values[m]
            v = v[np.isfinite(v)]
            return round(float(np.percentile(v, p)), 3) if len(v) else None

        rows.append({"step": str(label), "requests": int(m.sum()),
                     "rate": round(float((m.sum() - 1) / span), 3) if span > 0 else None,
                     "live": {"ttft_p50": q(ttft, 50), "ttft_p95": q(ttft, 95), "tpot_p50": q(tpot, 50),
                              "tpot_p95": q(tpot, 95),
                              **_gaps(sent[m], live_first[m], [t for t, k in zip(live_times, m, strict=True) if k])},
                     "twin": {"ttft_p50": q(frame["ttft_s"].to_numpy(), 50), "ttft_p95": q(frame["ttft_s"].to_numpy(), 95),
                              "tpot_p50": q(frame["tpot_s"].to_numpy(), 50),
                              "tpot_p95": q(frame["tpot_s"].to_numpy(), 95),
                              **_gaps(sent[m], twin_first[m], [t for t, k in zip(twin_times, m, strict=True) if k])}})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, default=4, help="the slots of the server the twin is fitted to")
    ap.add_argument("--other", type=int, default=2, help="the other --parallel the twin predicts")
    ap.add_argument("--quick", action="store_true", help="seconds-long runs (the smoke test)")
    ap.add_argument("--search-rates", type=float, nargs="+", help="the live searches' ladder (req/s)")
    ap.add_argument("--fit-rates", type=float, nargs="+", help="the fit's ladder (req/s)")
    ap.add_argument("--interleave", action="store_true",
                    help="a fit ladder before each live search (each predicted by the fit in its own time window)")
    ap.add_argument("--search-around-twin", type=float, nargs="+", metavar="FACTOR",
                    help="each live search's ladder at these multiples of the knee the fit just before it predicts "
                         "at that --parallel (the engine's speed follows the VM's load: fixed rates may all pass "
                         "or all fail); --search-rates where the fit gave no knee")
    ap.add_argument("--skip-other", action="store_true",
                    help="no live search at --other (its knee is still predicted): a shorter round")
    ap.add_argument("--work", type=Path, default=Path("/tmp/twin_real"))
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    before = machine()
    from llmload.llama_server import find_llama_server, find_model

    if find_llama_server() is None or find_model() is None:
        print("no llama-server or model here (eval \"$(llmload engine path)\"): nothing measured")
        write_result(args.out, "twin_real", argv, before, skipped="no engine")
        return 0
    import analysis
    from llmload.sim.whatif import sizes_from_records

    # `--quick`: 2-s steps at twice the rates of its former 4-s ones, the same 1 and 2 requests a step (the engine's
    # CPU is its requests'): each run 4 s shorter, the smoke test 26 s -> 18 s of wall for the same CPU
    step_s = 2.0 if args.quick else 45.0
    fit_rates = args.fit_rates or ([0.3, 0.8] if args.quick else [0.06, 0.12, 0.2, 0.35])
    search_rates = args.search_rates or ([0.4, 1.0] if args.quick else [0.08, 0.16, 0.28])
    refine = ({"budget": "10s", "duration": "4s", "max_steps": 1} if args.quick
              else {"budget": "300s", "precision": 0.05, "max_steps": 4})
    parallels = (args.parallel, args.other)
    fit_of = lambda url: config(url, rates=fit_rates, step_s=step_s, refine=None, quick=args.quick)  # noqa: E731
    search_of = lambda url: config(url, rates=search_rates, step_s=step_s, refine=refine, quick=args.quick)  # noqa: E731
    # the live runs in order: (name, --parallel, config); a search is predicted by the last fit before it
    order = [(f"ladder-p{args.parallel}", args.parallel, fit_of), (f"search-p{args.parallel}", args.parallel, search_of)]
    if args.interleave:
        order.append((f"ladder-p{args.parallel}-b", args.parallel, fit_of))
    if not args.skip_other:
        order.append((f"search-p{args.other}", args.other, search_of))
    results: dict = {"order": [name for name, *_ in order], "fits": {}, "predicted": {}, "measured": {}, "paired": {},
                     "self_fit": {}, "replay": {}, "load": {}}
    sizes = None
    last_fit = None
    servers = Servers(keep=args.quick)
    try:
        for name, parallel, cfg_of in order:
            knee = (results["predicted"].get(last_fit) or {}).get(parallel, {}).get("rate") if last_fit else None
            if cfg_of is search_of and args.search_around_twin and knee:
                rates = [round(knee * f, 3) for f in args.search_around_twin]
                results.setdefault("search_rates_used", {})[name] = rates
                cfg_of = lambda url, rates=rates: config(url, rates=rates, step_s=step_s, refine=refine,  # noqa: E731
                                                         quick=args.quick)
            run_dir = live(name, args.work, parallel, cfg_of, servers)
            wall = json.loads((run_dir.parent / "wall.json").read_text())
            results["load"][name] = {k: wall.get(k) for k in ("load_before", "load_after", "ended_at", "wall_s")}
            if cfg_of is fit_of:  # (a search's cfg_of may be its own ladder around the twin's knee, never fit_of)
                twin_path = args.work / f"twin-{name}.yaml"
                results["fits"][name] = fit_twin(run_dir, twin_path)
                if sizes is None:
                    sizes = sizes_from_records(analysis.load_run(run_dir).records)
                results["predicted"][name] = predict(twin_path, sizes, parallels, quick=args.quick)
                last_fit = name
                continue
            measured = {**measured_knee(run_dir), "wall_s": wall["wall_s"]}
            results["measured"][parallel] = measured
            print(f"  live --parallel {parallel}: {measured}", flush=True)
            got = results["predicted"].get(last_fit, {}).get(parallel) or {}
            results["paired"][parallel] = {
                "fit": last_fit, "predicted": got.get("rate"), "measured": measured["rate"],
                "error": (None if got.get("rate") is None or measured["rate"] is None
                          else (got["rate"] - measured["rate"]) / measured["rate"])}
            own = args.work / f"twin-{name}-itself.yaml"  # diagnostic: the fit of the search's own records
            results["self_fit"][parallel] = {**fit_twin(run_dir, own), "predicted": predict(own, sizes, parallels,
                                                                                             quick=args.quick)}
            results["replay"][name] = {twin.stem: replay(twin, run_dir) for twin in
                                       [args.work / f"twin-{f}.yaml" for f in results["fits"]] + [own]}
    finally:
        servers.close()
    results["error"] = {p: v["error"] for p, v in results["paired"].items()}
    print("  relative error (twin - live) / live, each from the fit just before it:", results["error"], flush=True)
    write_result(args.out, "twin_real", argv, before, parallel=args.parallel, other=args.other, quick=args.quick,
                 mix=dict(zip(("input_tokens", "output_tokens", "warmup_s"), QUICK_MIX if args.quick else MIX,
                              strict=True)),
                 step_s=step_s,
                 fit_rates=fit_rates, search_rates=search_rates, refine=refine, slo=SLO, interleave=args.interleave,
                 **results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
