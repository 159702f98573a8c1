"""vLLM's automatic prefix caching in the sim: block-hash reuse on a virtual clock, then on the wire with
the official `openai` client, `/metrics` read with prometheus_client's parser."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sim_client import FAST, metrics

from llmload.sim.engine import Engine, EngineLimits, Sequence
from llmload.sim.prefix import block_hashes

# `openai` is imported inside the tests that use them: at the top they cost every pytest process
# that collects this module (each xdist worker of the suite) 1.2-1.6 s of CPU
if TYPE_CHECKING:
    import openai

COSTS = {"step_base_s": 0.01, "prefill_cost_s": 0.001, "decode_cost_s": 0.0, "block_size": 16}


def _seq(seq_id: int, tokens: list, out: int = 2) -> Sequence:
    return Sequence(seq_id=seq_id, prompt_tokens=len(tokens), output_tokens=out,
                    block_hashes=block_hashes(tokens, 16))


def _first_token_time(engine: Engine, seq: Sequence) -> tuple[float, int, int]:
    """Run until idle; the virtual time of seq's first token and the summed lookup counters."""
    t, first, queries, hits = 0.0, None, 0, 0
    while not engine.idle:
        result = engine.step()
        t += result.cost_s
        queries, hits = queries + result.cache_queries, hits + result.cache_hits
        if first is None and seq in result.emitted:
            first = t
    return first, queries, hits


@pytest.mark.parametrize("enabled", [True, False])
def test_a_repeated_prompt_skips_its_cached_blocks(enabled):
    engine = Engine(EngineLimits(**COSTS, enable_prefix_caching=enabled))
    prompt = [f"w{i}" for i in range(100)]  # 6 full blocks and 4 tokens
    a = _seq(1, prompt)
    engine.add(a)
    t_a, q_a, h_a = _first_token_time(engine, a)
    b = _seq(2, prompt)
    engine.add(b)
    t_b, q_b, h_b = _first_token_time(engine, b)
    assert t_a == pytest.approx(0.01 + 100 * 0.001)
    assert (q_a, h_a) == ((100, 0) if enabled else (0, 0))
    if enabled:  # 6 blocks = 96 tokens found; the last 4 are computed
        assert (q_b, h_b, b.cached_tokens) == (100, 96, 96)
        assert t_b == pytest.approx(0.01 + 4 * 0.001)
    else:
        assert (q_b, h_b, b.cached_tokens) == (0, 0, -1)
        assert t_b == pytest.approx(t_a)
    assert engine.free_blocks == engine.limits.num_blocks  # cached blocks nobody uses count as free


def test_a_whole_block_aligned_prompt_still_computes_one_block():
    engine = Engine(EngineLimits(**COSTS, enable_prefix_caching=True))
    prompt = [f"w{i}" for i in range(64)]
    engine.add(_seq(1, prompt))
    _first_token_time(engine, engine.waiting[0])
    b = _seq(2, prompt)
    engine.add(b)
    _, _, hits = _first_token_time(engine, b)
    assert hits == 48  # at most (64 - 1) // 16 blocks: one token must be computed to sample from


def test_only_the_shared_prefix_hits_and_a_request_in_the_same_step_sees_it():
    engine = Engine(EngineLimits(**COSTS, enable_prefix_caching=True))
    shared = [f"p{i}" for i in range(40)]
    a = _seq(1, shared + [f"a{i}" for i in range(30)])
    b = _seq(2, shared + [f"b{i}" for i in range(30)])
    engine.add(a)
    engine.add(b)
    step = engine.step()  # both admitted in one step: a's blocks are cached when scheduled
    assert step.cache_queries == 140 and step.cache_hits == 32
    assert (a.cached_tokens, b.cached_tokens) == (0, 32)
    assert step.prefill_tokens == 70 + 38


def test_cached_blocks_are_evicted_when_space_is_needed():
    engine = Engine(EngineLimits(**COSTS, num_blocks=8, enable_prefix_caching=True))
    prompt = [f"w{i}" for i in range(64)]
    first = _seq(1, prompt)
    engine.add(first)
    _first_token_time(engine, first)
    other = _seq(2, [f"x{i}" for i in range(100)])  # needs 7 of the 8 blocks: evicts the cached ones
    engine.add(other)
    _first_token_time(engine, other)
    again = _seq(3, prompt)
    engine.add(again)
    _, _, hits = _first_token_time(engine, again)
    assert hits < 48  # at least part of the prefix was evicted


# ------------------------------------------------------------------ on the wire
LONG = " ".join(f"word{i}" for i in range(300))


def _chat(client: openai.OpenAI, text: str) -> None:
    client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": text}],
                                   max_tokens=3)


# both on one xdist worker: the `openai` package's import is 0.6 s of CPU in each worker that runs one (at
# 20:46 on 7 December two workers each paid it for one of these)
@pytest.mark.xdist_group("tests/sim/test_sim_prefix_cache.py::openai")
@pytest.mark.parametrize("enabled", [True, False])
def test_openai_client_sees_faster_prefill_and_metrics_count_hits(sim_factory, enabled):
    import openai

    sim = sim_factory(flavor="vllm", config={**FAST, "prefill_cost_s": "1ms", "enable_prefix_caching": enabled})
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0)
    _chat(client, LONG)
    _chat(client, LONG)
    rows = sim.ground_truth_rows()
    prompt = rows[0]["input_tokens"]  # 300 words + 4 template tokens
    assert prompt == 304
    m = metrics(sim.url)
    cached = [r["cached_tokens"] for r in rows]
    prefill = [r["first_token_at"] - r["admitted_at"] for r in rows]
    if enabled:
        assert cached == [0, (prompt - 1) // 16 * 16]
        assert prefill[1] < prefill[0] - 0.2  # 288 tokens x 1 ms not computed
    else:
        assert cached == [0, 0]
    assert m["vllm:prefix_cache_queries_total"] == (2 * prompt if enabled else 0)
    assert m["vllm:prefix_cache_hits_total"] == sum(cached)
    assert m["vllm:prompt_tokens_cached_total"] == sum(cached)
    assert m["vllm:prompt_tokens_by_source_total"] == 2 * prompt
    key = 'vllm:prompt_tokens_by_source_total{engine=0,model_name=sim-model,source=local_cache_hit}'
    assert m[key] == sum(cached)
    assert m["vllm:prompt_tokens_total"] == 2 * prompt


def test_cache_config_info_has_the_real_labels(sim_factory):
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    sim = sim_factory(flavor="vllm", config=FAST)
    text = requests.get(sim.url + "/metrics", timeout=5).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    labels = families["vllm:cache_config_info"].samples[0].labels
    assert labels["enable_prefix_caching"] == "True" and labels["prefix_caching_hash_algo"] == "sha256"
    assert labels["engine"] == "0" and labels["num_gpu_blocks"] == "4096" and labels["block_size"] == "16"
    assert "max_num_seqs" not in labels and "max_num_batched_tokens" not in labels


@pytest.mark.slow
def test_a_shared_prefix_run_hits_exactly_the_planned_prefix_blocks(sim_factory, tmp_path):
    """`llmload run` with `requests.shared_prefix`: every request after the first of its prefix finds the
    prefix's whole blocks (template + prefix tokens), and the hit counter is their sum."""
    import pandas as pd
    from support import base_config, write_config

    from llmload.cli import main

    sim = sim_factory(flavor="vllm", config={**FAST, "step_base_s": "10ms"})
    config = base_config(sim.url, {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "10s",
                                              "steps": [{"rate": 6, "duration": "4s"}]}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "1s"})
    config["requests"] = {"input_tokens": {"dist": "fixed", "value": 160},
                          "output_tokens": {"dist": "fixed", "value": 4},
                          "shared_prefix": {"ratio": 0.6, "prefixes": 2, "tokens": 100}, "seed": 3}
    run_dir = tmp_path / "run"
    main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir), "--no-report"])  # 3 (invalid) when busy is fine
    records = pd.read_parquet(run_dir / "records.parquet")
    prefix_of = dict(zip(records["request_id"], records["prefix_id"], strict=True))
    rows = sorted((r for r in sim.ground_truth_rows() if r["request_id"] in prefix_of and r["admitted_at"]),
                  key=lambda r: r["admitted_at"])
    shared_blocks = (3 + 100) // 16  # "<|im_start|>", "user", "\n" and the 100 prefix tokens
    seen: set = set()
    expected = []
    for row in rows:
        pid = prefix_of[row["request_id"]]
        if pid is None or pd.isna(pid):
            expected.append(0)
        else:
            expected.append(shared_blocks * 16 if pid in seen else 0)
            seen.add(pid)
    assert [r["cached_tokens"] for r in rows] == expected
    with_prefix = sum(1 for r in rows if not pd.isna(prefix_of[r["request_id"]]))
    assert 0.4 < with_prefix / len(rows) < 0.8 and sum(expected) > 0
    m = metrics(sim.url)
    assert m["vllm:prefix_cache_hits_total"] == sum(expected) == m["vllm:prompt_tokens_cached_total"]
    # every request the sim admitted (the run's pre-flight ones too) was looked up once (no KV pressure)
    admitted = [r for r in sim.ground_truth_rows() if r["admitted_at"]]
    assert m["vllm:prefix_cache_queries_total"] == sum(r["input_tokens"] for r in admitted)
