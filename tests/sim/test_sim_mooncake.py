"""Mooncake replay against the vLLM sim with prefix caching: prompts are built from `hash_ids`, so the
sim's cache finds exactly the blocks the trace shares (within one block per request); the same trace with
every hash id made unique finds none, and its TTFT p95 is higher (it computes every prompt token)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from support import base_config, mooncake_expected_hits, write_config
from support import make_mooncake as load_make_mooncake
from test_sim_prefix_cache import FAST, metrics

from llmload.cli import main

make_mooncake = load_make_mooncake()


def _replay(sim_factory, tmp_path, *, unique: bool) -> tuple[dict, list[dict], dict, float]:
    sim = sim_factory(flavor="vllm", config={**FAST, "step_base_s": "10ms", "prefill_cost_s": "0.2ms"})
    name = "unique" if unique else "shared"
    trace = make_mooncake.write_trace(tmp_path / f"{name}.jsonl",
                                      make_mooncake.mooncake_rows(requests=20, rate=8.0, unique=unique))
    config = base_config(sim.url, {"trace": {"file": str(trace), "format": "mooncake", "drain_timeout": "30s"}},
                         client={"max_concurrency": 32, "max_send_lag_p99": "1s"})
    config["requests"] = {"seed": 3}
    run_dir = tmp_path / name
    main(["run", str(write_config(tmp_path, config, name=f"{name}.yaml")), "--out", str(run_dir), "--no-report"])
    records = pd.read_parquet(run_dir / "records.parquet")
    blocks = {json.dumps(r["hash_ids"]): r["hash_ids"] for r in map(json.loads, trace.read_text().splitlines())}
    order = [b for b in blocks.values()]
    hashes = dict(zip(records.sort_values("scheduled_at")["request_id"], order, strict=True))
    rows = sorted((r for r in sim.ground_truth_rows() if r["request_id"] in hashes and r["admitted_at"]),
                  key=lambda r: r["admitted_at"])
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    return hashes, rows, metrics(sim.url), steps[0]["ttft_p95_s"]


@pytest.mark.slow
def test_shared_hash_ids_hit_the_cache_and_unique_ones_do_not(sim_factory, tmp_path):
    hashes, rows, m, shared_p95 = _replay(sim_factory, tmp_path, unique=False)
    expected = mooncake_expected_hits(hashes, rows)
    cached = [r["cached_tokens"] for r in rows]
    assert sum(expected) > 0 and len(rows) == 20
    assert all(abs(c - e) <= 16 for c, e in zip(cached, expected, strict=True)), (cached, expected)
    assert m["vllm:prefix_cache_hits_total"] == sum(cached) > 0

    hashes_u, rows_u, m_u, unique_p95 = _replay(sim_factory, tmp_path, unique=True)
    assert mooncake_expected_hits(hashes_u, rows_u) == [0] * len(rows_u)
    assert m_u["vllm:prefix_cache_hits_total"] == 0 and all(r["cached_tokens"] == 0 for r in rows_u)
    print(f"TTFT p95: shared hash_ids {shared_p95 * 1000:.0f} ms, unique {unique_p95 * 1000:.0f} ms; "
          f"hits {m['vllm:prefix_cache_hits_total']:.0f} of {m['vllm:prefix_cache_queries_total']:.0f} queried")
    assert unique_p95 > shared_p95  # every prompt token computed against two thirds of them cached
