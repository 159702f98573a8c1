"""The trace's own knee (`shape.trace.scales`, analysis/burst.py `burst_knee`), checked against the sim
engine in virtual time replaying the same time-scaled trace.

A synthetic trace with four known bursts (Poisson background plus 6 s bursts at several times the mean)
is planned at several mean rates, each with its uniform twin; every step's arrivals are served by the
sim's engine in virtual time (`llmload.sim.truth.run_virtual`) and judged on TTFT p95 with its
autocorrelation-aware interval, as the analysis judges a step. The estimated knees (burst and uniform)
are compared with the true crossings: the rate at which the same trace, time-scaled, first puts TTFT p95
over the target, found by bisection on many rates in virtual time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.burst import burst_knee, burst_knee_sentence
from analysis.intervals import percentile_interval
from llmload.config import SLO, parse_config
from llmload.errors import ConfigError
from llmload.sim.truth import engine_limits, run_virtual
from shapes.plan import build_plan
from shapes.replay import scale_to_rate, uniform_twin

SIM = {"max_num_seqs": 4, "step_base_s": "20ms"}
SIZES = (64, 32)
SPAN_S = 120.0
SLO_TTFT_S = 1.0
RATES = [1.5, 2, 3, 4, 5, 6, 8]


def _trace(tmp_path) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(5)
    background = np.cumsum(rng.exponential(1 / 0.6, 200))
    parts = [background[background < SPAN_S]]
    for start in (10.0, 40.0, 70.0, 100.0):  # four 6 s bursts at +2.4 req/s
        burst = start + np.cumsum(rng.exponential(1 / 2.4, 40))
        parts.append(burst[burst < start + 6.0])
    offsets = np.sort(np.concatenate(parts))
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n"
                    + "".join(f"{t:.4f},{SIZES[0]},{SIZES[1]}\n" for t in offsets))
    return str(path), offsets


def _config(file: str, **trace) -> object:
    return parse_config({"target": {"url": "http://127.0.0.1:9"},
                         "shape": {"trace": {"file": file, "format": "llmload", "window": ["0s", f"{SPAN_S:g}s"],
                                             **trace}},
                         "slo": {"ttft_p95": f"{SLO_TTFT_S:g}s", "min_samples": 5}})


def _p95(offsets: np.ndarray) -> pd.DataFrame:
    n = len(offsets)
    return run_virtual(engine_limits(SIM), np.asarray(offsets, dtype=float), np.full(n, SIZES[0]),
                       np.full(n, SIZES[1]))


def _row(step, slo: SLO) -> dict:
    ttft = _p95(np.asarray(step.trace.offsets_s))["ttft_s"].to_numpy()
    p95 = float(np.percentile(ttft, 95))
    low, high = percentile_interval(ttft, 95.0, slo.confidence)
    return {"label": step.label, "phase": step.phase, "offered_rate": len(ttft) / step.duration_s,
            "verdict": "fail" if p95 > SLO_TTFT_S else "pass", "ttft_p95_s": p95,
            "ttft_p95_s_low": low, "ttft_p95_s_high": high}


def _true_crossing(frame: pd.DataFrame, uniform: bool) -> float:
    """The mean rate at which the time-scaled trace (or its uniform twin) puts TTFT p95 over the target."""
    def over(rate: float) -> bool:
        scaled, span = scale_to_rate(frame, SPAN_S, rate)
        if uniform:
            scaled = uniform_twin(scaled, span)
        return float(np.percentile(_p95(scaled["offset_s"].to_numpy())["ttft_s"], 95)) > SLO_TTFT_S

    lo, hi = RATES[0], RATES[-1]
    assert not over(lo) and over(hi)
    while hi - lo > 0.02:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
    return (lo + hi) / 2


def test_scales_plan_the_same_trace_at_each_mean_rate_with_its_twin(tmp_path):
    file, offsets = _trace(tmp_path)
    steps = build_plan(_config(file, scales=[4, 2]))
    assert [s.label for s in steps] == ["burst-r2.00", "uniform-r2.00", "burst-r4.00", "uniform-r4.00"]
    assert [s.phase for s in steps] == ["burst", "uniform"] * 2
    for step in steps:
        assert step.target_rate == pytest.approx(2.0 if "r2" in step.label else 4.0)
        assert len(step.trace) == len(offsets)
    # the same arrivals, time-scaled: the bursts keep their shape
    b2, _, b4, u4 = steps
    assert np.asarray(b2.trace.offsets_s) == pytest.approx(2 * np.asarray(b4.trace.offsets_s))
    assert b4.duration_s == pytest.approx(len(offsets) / 4.0) == u4.duration_s
    assert np.diff(u4.trace.offsets_s) == pytest.approx(np.full(len(offsets) - 1, 0.25))


@pytest.mark.parametrize("scales, match", [([3], "at least two"), ([2, 2], "at most once"), ([0, 2], "greater")])
def test_bad_scales_name_the_key(tmp_path, scales, match):
    file, _ = _trace(tmp_path)
    with pytest.raises(ConfigError, match=match) as err:
        _config(file, scales=scales)
    assert "shape.trace.scales" in str(err.value)


def test_warmup_longer_than_a_scaled_trace_names_the_key(tmp_path):
    file, offsets = _trace(tmp_path)
    with pytest.raises(ConfigError, match="at 100 req/s") as err:
        build_plan(_config(file, scales=[2, 100], warmup="5s"))
    assert err.value.key == "shape.trace.warmup"


def test_trace_knee_matches_the_engine_in_virtual_time(tmp_path):
    file, offsets = _trace(tmp_path)
    config = _config(file, scales=RATES)
    steps = pd.DataFrame([_row(s, config.slo) for s in build_plan(config)])
    entry = burst_knee(steps, config.slo)
    assert entry is not None and entry["binding"] == "ttft_p95" and entry["rates_run"] == [1.5, 8.0]

    frame = pd.DataFrame({"offset_s": offsets})
    true_burst, true_uniform = _true_crossing(frame, False), _true_crossing(frame, True)
    assert true_burst < 0.8 * true_uniform  # the bursts cost capacity: the test has something to find
    for knee, truth in ((entry, true_burst), (entry["uniform"], true_uniform)):
        assert knee["rate"] == pytest.approx(truth, rel=0.2), (knee, truth)
        assert knee["low"] * 0.9 <= truth <= knee["high"] * 1.1, (knee, truth)
    assert entry["cost"] == pytest.approx(1 - true_burst / true_uniform, abs=0.12)
    low, high = entry["bracket"]
    assert low <= true_burst <= high and (low, high) == (pytest.approx(2.0, rel=0.05), pytest.approx(3.0, rel=0.05))
    sentence = burst_knee_sentence(entry)
    assert sentence.startswith("With this trace's bursts the service holds ") and "bursts cost" in sentence


def test_no_burst_knee_for_a_single_replay():
    steps = pd.DataFrame([{"label": "burst", "phase": "burst", "offered_rate": 2.0, "verdict": "pass",
                           "ttft_p95_s": 0.2},
                          {"label": "uniform", "phase": "uniform", "offered_rate": 2.0, "verdict": "pass",
                           "ttft_p95_s": 0.1}])
    assert burst_knee(steps, SLO(ttft_p95=1.0)) is None and burst_knee_sentence(None) is None


def test_burst_knee_sentence_words_each_case():
    assert burst_knee_sentence({"rate": 3.1, "uniform": {"rate": 4.6}, "cost": 1 - 3.1 / 4.6}) == (
        "With this trace's bursts the service holds 3.1 req/s; evenly spaced it would hold 4.6: "
        "bursts cost 33% of capacity.")
    held = burst_knee_sentence({"rate": None, "binding": None, "rates_run": [1, 8],
                                "uniform": {"rate": None, "binding": None}, "cost": None})
    assert held == ("With this trace's bursts the service holds every mean rate run, up to 8.0 req/s; "
                    "evenly spaced it holds every mean rate run (up to 8.0 req/s).")
    below = burst_knee_sentence({"rate": None, "binding": "ttft_p95", "rates_run": [1, 8],
                                 "uniform": {"rate": 5.0}, "cost": None})
    assert below.startswith("With this trace's bursts the service misses the SLO already at 1.0 req/s")


def test_burst_knee_sentence_bounds_the_cost_when_the_twins_held():
    text = burst_knee_sentence({"rate": 6.0, "rates_run": [3, 12], "uniform": {"rate": None, "binding": None},
                                "cost": None, "cost_at_least": 0.5})
    assert text == ("With this trace's bursts the service holds 6.0 req/s; evenly spaced it holds every mean "
                    "rate run (up to 12.0 req/s): bursts cost at least 50% of capacity.")


def test_the_answer_names_the_first_failing_steps_limit_and_the_burst_knee():
    from types import SimpleNamespace

    from llmload.report.limits_view import answer_lines

    limit = {"kind": "batch_slots", "advice": "raise max_num_seqs",
             "evidence": {"slots": 6, "running_at_slots_share": 1.0, "waiting_mean": 3.0,
                          "server_queue_mean_s": 0.9, "kv_usage_peak": 0.14}}
    steps = pd.DataFrame([
        {"label": "r2.00", "phase": "ladder", "offered_rate": 2.0, "verdict": "pass", "failing": [],
         "limit": {"kind": "none", "evidence": {}, "advice": ""}},
        {"label": "r6.00", "phase": "ladder", "offered_rate": 6.0, "verdict": "fail", "failing": ["ttft_p95"],
         "limit": limit}])
    summary = {"knee": {"rate": 4.6, "low": 4.4, "high": 4.8, "confidence": 0.9, "binding": "ttft_p95"},
               "burst_knee": {"rate": 3.1, "uniform": {"rate": 4.6}, "cost": 1 - 3.1 / 4.6}}
    lines = answer_lines(SimpleNamespace(steps=steps, summary=summary))
    assert lines[0].startswith("TTFT p95 broke first at about 4.6 req/s: ") and "6" in lines[0], lines
    assert lines[1].endswith("bursts cost 33% of capacity.")
