"""The TTFT share read against a step's own arrivals (`analysis.share_cv`), against the sim engine's truth.

The model's queues are checked against a direct simulation; the adjusted share of chained windows at the
knee of issue 41's user sim against the steady state's share of a long Poisson run of the same engine, in
virtual time (`llmload.sim.truth.run_virtual`, the live sim's rules).
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from analysis.intervals import exceedance_interval
from analysis.knee import estimate_knee
from analysis.share_cv import (
    History,
    Queue,
    adjust_rows,
    adjust_searched,
    fit_queue,
    slot_waits,
)
from llmload.arrivals import poisson_exact_offsets
from llmload.config import SLO, parse_config
from llmload.sim.settings import SimSettings
from llmload.sim.truth import engine_limits, run_virtual

#: bench/user_config_case.py's sim: 6 slots, 30 ms + 1.2 ms a sequence a step; 64 in, 32 out; true knee 3.47
USER_SIM = SimSettings.model_validate({"max_num_seqs": 6, "step_base_s": "30ms", "decode_cost_s": "1.2ms",
                                       "prefill_cost_s": "0.1ms"})
SLO_800 = SLO(ttft_p95=0.8, tpot_p95=0.1)
RATE = 3.47


def _fcfs(arrivals: np.ndarray, service_s: float, servers: int) -> np.ndarray:
    """Waits of first come first served over `servers` servers, by a heap of their free times."""
    free = [0.0] * servers
    waits = []
    for t in arrivals:
        start = max(t, heapq.heappop(free))
        waits.append(start - t)
        heapq.heappush(free, start + service_s)
    return np.array(waits)


@pytest.mark.parametrize("servers", [1, 3, 8])
def test_the_models_waits_are_first_come_first_served(servers):
    arrivals = np.cumsum(np.random.default_rng(servers).exponential(0.3, 400))
    want = _fcfs(arrivals, 0.25 * servers, servers)
    got = slot_waits(arrivals, 0.25 * servers, servers)[0][0]
    assert got == pytest.approx(want, abs=1e-9)
    # the state after the first half carries the queue into the second half
    queue = Queue(0.25 * servers, servers)
    half = len(arrivals) // 2
    state = queue.state(arrivals[:half])
    assert queue.waits(arrivals[half:], state)[0] == pytest.approx(want[half:], abs=1e-9)


def test_the_fit_finds_the_queue_that_made_the_exceedances(monkeypatch):
    """TTFTs made by a 2-server queue of 0.5 s: the fit names 2 servers near 0.5 s; fitted a few trial
    queues at a time (`FIT_CELLS`, bounded memory), the same."""
    arrivals = np.cumsum(np.random.default_rng(3).exponential(1 / 3.6, 1500))
    ttft = _fcfs(arrivals, 0.5, 2) + 0.05
    fitted = fit_queue(arrivals, ttft, np.ones(len(arrivals), dtype=bool), 0.8, rate=3.6)
    assert fitted is not None
    queue, misses, over = fitted
    assert queue.slots == 2 and queue.service_s == pytest.approx(0.5, rel=0.05)
    assert over > 20 and misses <= 0.1 * over
    monkeypatch.setattr("analysis.share_cv.FIT_CELLS", 7 * len(arrivals))
    assert fit_queue(arrivals, ttft, np.ones(len(arrivals), dtype=bool), 0.8, rate=3.6) == fitted


def _truth_share(limits, rng) -> float:
    """The steady state's share of TTFTs over 0.8 s at `RATE`: 40,000 Poisson arrivals, the first 2,000 left out."""
    arrivals = np.cumsum(rng.exponential(1.0 / RATE, 40_000))
    ttft = run_virtual(limits, arrivals, np.full(40_000, 64), np.full(40_000, 32))["ttft_s"].to_numpy()
    return float(np.mean(ttft[2_000:] > 0.8))


def test_chained_windows_at_the_knee_read_the_steady_state_share_with_half_the_spread():
    """Chained refine-like steps (10 s warm-up, 60 s window, `poisson_exact`, back to back) at the knee of the
    user sim: the raw share of a window spreads with the queue episodes its arrivals met; read against the
    model the spread is at most 0.6 of it, its mean within 0.012 of the steady state's share (Poisson:
    the truth's process), and its 90% intervals hold that share in at least 80% of the windows."""
    limits = engine_limits(USER_SIM)
    rng = np.random.default_rng(41)
    truth = _truth_share(limits, rng)
    warmup, window, steps = 10.0, 60.0, 60
    times, labels, rows = [], [], []
    start = 0.0
    for i in range(steps):
        offsets = poisson_exact_offsets(RATE, (warmup, window), rng)
        times.append(start + offsets)
        labels += [f"r{i}"] * len(offsets)
        rows.append({"label": f"r{i}", "index": i, "phase": "refine", "warmup_s": warmup,
                     "window_start": start + warmup, "window_end": start + warmup + window})
        start += warmup + window
    sent = np.concatenate(times)
    step = np.array(labels, dtype=object)
    ttft = run_virtual(limits, sent, np.full(len(sent), 64), np.full(len(sent), 32))["ttft_s"].to_numpy()
    judged = np.zeros(len(sent), dtype=bool)
    for row in rows:
        mine = (step == row["label"]) & (sent >= row["window_start"]) & (sent < row["window_end"])
        judged |= mine
        share, low, high = exceedance_interval(ttft[mine], 0.8, 0.9)
        row.update(offered_rate=mine.sum() / window, ttft_p95_over=share, ttft_p95_over_low=low,
                   ttft_p95_over_high=high)
    adjusted, models = adjust_rows(rows[1:], History(step, sent, sent, ttft, judged), SLO_800,
                                   {r["label"] for r in rows})
    assert "ttft_p95" in models
    raw = np.array([r["ttft_p95_over"] for r in adjusted])
    cv = np.array([r.get("ttft_p95_cv_over", r["ttft_p95_over"]) for r in adjusted])
    held = np.mean([r.get("ttft_p95_cv_over_low", r["ttft_p95_over_low"]) <= truth
                    <= r.get("ttft_p95_cv_over_high", r["ttft_p95_over_high"]) for r in adjusted])
    assert sum("ttft_p95_cv_over" in r for r in adjusted) >= 0.8 * len(adjusted)
    assert cv.std() <= 0.6 * raw.std(), (cv.std(), raw.std())
    assert abs(cv.mean() - truth) <= 0.012, (cv.mean(), raw.mean(), truth)
    assert held >= 0.8, held


def test_steps_of_other_arrivals_and_targets_other_than_ttft_keep_their_raw_share(monkeypatch):
    """Only chained steps with Poisson arrivals are read against the model (its replays are Poisson), and
    only TTFT targets; a drained step keeps its raw share; a run without a TTFT over its target fits no
    model and changes nothing."""
    rng = np.random.default_rng(5)
    sent = np.cumsum(rng.exponential(1 / 3.0, 600))
    ttft = _fcfs(sent, 0.3, 1)
    step = np.where(sent < sent[300], "a", "b").astype(object)
    judged = np.ones(len(sent), dtype=bool)
    rows = [{"label": label, "index": i, "phase": "refine", "warmup_s": 0.0, "window_start": float(sent[step == label][0]),
             "window_end": float(sent[step == label][-1]) + 1e-6, "offered_rate": 3.0,
             "ttft_p95_over": 0.2, "ttft_p95_over_low": 0.1, "ttft_p95_over_high": 0.3,
             "tpot_p95_over": 0.2, "tpot_p95_over_low": 0.1, "tpot_p95_over_high": 0.3}
            for i, label in enumerate(("a", "b"))]
    history = History(step, sent, sent, ttft, judged)
    out, models = adjust_rows(rows, history, SLO(ttft_p95=0.5, tpot_p95=0.1), {"b"})
    assert "ttft_p95_cv_over" not in out[0] and "tpot_p95_cv_over" not in out[1]
    assert models
    out, models = adjust_rows(rows, history, SLO(ttft_p95=60.0), {"a", "b"})
    assert models == {} and all("ttft_p95_cv_over" not in r for r in out)
    drained = [{**r, "phase": "ladder"} for r in rows]
    out, models = adjust_rows(drained, history, SLO(ttft_p95=0.5), {"a", "b"})
    assert all("ttft_p95_cv_over" not in r for r in out)
    out, _ = adjust_rows(rows, history, SLO(ttft_p95=0.5), {"a", "b"})
    assert all("ttft_p95_cv_over" in r for r in out)
    # a run longer than the model is fitted for keeps its raw shares
    monkeypatch.setattr("analysis.share_cv.MAX_REQUESTS", len(sent) - 1)
    out, models = adjust_rows(rows, history, SLO(ttft_p95=0.5), {"a", "b"})
    assert models == {} and all("ttft_p95_cv_over" not in r for r in out)


def test_the_live_search_reads_the_shares_the_final_analysis_reads(tmp_path, monkeypatch):
    """`llmload run --virtual` of a ladder with a knee search: the search's estimates (the master's, from the
    requests each judged step keeps, `Step.share_history`) read the refine steps' TTFT shares against their
    arrivals, as the final analysis does from records.parquet (its knee inside the search's last interval)."""
    import json

    import yaml

    import shapes.plan
    from llmload.runtime.virtual.run import run_virtual as run_config_virtual

    estimates = []
    made = shapes.plan.knee_estimator

    def recording(config):
        estimate = made(config)

        def wrapped(rows):
            knee = estimate(rows)
            estimates.append((list(rows), knee))  # the search appends to its list later
            return knee
        return wrapped

    monkeypatch.setattr(shapes.plan, "knee_estimator", recording)
    config = {"target": {"url": "http://127.0.0.1:9", "api": "openai-chat", "model": "m", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 64},
                           "output_tokens": {"dist": "fixed", "value": 32}, "seed": 7},
              "slo": {"ttft_p95": "250ms", "min_samples": 10},
              "shape": {"ladder": {"warmup": "5s", "steps": [{"rate": r, "duration": "20s"} for r in (8, 16, 24)],
                                   "refine": {"budget": "2m", "duration": "20s"}}}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert run_config_virtual(path, out=tmp_path / "run", report=False) in (0, 1)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    refine = [s for s in summary["steps"] if s["phase"] == "refine"]
    assert refine and any(s.get("ttft_p95_cv_over") is not None for s in refine), refine
    assert estimates
    rows, knee = estimates[-1]
    assert any(r.get("_share_history") is not None for r in rows)
    slo = parse_config(config).slo
    searched = adjust_searched(rows, slo)
    assert any(r.get("ttft_p95_cv_over") is not None for r in searched if r["phase"] == "refine")
    assert knee == estimate_knee(searched, slo)  # what the search was told
    # the final analysis fits its model on every step (the search's last estimate had all but the last)
    assert knee.low <= summary["knee"]["rate"] <= knee.high, (knee, summary["knee"])
    # the answer names the model the shares were read against
    from types import SimpleNamespace

    import pandas as pd

    from llmload.report.answer import answer_sentences

    model = summary["knee"]["share_models"]["ttft_p95"]
    _verdict, said = answer_sentences(SimpleNamespace(summary=summary, steps=pd.DataFrame(summary["steps"]),
                                                      slo=slo), None)
    assert any("read against their own arrivals" in s and f"TTFT p95: {model}" in s for s in said), said


def test_replays_held_some_rows_at_a_time_give_the_same_share(monkeypatch):
    """A long step's replays are made a few rows at a time (`REPLAY_CELLS`, bounded memory): the same draws,
    the same `E[C]` and variance as all at once."""
    from analysis import share_cv

    queue = Queue(0.3, 2)
    state = queue.state(np.cumsum(np.random.default_rng(2).exponential(0.2, 200)))
    whole = share_cv._replay_share(11, 40.0, (50.0, 110.0), 6.0, queue, state, 0.4)
    monkeypatch.setattr(share_cv, "REPLAY_CELLS", 1500)  # 3 replays at a time
    assert share_cv._replay_share(11, 40.0, (50.0, 110.0), 6.0, queue, state, 0.4) == pytest.approx(whole, rel=1e-12)
    assert 0 < whole[0] < 1
