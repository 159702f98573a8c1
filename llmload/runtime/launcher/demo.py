"""`llmload demo`: a whole capacity test against the built-in simulated vLLM, in under 3 minutes.

1. Start `llmload sim --flavor vllm` on a free loopback port with a small engine (6 sequences per
   batch), run `DEMO_SCALE` (4) times faster than the reference engine `DEMO_SIM` (every step cost
   divided by 4: ~8 ms per decode step), whose capacity is then about 24 requests/s of 64-in / 32-out
   requests. Time compression (NOTES.md): at 4x the rate and a quarter of every latency target and
   window, the faster engine holds the same queue in requests at the same utilisation, so a quarter of
   the wall time carries the same evidence: the same search, four times sooner.
2. Run a ladder 8 → 16 → 24 → 32 req/s (the default arrivals: Poisson times, exactly rate x window of
   them) against SLOs (TTFT p95 250 ms, TPOT p95 20 ms, no queue growth): the low steps pass, the step
   past capacity fails on TTFT. Then the knee search (`refine`) runs 15 s steps at the knee estimate
   until its interval is within 5% or its budget (75 s) is spent. The answer: the knee with its interval
   and the target that binds (its true value, `llmload.sim.truth`: 4 x 4.62 = about 18.5 req/s, TTFT p95).
   Shorter refine steps or budget cost the answer its accuracy (virtual time, 100 seeds, in the
   reference engine's units: 40 s steps and 140 s held the truth in 73, 60 s and 300 s in 88; bench/README.md
   "The demo's own search"). Run directory: `<out>/ladder/`.
3. Replay 25 s of the Azure conversation trace (`examples/traces/azure_conv_5min.csv`, CC BY 4.0,
   about 4 req/s, at 4x its speed: about 16 req/s, two thirds of the capacity) and its uniform twin at the
   same mean rate: the bursts cost latency that the uniform twin hides. Run directory: `<out>/burst/`.
4. Stop the sim and print where the two reports are.

The demo returns 0 when both runs were carried out (each wrote its summary), whatever the verdicts:
a failing ladder step is the point of it, and a step the generator could not hold (`invalid`, a busy
machine) is reported with its reason and what to do, beside the answer. A run that could not be
carried out returns its error code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from llmload.sim.process import start_sim_process, stop_process

__all__ = ["DEMO_SCALE", "DEMO_SIM", "demo_configs", "demo_sim", "run_demo", "start_demo_sim"]

REPO = Path(__file__).resolve().parents[3]
DEMO_TRACE = REPO / "examples" / "traces" / "azure_conv_5min.csv"

#: the demo's reference engine: capacity about 6 req/s for 64-in / 32-out requests (true knee 4.62 req/s
#: at TTFT p95 1 s: NOTES.md, tests/sim/test_sim_truth.py); the demo runs it `DEMO_SCALE` times faster
DEMO_SIM = {"max_num_seqs": 6, "step_base_s": "25ms", "decode_cost_s": "1ms", "prefill_cost_s": "0.1ms",
            "load_time_s": "0.2s"}
#: the demo's time compression: its engine's step costs / k, its rates x k, its latency targets and
#: windows / k (the same evidence in 1/k of the wall time)
DEMO_SCALE = 4
_COSTS = ("step_base_s", "decode_cost_s", "prefill_cost_s")

_SLO_S = {"ttft_p95": 1.0, "tpot_p95": 0.08}
_CHECKS = {"max_reject_ratio": 0.0, "queue_growth": "forbid"}
_REQUESTS = {"input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 32},
             "seed": 1}


#: the demo ladder's rates in the reference engine's units (req/s; x `DEMO_SCALE` as run): across the knee
#: (about 4.6) and up to the sim's capacity (about 6)
DEMO_RATES = (2, 4, 6, 8)


def demo_sim(scale: float = DEMO_SCALE) -> dict:
    """The demo's engine settings: `DEMO_SIM` with every step cost divided by `scale`."""
    from llmload.units import parse_duration

    return {k: (f"{parse_duration(v) / scale * 1000:g}ms" if k in _COSTS else v) for k, v in DEMO_SIM.items()}


def demo_configs(url: str, *, step_s: float = 20.0, trace_s: float = 25.0, refine_steps: int = 6,
                 scale: float = DEMO_SCALE) -> dict[str, dict]:
    """The two run configurations of the demo (ladder + knee search, burst-vs-uniform) for a sim at `url`
    whose engine is `demo_sim(scale)`.

    `step_s` is each ladder step's window in the reference engine's seconds (refine steps run three times
    as long, within a budget of 15 windows), `trace_s` the replayed slice of the trace, `refine_steps`
    the knee search's most steps (smaller values make a quick demo for tests); the demo runs them `scale`
    times faster, at `scale` times the rates.
    """
    target = {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"}
    # the generator limits are the step rule's defaults (analysis.validity): with a 1 s TTFT target and
    # at most 10 req/s, a lag under 50-100 ms can change neither the load nor a verdict, so a busy
    # laptop still gets its answer (and the demo says when its generator was stretched)
    client = {"max_concurrency": 128}
    slo = {**{k: f"{v / scale * 1000:g}ms" for k, v in _SLO_S.items()}, **_CHECKS}
    common = {"target": target, "requests": _REQUESTS, "slo": slo, "client": client,
              "quality": {"required": True,
                          "cases": [{"prompt": "Say something.", "expect": {"regex": "\\w+"}, "max_tokens": 8}]},
              # vLLM reports no max_num_seqs (its cache_config_info has no scheduler fields): say it, so
              # a failing step's limit can name the batch slots (analysis.limits)
              "conditions": {"gpus": 0, "max_num_seqs": DEMO_SIM["max_num_seqs"],
                             "notes": "llmload demo against the simulated vLLM server"}}
    ladder = {"warmup": f"{3 / scale:g}s", "drain_timeout": "20s",
              "steps": [{"rate": r * scale, "duration": f"{step_s / scale:g}s"} for r in DEMO_RATES],
              "refine": {"duration": f"{3 * step_s / scale:g}s", "precision": 0.05,
                         "budget": f"{15 * step_s / scale:g}s", "max_steps": refine_steps, "max_extensions": 2}}
    trace = {"file": str(DEMO_TRACE), "format": "azure", "window": ["80s", f"{80 + trace_s:g}s"],
             "speedup": scale, "uniform_twin": True, "use_sizes": False, "drain_timeout": "20s"}
    return {"ladder": {**common, "shape": {"ladder": ladder}},
            "burst": {**common, "shape": {"trace": trace}}}


def start_demo_sim(folder: Path, *, timeout_s: float = 20.0) -> tuple[subprocess.Popen, str]:
    """Start the demo's sim as a subprocess on a free loopback port; returns (process, base URL)."""
    sim = start_sim_process(folder, settings=demo_sim(), timeout_s=timeout_s)
    return sim.proc, sim.url


def _summary(folder: Path, name: str) -> dict | None:
    try:
        return json.loads((folder / name / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def answer_lines(folder: Path) -> list[str]:
    """The demo's answer from the two summaries: the knee, the burst cost, and any stretched generator."""
    lines = []
    ladder, burst = _summary(folder, "ladder"), _summary(folder, "burst")
    if ladder is not None:
        from analysis.knee import knee_of, knee_sentence  # the one answer, as the report states it
        from shapes.knee_search import search_stop_text, steps_text

        search = ladder.get("search") or {}
        steps = search.get("steps") or 0
        stopped = (f" (knee search: {steps_text(steps, search.get('extensions') or 0)}, stopped: "
                   f"{search_stop_text(search)})" if search.get("stopped") else "")
        lines.append(f"llmload demo: {knee_sentence(knee_of(ladder))}{stopped}")
    if burst is not None:
        by_label = {s["label"]: s for s in burst.get("steps", [])}
        b, u = (by_label.get(k, {}).get("ttft_p95_s") for k in ("burst", "uniform"))
        if b is not None and u:
            lines.append(f"llmload demo: bursts: TTFT p95 {b * 1000:.0f} ms against {u * 1000:.0f} ms for the "
                         f"uniform twin at the same mean rate ({b / u:.1f}x)")
    for name, summary in (("ladder", ladder), ("burst", burst)):
        for step in (summary or {}).get("steps", []):
            for reason in step.get("invalid_reasons") or []:
                lines.append(f"llmload demo: the generator was stretched on this machine ({name} step "
                             f"{step['label']}, judged invalid, its numbers left out): {reason['message']}")
    return lines


def run_demo(*, out: Path | None = None, step_s: float = 20.0, trace_s: float = 25.0, refine_steps: int = 6) -> int:
    """Run the demo (see the module docstring); returns 0 when both runs were carried out."""
    from llmload.runtime.launcher.child_env import run_in_demo
    from llmload.runtime.launcher.run import run_config

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    folder = Path(out) if out is not None else Path("runs") / f"{stamp}-demo"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"llmload demo: starting the simulated vLLM server (capacity about {6 * DEMO_SCALE:g} req/s) in {folder}",
          flush=True)
    proc, url = start_demo_sim(folder)
    codes = {}
    try:
        for name, config in demo_configs(url, step_s=step_s, trace_s=trace_s, refine_steps=refine_steps).items():
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            print(f"\nllmload demo: {name} run ({path})", flush=True)
            codes[name] = run_in_demo(run_config, path, out=folder / name)  # its verdict in words, no exit code
            if codes[name] >= 128:  # stopped by a signal (Ctrl-C): the rest of the demo is not wanted
                break
    finally:
        stop_process(proc)
    print("\nllmload demo: done. Reports:")
    for name in codes:
        print(f"  {name}: {(folder / name / 'report.html').resolve()}")
    for line in answer_lines(folder):
        print(line)
    failed = {n: c for n, c in codes.items() if c not in (0, 1) and not (folder / n / "summary.json").exists()}
    if failed:
        print(f"llmload demo: a run could not be carried out: {failed}", file=sys.stderr)
        return max(failed.values())
    return 0
