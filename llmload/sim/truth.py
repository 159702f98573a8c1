"""The simulated server's truth: its steady-state percentile curve and knee, from the engine in virtual time.

`llmload.sim.engine.Engine` is pure and clock-free; the live sim (`llmload.sim.loop.EngineLoop`) runs its
steps back to back, each on the previous step's planned end, and writes a step's tokens at that end.
Driven here the same way with a virtual clock and no sockets:

- a request arriving at `a` is queued (`Engine.add`) at the first step start at or after `a`: steps
  start at the previous step's end while the engine is busy; an idle engine starts its next step at the
  next arrival (the live loop waits for a submit, then starts at once);
- a token sampled in a step is written at the step's end: TTFT = first token's step end - arrival,
  E2E = last token's step end - arrival, TPOT = (E2E - TTFT) / (output tokens - 1);
- the engine is built from the sim settings as `llmload.sim.server.SimServer` builds it (flavour vLLM
  and SGLang: `max_num_seqs` slots, else `num_parallel`; prefix caching never hits: the requests here
  carry no shared prompt blocks; `prompt_tail_tokens` for the llama.cpp flavour only; `decode_step_s`, a
  cost per batch size, for every flavour).

Fed the live sim's own arrival times this gives its TTFT p95 within 20 ms (NOTES.md "The knee and its
noise"); with many arrivals at a fixed rate it gives the steady state the tool's knee is judged against.
Seeds give common random numbers: one stream of unit-rate gaps per seed, divided by the rate, so the
curve is smooth in the rate and bisection on it is stable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import pandas as pd

from llmload import slo as slo_dims
from llmload.sim.engine import Engine, EngineLimits
from llmload.sim.engine import Sequence as EngineSequence
from llmload.sim.settings import SimSettings

__all__ = ["engine_limits", "run_virtual", "steady_state_percentiles", "true_knee"]

#: request sizes: a fixed (input, output) pair, or `f(rng, n) -> (inputs, outputs)` arrays
RequestSizes = tuple[int, int] | Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
#: share of the first arrivals left out of the steady state (the empty-server start)
WARMUP_SHARE = 0.05


def engine_limits(settings: SimSettings | Mapping[str, Any] | None, flavor: str = "vllm", *,
                  prefix_caching: bool = False) -> EngineLimits:
    """The engine limits `llmload sim` builds for `settings` (a SimSettings, or its YAML mapping).
    `prefix_caching`: with the settings' `enable_prefix_caching` (vLLM flavour), as `llmload sim` has it,
    for a caller that gives each sequence its prompt's block hashes (a virtual run); off by default, for the
    callers that know only request sizes (a prefix cache without hashes finds nothing, and costs the
    engine its `decode_horizon`)."""
    s = settings if isinstance(settings, SimSettings) else SimSettings.model_validate(dict(settings or {}))
    slots = s.max_num_seqs if flavor in ("vllm", "sglang") else s.num_parallel
    return EngineLimits(max_num_seqs=slots, max_num_batched_tokens=s.max_num_batched_tokens,
                        num_blocks=s.num_blocks, block_size=s.block_size, step_base_s=s.step_base_s,
                        prefill_cost_s=s.prefill_cost_s, decode_cost_s=s.decode_cost_s,
                        step_cost_growth_s_per_min=s.step_cost_growth_s_per_min,
                        kv_leak_blocks_per_min=s.kv_leak_blocks_per_min,
                        enable_prefix_caching=prefix_caching and flavor == "vllm" and s.enable_prefix_caching,
                        prompt_tail_tokens=s.prompt_tail_tokens if flavor == "llamacpp" else 0,
                        decode_step_s=tuple(s.decode_step_s or ()))


def run_virtual(limits: EngineLimits, arrivals_s: np.ndarray, inputs: np.ndarray,
                outputs: np.ndarray, *, fast: bool = True, tokens: bool = False) -> pd.DataFrame:
    """Every request's `admitted_s` (the start of the step that first scheduled it: it waited in the
    queue from `arrival_s` to then), `ttft_s`, `tpot_s`, `e2e_s` (arrival order) when requests arrive at `arrivals_s`
    (sorted seconds) with these prompt and output token counts; the module docstring has the rules.
    `fast`: runs of identical decode-only steps are applied at once (`Engine.decode_horizon`), with the
    same result as step by step (`fast=False`, the reference the tests compare it with).
    `tokens`: also `token_times_s`, each request's token times (the ends of the steps that sampled them,
    on the arrivals' clock), as the live records' `token_times`."""
    n = len(arrivals_s)
    arrivals = np.asarray(arrivals_s, dtype=float)
    # lists while stepping (an item set per token written), arrays at the end
    first = [math.nan] * n
    last = [math.nan] * n
    admitted = [math.nan] * n
    engine = Engine(limits)
    times: list[list[float]] | None = [[] for _ in range(n)] if tokens else None
    seqs = [EngineSequence(seq_id=i, prompt_tokens=int(p), output_tokens=max(1, int(o)))
            for i, (p, o) in enumerate(zip(np.asarray(inputs)[:n].tolist(), np.asarray(outputs)[:n].tolist(),
                                           strict=True))]
    at = arrivals.tolist()  # Python floats: indexed once or twice per step
    t, nxt = 0.0, 0
    while nxt < n or engine.waiting or engine.running:
        if not engine.waiting and not engine.running:  # idle
            t = max(t, at[nxt])
        while nxt < n and at[nxt] <= t:
            engine.add(seqs[nxt])
            nxt += 1
        if fast:
            k, cost_s, admits = engine.decode_horizon()
            if k > 1:  # k identical decode steps at once: their ends by the same additions as one by one
                done, end = 1, t + cost_s
                bound = at[nxt] if admits and nxt < n else math.inf
                while done < k and end < bound:  # step `done` starts at `end`, before the next arrival
                    done += 1
                    end += cost_s
                ends = list(accumulate([cost_s] * done, initial=t))[1:] if times is not None else []
                for seq in engine.decode_steps(done):
                    last[seq.seq_id] = end
                    if times is not None:
                        times[seq.seq_id] += ends  # the same additions as `end`'s
                t = end
                continue
        result = engine.step(t)
        for seq in result.admitted:
            admitted[seq.seq_id] = t
        if not result.batch:  # nothing schedulable: the live loop waits for the next submit
            if nxt >= n:
                break
            t = max(t, at[nxt])
            continue
        t += result.cost_s
        for seq in result.emitted:
            i = seq.seq_id
            if seq.generated == 1:
                first[i] = t
            last[i] = t
            if times is not None:
                times[i].append(t)
    ttft, e2e = np.array(first, dtype=float) - arrivals, np.array(last, dtype=float) - arrivals
    out = np.maximum(np.asarray(outputs, dtype=float), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2e - ttft) / (out - 1), math.nan)
    frame = pd.DataFrame({"arrival_s": arrivals, "admitted_s": np.array(admitted, dtype=float), "ttft_s": ttft, "tpot_s": tpot,
                          "e2e_s": e2e})
    if times is not None:
        frame["token_times_s"] = times
    return frame


def _sizes(request_sizes: RequestSizes, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    if callable(request_sizes):
        inputs, outputs = request_sizes(rng, n)
        return np.asarray(inputs, dtype=int), np.asarray(outputs, dtype=int)
    prompt, output = request_sizes
    return np.full(n, int(prompt)), np.full(n, int(output))


def _unit_arrivals(arrival: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a unit-rate process (divide by the rate): Poisson (and poisson_exact, the same
    process in the long run), or constant."""
    if arrival in ("poisson", "poisson_exact"):
        return np.cumsum(rng.exponential(1.0, n))
    if arrival == "constant":
        return np.arange(n, dtype=float)
    raise ValueError(f'arrival must be "poisson", "poisson_exact" or "constant", got "{arrival}"')


def _percentiles(limits: EngineLimits, request_sizes: RequestSizes, rate: float, *,
                 wanted: Sequence[tuple[str, float]], arrivals: int, seed: int, arrival: str) -> dict:
    rng = np.random.default_rng(seed)
    unit = _unit_arrivals(arrival, arrivals, rng)
    inputs, outputs = _sizes(request_sizes, rng, arrivals)
    frame = run_virtual(limits, unit / rate, inputs, outputs)
    steady = frame.iloc[int(arrivals * WARMUP_SHARE):]
    return {f"{fig}_p{q:g}_s": float(np.nanpercentile(steady[f"{fig}_s"].to_numpy(), q)) for fig, q in wanted}


def steady_state_percentiles(sim_settings: SimSettings | Mapping[str, Any] | None, request_sizes: RequestSizes,
                             rates: Sequence[float], *, figures: Sequence[str] = ("ttft", "tpot", "e2e"),
                             q: float | Sequence[float] = 95.0, arrivals: int = 200_000,
                             seeds: Sequence[int] = (1, 2, 3), arrival: str = "poisson",
                             flavor: str = "vllm") -> pd.DataFrame:
    """One row per rate: `rate`, and for each figure and percentile `<figure>_p<q>_s` (mean over the
    seeds) with `<figure>_p<q>_s_sd` (their spread across seeds). `arrivals` per seed and rate (the
    first 5% left out as warm-up)."""
    limits = engine_limits(sim_settings, flavor)
    qs = [q] if isinstance(q, (int, float)) else list(q)
    wanted = [(fig, float(p)) for fig in figures for p in qs]
    rows = []
    for rate in rates:
        per_seed = [_percentiles(limits, request_sizes, float(rate), wanted=wanted, arrivals=arrivals, seed=s,
                                 arrival=arrival) for s in seeds]
        row: dict[str, float] = {"rate": float(rate)}
        for key in per_seed[0]:
            values = np.array([p[key] for p in per_seed])
            row[key] = float(values.mean())
            row[f"{key}_sd"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def true_knee(sim_settings: SimSettings | Mapping[str, Any] | None, request_sizes: RequestSizes, slo: Any, *,
              lo: float, hi: float, tol: float = 0.01, arrivals: int = 200_000, seeds: Sequence[int] = (1, 2, 3),
              arrival: str = "poisson", flavor: str = "vllm") -> dict:
    """Each percentile target's true crossing rate (bisection on the steady-state curve, to a relative
    `tol`) and the knee: `{"rate", "binding", "targets": {key: rate | None}}`. A target still under its
    threshold at `hi` has None (not crossed in [lo, hi]); one already over at `lo` has `lo`.

    `slo`: an `llmload.config.SLO` (its thresholds of ttft, tpot or e2e are used)."""
    limits = engine_limits(sim_settings, flavor)
    targets: dict[str, float | None] = {}
    chosen = [t for t in slo.thresholds if t.metric in ("ttft", "tpot", "e2e")]
    wanted = list(dict.fromkeys((t.metric, float(t.percentile)) for t in chosen))
    runs: dict[tuple[float, int], dict] = {}  # (rate, seed) -> every target's percentile: one run for them all

    def percentiles(rate: float, seed: int) -> dict:
        if (rate, seed) not in runs:
            runs[(rate, seed)] = _percentiles(limits, request_sizes, rate, wanted=wanted, arrivals=arrivals,
                                              seed=seed, arrival=arrival)
        return runs[(rate, seed)]

    for t in chosen:
        key = slo_dims.threshold_key(t.metric, t.percentile)
        column = f"{t.metric}_p{float(t.percentile):g}_s"

        def value(rate: float, column: str = column) -> float:
            return float(np.mean([percentiles(rate, s)[column] for s in seeds]))

        if value(hi) <= t.value_s:
            targets[key] = None
            continue
        if value(lo) > t.value_s:
            targets[key] = lo
            continue
        a, b = lo, hi
        while (b - a) > tol * a:
            mid = (a + b) / 2.0
            a, b = (mid, b) if value(mid) <= t.value_s else (a, mid)
        targets[key] = (a + b) / 2.0
    crossed = {k: v for k, v in targets.items() if v is not None}
    binding = min(crossed, key=crossed.__getitem__) if crossed else None
    return {"rate": crossed[binding] if binding else None, "binding": binding, "targets": targets}
