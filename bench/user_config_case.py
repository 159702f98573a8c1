"""A config a user writes for a slow server (issue 41), against a sim whose true knee is known, in virtual time.

    PYTHONPATH=. python bench/user_config_case.py none 1 21      # min_samples unset (the default floor)
    PYTHONPATH=. DUR=90s python bench/user_config_case.py 20 1 21  # a fixed refine.duration instead

A ladder of 1, 2, 3, 4, 5 req/s of 30 s steps, `slo: {ttft_p95: 800ms, tpot_p95: 100ms}`, a 6 minute refine
budget; the sim: 6 slots, 30 ms + 1.2 ms per sequence per step, 64-in / 32-out (true knee 3.47 req/s,
`llmload.sim.truth.true_knee`). Prints each seed's answer, whether its interval holds the truth, and the
median and worst point error. bench/README.md has the figures."""
import sys, statistics
from llmload.config import Config
from llmload.sim.virtual_search import virtual_search
from llmload.sim.truth import true_knee
from llmload.sim.settings import SimSettings
from analysis.knee import knee_sentence

SIM = {"max_num_seqs": 6, "step_base_s": "30ms", "decode_cost_s": "1.2ms", "prefill_cost_s": "0.1ms"}
SIZES = (64, 32)
import os
DUR=os.environ.get("DUR")
def config(seed, min_samples=None, budget="6m"):
    slo = {"ttft_p95": "800ms", "tpot_p95": "100ms"}
    if min_samples is not None:
        slo["min_samples"] = min_samples
    return Config.model_validate({
        "target": {"url": "http://127.0.0.1:9", "model": "m"},
        "requests": {"input_tokens": {"dist": "fixed", "value": SIZES[0]},
                     "output_tokens": {"dist": "fixed", "value": SIZES[1]}, "seed": seed},
        "shape": {"ladder": {"steps": [{"rate": r, "duration": "30s"} for r in (1, 2, 3, 4, 5)],
                             "refine": {"budget": budget, **({"duration": DUR} if DUR else {})}}},
        "slo": slo})

if __name__ == "__main__":
    ms = None if sys.argv[1] == "none" else int(sys.argv[1])
    seeds = range(int(sys.argv[2]), int(sys.argv[3]))
    from llmload.config import SLO
    truth = true_knee(SimSettings.model_validate(SIM), SIZES, SLO(ttft_p95=0.8, tpot_p95=0.1), lo=1, hi=8, tol=0.005, arrivals=30000, seeds=(1,))
    t = truth["rate"] if isinstance(truth, dict) else truth
    print("truth", t)
    errs = []
    for seed in seeds:
        vs = virtual_search(config(seed, ms), SIM, SIZES)
        k = vs.knee
        steps = " ".join(f"{r['label']}:{r['verdict'][:4]}" for r in vs.rows)
        ok = k is not None and k.rate is not None and (k.low is None or k.low <= t) and (k.high is None or t <= k.high)
        if k is not None and k.rate: errs.append(abs(k.rate - t) / t)
        print(seed, "OK " if ok else "BAD", knee_sentence(k), "|", vs.stopped, f"{vs.run_s:.0f}s", "|", steps)
    if errs: print("median err", statistics.median(errs), "worst", max(errs))
