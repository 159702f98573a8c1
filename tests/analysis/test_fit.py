"""The sim twin's fit (analysis/fit.py) against the sim engine itself, driven in virtual time: records and
gauges of a run whose settings are known exactly, with no network in between."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pandas as pd
import pytest

from analysis.fit import decode_gaps, fit_prefill_cost, fit_run, fit_step_cost, twin_yaml
from analysis.run import Run
from llmload.sim.engine import Engine, EngineLimits, Sequence
from llmload.sim.settings import SimSettings

LIMITS = EngineLimits(max_num_seqs=6, num_blocks=512, block_size=16, step_base_s=0.020, decode_cost_s=0.002,
                      prefill_cost_s=0.0003)
SOURCE = "server:http://127.0.0.1:8000"


def _virtual_run(limits, phases, *, prompts=(50, 500), outputs=(20, 60), seed=1, scrape_s=0.25, aging=False):
    """Drive the engine through Poisson arrivals (`phases`: (rate, seconds) in turn); return the records
    (one row per request) and the gauges sampled every `scrape_s` (long telemetry frame)."""
    rng = random.Random(seed)
    arrivals, t0 = [], 0.0
    for rate, seconds in phases:
        t = t0
        while (t := t + rng.expovariate(rate)) < t0 + seconds:
            arrivals.append(t)
        t0 += seconds
    sizes = [(rng.randint(*prompts), rng.randint(*outputs)) for _ in arrivals]
    engine, now, i = Engine(limits), 0.0, 0
    tokens: dict[int, list[float]] = {k: [] for k in range(len(arrivals))}
    tel, next_scrape = [], 0.0
    while i < len(arrivals) or not engine.idle:
        if engine.idle and arrivals[i] > now:
            now = arrivals[i]
        while i < len(arrivals) and arrivals[i] <= now:
            engine.add(Sequence(seq_id=i, prompt_tokens=sizes[i][0], output_tokens=sizes[i][1]))
            i += 1
        result = engine.step(now if aging else 0.0)  # aging: the step cost grows with the run's age
        while next_scrape < now + result.cost_s:  # a scrape during the step reads the gauges it started with
            tel += [(next_scrape, SOURCE, "running", len(engine.running)),
                    (next_scrape, SOURCE, "waiting", len(engine.waiting)),
                    (next_scrape, SOURCE, "kv_usage", engine.kv_usage)]
            next_scrape += scrape_s
        now += result.cost_s
        for seq in result.emitted:
            tokens[seq.seq_id].append(now)
    records = pd.DataFrame({
        "request_id": range(len(arrivals)), "step": "s", "outcome": "ok", "sent_at": arrivals,
        "first_token_at": [tokens[k][0] for k in tokens], "last_token_at": [tokens[k][-1] for k in tokens],
        "input_tokens": [s[0] for s in sizes], "output_tokens": [s[1] for s in sizes],
        "token_times": [tokens[k] for k in tokens]})
    return records, pd.DataFrame(tel, columns=["t", "source", "metric", "value"])


@pytest.fixture(scope="module")
def light_then_full():
    """A minute well under capacity, then 30 s past it (every slot busy, a queue)."""
    return _virtual_run(LIMITS, [(1.5, 60.0), (10.0, 30.0)])


def test_step_cost_is_recovered_from_decode_only_gaps(light_then_full):
    records, _ = light_then_full
    gaps = decode_gaps(records)
    assert set(gaps["batch"]) <= set(range(1, 7)) and len(gaps) > 2000
    step = fit_step_cost(gaps)
    assert step["step_base_s"] == pytest.approx(0.020, rel=0.02)
    assert step["decode_cost_s"] == pytest.approx(0.002, rel=0.03)
    assert step["batch_min"] == 1 and step["batch_max"] == 6


def test_prefill_cost_is_the_slope_of_the_first_token_step_against_prompt_length(light_then_full):
    records, _ = light_then_full
    prefill = fit_prefill_cost(records, slots=6)
    assert prefill["prefill_cost_s"] == pytest.approx(0.0003, rel=0.1)
    assert prefill["prefill_cost_s"] == pytest.approx(0.0003, rel=0.02) and prefill["prefill_cost_se"] < 0.00003
    # queued requests too: their wait is left out (the step that ended with the first token is read)
    assert fit_prefill_cost(records, slots=None)["prefill_cost_s"] == pytest.approx(0.0003, rel=0.02)
    assert fit_prefill_cost(records.assign(input_tokens=300), slots=6) is None  # one prompt length


def test_fit_run_with_no_conditions_reads_slots_from_the_plateau_and_writes_a_sim_yaml(light_then_full, tmp_path):
    records, telemetry = light_then_full
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert fit.get("max_num_seqs").value == 6 and "plateau" in fit.get("max_num_seqs").basis
    assert fit.get("step_base_s").value == pytest.approx(0.020, rel=0.1)
    assert fit.get("decode_cost_s").value == pytest.approx(0.002, rel=0.1)
    assert fit.get("prefill_cost_s").value == pytest.approx(0.0003, rel=0.1)
    # KV capacity from usage against the tokens held (no cache_config_info): 512 blocks of 16
    assert fit.get("num_blocks").value == pytest.approx(512, rel=0.1) and "block_size" in fit.unobserved
    assert "no request was rejected" in fit.unobserved["max_num_queued_reqs"]
    assert "max_num_batched_tokens" in fit.unobserved
    path = tmp_path / "twin.yaml"
    path.write_text(twin_yaml(fit))
    settings = SimSettings.model_validate(__import__("yaml").safe_load(path.read_text()))
    assert settings.max_num_seqs == 6 and settings.step_base_s == pytest.approx(0.020, rel=0.1)


def test_server_figures_are_read_not_fitted(light_then_full):
    records, telemetry = light_then_full
    conds = {"server": "vllm", "max_num_seqs": 6, "kv_num_gpu_blocks": 512, "kv_block_size": 16,
             "context_length": 8192, "prefix_cache": False}
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={}, manifest={"conditions": conds}))
    for key, value in (("max_num_seqs", 6), ("num_blocks", 512), ("block_size", 16), ("max_model_len", 8192),
                       ("enable_prefix_caching", False)):
        assert fit.get(key).value == value and fit.get(key).error is None, key
    assert "(read from the server)" in twin_yaml(fit)


def test_queue_limit_from_rejections_and_the_unobservable_named():
    records, telemetry = _virtual_run(LIMITS, [(1.0, 20.0)], prompts=(200, 200))
    rejected = pd.DataFrame({"request_id": [900, 901], "step": "s", "outcome": "rejected",
                             "sent_at": [5.0, 12.0], "first_token_at": np.nan, "last_token_at": np.nan,
                             "input_tokens": np.nan, "output_tokens": np.nan, "token_times": [[], []]})
    both = pd.concat([records, rejected], ignore_index=True)
    peak = int((telemetry.pivot_table(index="t", columns="metric", values="value")[["running", "waiting"]]
                .sum(axis=1)).max())
    fit = fit_run(Run(records=both, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert fit.get("max_num_queued_reqs").value == peak
    # one prompt length: no prefill slope; a light run: no plateau, only a lower bound
    assert "several lengths" in fit.unobserved["prefill_cost_s"]
    assert fit.unobserved["max_num_seqs"].startswith("no running plateau with requests waiting: at least")


def test_a_run_that_fits_the_model_has_no_misfit(light_then_full, tmp_path):
    records, telemetry = light_then_full
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert fit.misfit == [] and fit.get("decode_step_s") is None  # a line: no table
    assert not twin_yaml(fit).startswith("# NOT A TWIN")


def test_a_drifting_step_cost_is_said_and_the_twin_is_marked_and_refused(tmp_path):
    from llmload.errors import ConfigError
    from llmload.sim.whatif import read_twin

    drifting = dataclasses.replace(LIMITS, step_cost_growth_s_per_min=0.012)  # 20 -> 38 ms in 90 s
    records, telemetry = _virtual_run(drifting, [(1.5, 60.0), (10.0, 30.0)], aging=True)
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert len(fit.misfit) == 1 and "step cost drifted" in fit.misfit[0], fit.misfit
    path = tmp_path / "twin.yaml"
    path.write_text(twin_yaml(fit))
    assert path.read_text().startswith("# NOT A TWIN: the step cost drifted")
    with pytest.raises(ConfigError, match="does not fit the twin's model"):
        read_twin(path)


def test_an_api_that_hides_token_times_gets_no_twin(light_then_full):
    records, telemetry = light_then_full
    hidden = records.assign(token_times=[[t] for t in records["last_token_at"]])  # one event: the whole answer
    fit = fit_run(Run(records=hidden, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert any("per-token times" in why for why in fit.misfit), fit.misfit
    assert "step_base_s" in fit.unobserved and twin_yaml(fit).startswith("# NOT A TWIN")


def test_a_negative_intercept_is_fitted_through_the_origin_and_said_when_clear():
    """llama.cpp's --parallel 2 search fitted a step base of -3.0 ms, which `llmload sim` refuses: the
    line goes through the origin instead, and an intercept below zero beyond its noise is kept to say so."""
    rng = np.random.default_rng(3)
    batch = np.repeat([1, 2, 3, 4], 60)
    gaps = pd.DataFrame({"batch": batch, "gap_s": 0.010 * batch - 0.005 + rng.normal(0, 0.0005, len(batch))})
    step = fit_step_cost(gaps)
    assert step["step_base_s"] == 0.0 and step["negative_base_s"] == pytest.approx(-0.005, abs=0.001)
    assert step["decode_cost_s"] == pytest.approx(np.sum(batch * (0.010 * batch - 0.005)) / np.sum(batch ** 2), rel=0.02)
    assert step["negative_base_s"] + 2 * step["negative_base_se"] < 0
    linear = fit_step_cost(gaps.assign(gap_s=0.010 * batch + 0.005 + rng.normal(0, 0.0005, len(batch))))
    assert linear["negative_base_s"] is None and linear["step_base_s"] == pytest.approx(0.005, abs=0.001)


def test_a_drifting_prefill_cost_is_said_though_the_decode_step_holds(tmp_path):
    """Round 6 of bench/twin_real.py: prompts cost 5x more by the end of the fit's ladder while decode steps
    held, and the drift check (decode gaps alone) passed it. Two light minutes of the same engine, the
    second with prompts 5x dearer: the fit says the prefill cost drifted; one engine throughout does not."""
    first, tel1 = _virtual_run(LIMITS, [(1.5, 60.0)], seed=4)
    dear = dataclasses.replace(LIMITS, prefill_cost_s=5 * LIMITS.prefill_cost_s)
    second, tel2 = _virtual_run(dear, [(1.5, 60.0)], seed=5)
    shift = float(max(first["last_token_at"].max(), tel1["t"].max())) + 1.0
    second = second.assign(request_id=second["request_id"] + len(first), sent_at=second["sent_at"] + shift,
                           first_token_at=second["first_token_at"] + shift,
                           last_token_at=second["last_token_at"] + shift,
                           token_times=[[t + shift for t in times] for times in second["token_times"]])
    records = pd.concat([first, second], ignore_index=True)
    telemetry = pd.concat([tel1, tel2.assign(t=tel2["t"] + shift)], ignore_index=True)
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert any("prefill cost drifted" in why for why in fit.misfit), fit.misfit
    assert not any("step cost drifted" in why for why in fit.misfit), fit.misfit
    assert twin_yaml(fit).startswith("# NOT A TWIN: the prefill cost drifted")
    steady, tel3 = _virtual_run(LIMITS, [(1.5, 120.0)], seed=4)
    fit = fit_run(Run(records=steady, telemetry=tel3, plan={}, manifest={"conditions": {"server": "vllm"}}))
    assert fit.misfit == [], fit.misfit


@pytest.mark.parametrize("tail", [4, 0])
def test_llamacpps_prompt_tail_is_seen_and_the_costs_recovered_around_it(tail, tmp_path):
    """llama.cpp with Gemma 3 takes a prompt in two steps (its last 4 tokens after a context checkpoint), so a
    request decoding meanwhile gets two tokens during another's prefill, not one. A llama.cpp sim with that
    tail (and one without) in virtual time: the fit says which, and recovers the step and prefill costs
    within 10% around it (the prefill from the prompt's whole processing, both steps); the twin it writes
    serves the same tail."""
    from llmload.sim.whatif import read_twin

    limits = dataclasses.replace(LIMITS, max_num_seqs=4, step_base_s=0.014, decode_cost_s=0.018,
                                 prefill_cost_s=0.005, prompt_tail_tokens=tail)
    records, telemetry = _virtual_run(limits, [(0.3, 240.0), (0.9, 200.0), (1.6, 120.0)], prompts=(20, 120),
                                      outputs=(8, 8), seed=2)
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={},
                      manifest={"conditions": {"server": "llamacpp", "max_num_seqs": 4}}))
    assert fit.misfit == [], fit.misfit
    assert fit.get("prompt_tail_tokens").value == tail, fit.get("prompt_tail_tokens")
    assert ("2 steps" if tail else "1 step ") in fit.get("prompt_tail_tokens").basis
    assert fit.get("step_base_s").value == pytest.approx(0.014, rel=0.1)
    assert fit.get("decode_cost_s").value == pytest.approx(0.018, rel=0.1)
    assert fit.get("prefill_cost_s").value == pytest.approx(0.005, rel=0.1)
    assert fit.get("decode_step_s") is None and "decode_step_s" not in twin_yaml(fit)  # a line: no table
    # with the tail, from the steps that carried a prompt's first part (every load); else the whole prefill
    assert ("first part" in fit.get("prefill_cost_s").basis) == bool(tail), fit.get("prefill_cost_s").basis
    path = tmp_path / "twin.yaml"
    path.write_text(twin_yaml(fit))
    twin = read_twin(path)
    assert twin.flavor == "llamacpp" and twin.sim_settings()["prompt_tail_tokens"] == tail


#: today's llama.cpp fit ladder (Gemma 3 270M, one CPU thread; bench/README.md): median decode gaps at 1-4
#: sequences, a line through them with an intercept below zero
TABLE = (0.018, 0.048, 0.060, 0.113)


@pytest.fixture(scope="module")
def table_run():
    limits = dataclasses.replace(LIMITS, max_num_seqs=4, decode_step_s=TABLE, prefill_cost_s=0.005,
                                 prompt_tail_tokens=4)
    return _virtual_run(limits, [(0.3, 240.0), (0.9, 200.0), (1.6, 120.0)], prompts=(20, 120), outputs=(8, 8),
                        seed=2)


def test_a_step_cost_that_is_not_a_line_is_fitted_as_a_table_the_sim_and_the_twin_take(table_run, tmp_path):
    """A llama.cpp sim whose step costs a table (no line: its intercept comes out below zero) in virtual time:
    the fit gives the medians per batch size as `decode_step_s` instead of a misfit, the line through the
    origin beside it (not used), and the twin it writes loads in `llmload sim` and in the what-if, table,
    errors and all."""
    from llmload.sim.settings import load_sim_settings
    from llmload.sim.truth import engine_limits
    from llmload.sim.whatif import read_twin

    records, telemetry = table_run
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={},
                      manifest={"conditions": {"server": "llamacpp", "max_num_seqs": 4}}))
    assert fit.misfit == [], fit.misfit
    table = fit.get("decode_step_s")
    assert table.value == pytest.approx(TABLE, rel=0.01) and len(table.error) == 4
    assert "batch size 1-4" in table.basis and "below zero" in table.basis
    assert "decode_step_s, below, wins" in fit.get("step_base_s").basis
    assert fit.get("prefill_cost_s").value == pytest.approx(0.005, rel=0.1)
    path = tmp_path / "twin.yaml"
    path.write_text(twin_yaml(fit))
    assert load_sim_settings(path).decode_step_s == pytest.approx(TABLE, rel=0.01)
    twin = read_twin(path)
    assert engine_limits(twin.sim_settings(), twin.flavor).decode_step_s == pytest.approx(TABLE, rel=0.01)
    assert len(twin.table_errors) == 4


def test_a_table_with_a_batch_size_unseen_stays_a_misfit(table_run):
    """Declared 5 slots, never more than 4 running: batch size 5 has no gaps, so no table; the misfit stays."""
    records, telemetry = table_run
    fit = fit_run(Run(records=records, telemetry=telemetry, plan={},
                      manifest={"conditions": {"server": "llamacpp", "max_num_seqs": 5}}))
    assert fit.get("decode_step_s") is None
    assert len(fit.misfit) == 1 and "not a line in the batch size" in fit.misfit[0], fit.misfit
    assert "batch size 5 had fewer" in fit.misfit[0]
