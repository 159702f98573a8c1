"""The manifest: facts from the server, conditions from the config, no secrets, a stable fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.telemetry.manifest import (
    build_manifest,
    diff_conditions,
    fingerprint,
    read_manifest,
    write_manifest,
)

from .exposition_samples import VLLM
from .fake_nvml import GIB, FakeNvml
from .helpers import CannedServer, config_for

SECRET = "sk-live-0123456789abcdef"


def _vllm(canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    canned.routes["/version"] = (200, '{"version": "0.11.0"}', 0.0)
    canned.routes["/v1/models"] = (200, json.dumps({"data": [{"id": "m", "root": "org/m", "max_model_len": 4096}]}),
                                   0.0)


def test_no_secret_anywhere_and_headers_redacted(tmp_path: Path, canned: CannedServer, monkeypatch) -> None:
    _vllm(canned)
    monkeypatch.setenv("LLMLOAD_TEST_KEY", SECRET)
    config = config_for(f"http://user:hunter22@{canned.url[len('http://'):]}",
                        target={"api_key_env": "LLMLOAD_TEST_KEY", "model": "m",
                                "headers": {"X-Api-Key": "abcd-secret-header", "X-Team": "search"}},
                        conditions={"extra": {"note": f"key is {SECRET}"}}, telemetry={"gpu": "off"})
    manifest = build_manifest(config, run_id="r1", seeds={"requests": 1}, plan_kind="ladder")
    text = write_manifest(tmp_path, manifest).read_text()
    for secret in (SECRET, "abcd-secret-header", "hunter22"):
        assert secret not in text
    assert manifest["config"]["target"]["headers"] == {"X-Api-Key": "<redacted>", "X-Team": "search"}
    assert manifest["config"]["target"]["api_key_env"] == "LLMLOAD_TEST_KEY"  # the name, not the key
    # the probes did authenticate
    assert any(h.get("Authorization") == f"Bearer {SECRET}" for h in canned.headers_seen)
    assert read_manifest(tmp_path)["run_id"] == "r1"


def test_vllm_facts_fill_conditions_and_mismatches_warn(canned: CannedServer) -> None:
    _vllm(canned)
    config = config_for(canned.url, target={"model": "m"}, conditions={"context_length": 8192, "gpus": 2},
                        telemetry={"gpu": "off"})
    m = build_manifest(config, run_id="r1", seeds=[1], plan_kind="ladder")
    c = m["conditions"]
    assert (c["server"], c["server_version"], c["model"], c["model_path"]) == ("vllm", "0.11.0", "m", "org/m")
    assert (c["context_length"], c["kv_block_size"], c["kv_num_gpu_blocks"]) == (4096, 16, 4096)
    assert c["prefix_cache"] is True and c["cache_state"] == "used" and c["gpus"] == 2
    assert m["warnings"] == ["conditions.context_length is 8192 in the config but the server reports 4096"]
    assert m["client"]["locust"] and m["client"]["python"]


def test_fingerprint_is_stable_and_diff_names_changes(canned: CannedServer) -> None:
    _vllm(canned)
    base = {"target": {"model": "m"}, "telemetry": {"gpu": "off"}}
    a = build_manifest(config_for(canned.url, **base), run_id="a", seeds=[1], plan_kind="ladder")
    b = build_manifest(config_for(canned.url, **base), run_id="b", seeds=[1], plan_kind="ladder")
    assert a["fingerprint"] == b["fingerprint"] and a["created_at"] != b["created_at"]
    assert diff_conditions(a, b) == []
    c = build_manifest(config_for(canned.url, conditions={"ollama_num_parallel": 4}, **base),
                       run_id="c", seeds=[2], plan_kind="ladder")
    assert c["fingerprint"] != a["fingerprint"]
    assert diff_conditions(a, c) == [("ollama_num_parallel", None, 4), ("seeds", [1], [2])]
    assert fingerprint({"x": 1, "y": 2}) == fingerprint({"y": 2, "x": 1})


def test_unreachable_server_still_gives_a_manifest(canned: CannedServer) -> None:
    url = canned.url
    canned.stop()
    m = build_manifest(config_for(url, telemetry={"gpu": "off"}), run_id="r", seeds=None, plan_kind="soak",
                       timeout_s=0.5)
    assert m["conditions"]["server"] is None and m["conditions"]["model"] == "default"
    assert "detect" in m["servers"][0]["errors"]


def test_gpu_facts_from_nvml(canned: CannedServer) -> None:
    _vllm(canned)
    m = build_manifest(config_for(canned.url), run_id="r", seeds=None, plan_kind="ladder", nvml=FakeNvml(2))
    assert m["conditions"]["gpus"] == 2 and m["conditions"]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert m["conditions"]["driver_version"] == "550.54.15"
    assert m["gpu"]["devices"][1]["memory_total_bytes"] == 80 * GIB
    m = build_manifest(config_for(canned.url), run_id="r", seeds=None, plan_kind="ladder",
                       nvml=FakeNvml(fail_init=True))
    assert m["gpu"]["available"] is False and "Driver Not Loaded" in m["gpu"]["reason"]


@pytest.mark.slow
def test_probes_against_every_sim_flavour(sim_factory) -> None:
    vllm = sim_factory(flavor="vllm", config={"load_time_s": 0, "max_model_len": 2048, "max_num_seqs": 16})
    ollama = sim_factory(flavor="ollama", config={"load_time_s": 0})
    llama = sim_factory(flavor="llamacpp", config={"load_time_s": 0, "num_parallel": 2, "ctx_size": 2048})
    off = {"gpu": "off"}
    # vLLM's /metrics carries no max_num_seqs (not a CacheConfig field): the manifest takes conditions'
    v = build_manifest(config_for(vllm.url, target={"model": "sim-model"}, conditions={"max_num_seqs": 16},
                                  telemetry=off),
                       run_id="v", seeds=None, plan_kind="ladder")["conditions"]
    assert (v["server"], v["context_length"], v["max_num_seqs"], v["cache_state"]) == ("vllm", 2048, 16, "fresh")
    o = build_manifest(config_for(ollama.url, target={"model": "sim-model", "api": "ollama-chat"},
                                  conditions={"ollama_num_parallel": 4, "ollama_keep_alive": "5m"}, telemetry=off),
                       run_id="o", seeds=None, plan_kind="ladder")["conditions"]
    assert (o["server"], o["quantization"], o["cache_state"]) == ("ollama", "Q4_K_M", "not_loaded")
    assert o["server_version"] and o["ollama_num_parallel"] == 4 and o["ollama_keep_alive"] == "5m"
    ll = build_manifest(config_for(llama.url, telemetry=off), run_id="l", seeds=None,
                        plan_kind="ladder")["conditions"]
    assert (ll["server"], ll["max_num_seqs"], ll["context_length"]) == ("llamacpp", 2, 1024)


def test_the_manifest_names_llmload_s_version(canned: CannedServer) -> None:
    from llmload import __version__

    _vllm(canned)
    m = build_manifest(config_for(canned.url, telemetry={"gpu": "off"}), run_id="r1", seeds=[1], plan_kind="ladder")
    assert m["llmload_version"] == __version__ == m["client"]["llmload"]
