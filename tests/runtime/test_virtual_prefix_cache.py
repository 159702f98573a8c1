"""`llmload run --virtual` against a sim with vLLM's prefix cache: each request's prompt blocks are hashed as
`llmload sim` hashes them (`llmload.sim.prefix.request_block_hashes`, from the body the live client sends),
so a shared prefix hits the cache as it does live (tests/sim/test_sim_prefix_cache.py asserts the same rule
for the live sim: every request after the first of its prefix finds the prefix's whole blocks)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from support import make_mooncake as load_make_mooncake
from support import mooncake_expected_hits

from llmload.runtime.launcher.demo import demo_sim
from llmload.runtime.virtual.run import GROUND_TRUTH, run_virtual

CLOSED = "http://127.0.0.1:9"  # the discard port: a run that contacted the target would fail its requests
BLOCK = 16  # the sim's default block_size
SHARED_BLOCKS = (3 + 100) // BLOCK  # "<|im_start|>", "user", "\n" and the 100 prefix tokens


def _run(tmp_path, caching: bool) -> tuple[pd.DataFrame, list[dict], list[dict]]:
    config = {"target": {"url": CLOSED, "api": "openai-chat", "model": "m", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 160},
                           "output_tokens": {"dist": "fixed", "value": 4},
                           "shared_prefix": {"ratio": 0.6, "prefixes": 2, "tokens": 100}, "seed": 3},
              "slo": {"ttft_p95": "1s", "min_samples": 5},
              "shape": {"ladder": {"warmup": "0s", "steps": [{"rate": 6, "duration": "10s"}]}}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    sim = tmp_path / "sim.yaml"
    sim.write_text(yaml.safe_dump({**demo_sim(), "enable_prefix_caching": caching}), encoding="utf-8")
    run_dir = tmp_path / "run"
    assert run_virtual(path, out=run_dir, sim_path=sim, report=False) in (0, 1)
    records = pd.read_parquet(run_dir / "records.parquet")
    rows = [json.loads(line) for line in (run_dir / GROUND_TRUTH).read_text().splitlines()]
    telemetry = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    return records, rows, telemetry


@pytest.mark.parametrize("caching", [True, False])
def test_a_shared_prefix_hits_exactly_the_planned_prefix_blocks(tmp_path, caching):
    records, rows, telemetry = _run(tmp_path, caching)
    assert len(records) == 60 and (records["outcome"] == "ok").all()
    prefix_of = {rid: (None if pd.isna(pid) else int(pid))
                 for rid, pid in zip(records["request_id"], records["prefix_id"], strict=True)}
    assert {r["request_id"] for r in rows} == set(prefix_of)
    with_prefix = sum(pid is not None for pid in prefix_of.values())
    assert 0.4 < with_prefix / len(rows) < 0.8
    cached = {pid: sorted(r["cached_tokens"] for r in rows if prefix_of[r["request_id"]] == pid)
              for pid in set(prefix_of.values())}
    # without a prefix: the request's own text, nothing found; with one, every request but the first
    # scheduled of its prefix (no KV pressure: nothing is evicted) finds the prefix's whole blocks
    assert set(cached.pop(None)) == {0}
    assert len(cached) == 2
    for hits in cached.values():
        assert hits == ([0] + [SHARED_BLOCKS * BLOCK] * (len(hits) - 1) if caching else [0] * len(hits))
    # the sim's own counter, scraped from its /metrics into telemetry.jsonl as a live run scrapes it
    hits = [s["value"] for s in telemetry if s["metric"] == "vllm:prefix_cache_hits_total"]
    assert hits[-1] == sum(r["cached_tokens"] for r in rows) == (sum(map(sum, cached.values())) if caching else 0)
    assert (hits[-1] > 0) == caching


@pytest.mark.parametrize("unique", [False, True])
def test_mooncake_hash_ids_hit_as_they_do_live(tmp_path, unique):
    """The virtual twin of tests/sim/test_sim_mooncake.py: prompts built from a Mooncake trace's `hash_ids`
    find the blocks the trace shares (within one block per request); with every hash id unique, none."""
    make_mooncake = load_make_mooncake()
    trace = make_mooncake.write_trace(tmp_path / "trace.jsonl",
                                      make_mooncake.mooncake_rows(requests=20, rate=8.0, unique=unique))
    config = {"target": {"url": CLOSED, "api": "openai-chat", "model": "m", "server": "vllm"},
              "requests": {"seed": 3}, "slo": {"ttft_p95": "1s", "min_samples": 5},
              "shape": {"trace": {"file": str(trace), "format": "mooncake", "drain_timeout": "30s"}}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    assert run_virtual(path, out=tmp_path / "run", report=False) in (0, 1)  # the demo's server: caching on
    records = pd.read_parquet(tmp_path / "run" / "records.parquet")
    order = list({json.dumps(r["hash_ids"]): r["hash_ids"]
                  for r in map(json.loads, trace.read_text().splitlines())}.values())
    hashes = dict(zip(records.sort_values("scheduled_at")["request_id"], order, strict=True))
    rows = sorted((json.loads(line) for line in (tmp_path / "run" / GROUND_TRUTH).read_text().splitlines()),
                  key=lambda r: r["admitted_at"])
    assert len(rows) == 20 and all(r["outcome"] == "ok" for r in rows)
    expected = mooncake_expected_hits(hashes, rows)
    cached = [r["cached_tokens"] for r in rows]
    assert (sum(expected) == 0) == unique
    assert all(abs(c - e) <= BLOCK for c, e in zip(cached, expected, strict=True)), (cached, expected)
    assert (sum(cached) > 0) != unique
