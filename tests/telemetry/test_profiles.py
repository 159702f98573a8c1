"""Engine profiles map each server's names to the normalised schema; raw series are kept."""

from __future__ import annotations

import pytest

from llmload.telemetry.exposition import parse_exposition, parse_labels
from llmload.telemetry.profiles import detect_flavor_from_names, normalise

from .exposition_samples import LLAMACPP, SGLANG, TGI, VLLM, VLLM_DEPRECATED


def _norm(text: str, flavor: str) -> dict[tuple[str, str], float]:
    points = normalise(parse_exposition(text), flavor=flavor, source="server:x")
    return {(p.metric, p.labels): p.value for p in points}


def test_vllm_current_names_sum_engines_and_average_kv() -> None:
    got = _norm(VLLM, "vllm")
    assert got[("running", "")] == 5.0 and got[("waiting", "")] == 8.0
    assert got[("kv_usage", "")] == pytest.approx(0.375)
    assert got[("preemptions_total", "")] == 4.0
    assert got[("prompt_tokens_total", "")] == 1200.0 and got[("generation_tokens_total", "")] == 800.0
    # engine 1 wrote le="1", engine 0 le="1.0": one canonical bucket
    assert got[("queue_time_seconds_bucket", "le=1.0")] == 11.0
    assert got[("queue_time_seconds_bucket", "le=+Inf")] == 12.0
    assert got[("queue_time_seconds_count", "")] == 12.0
    assert got[("queue_time_seconds_sum", "")] == pytest.approx(3.4)
    # raw series keep their server names and labels
    assert got[("vllm:num_requests_running", "engine=1,model_name=m")] == 2.0


def test_vllm_deprecated_names_are_fallbacks() -> None:
    got = _norm(VLLM_DEPRECATED, "vllm")
    assert got[("kv_usage", "")] == 0.75
    assert got[("itl_seconds_bucket", "le=0.01")] == 2.0
    assert ("waiting", "") not in got  # absent on the server: not invented


def test_llamacpp_processing_and_deferred() -> None:
    got = _norm(LLAMACPP, "llamacpp")
    assert got[("running", "")] == got[("processing", "")] == 4.0
    assert got[("waiting", "")] == got[("deferred", "")] == 6.0
    assert got[("prompt_tokens_total", "")] == 350.0 and got[("generation_tokens_total", "")] == 512.0


def test_sglang_and_tgi() -> None:
    s = _norm(SGLANG, "sglang")
    assert (s[("running", "")], s[("waiting", "")], s[("kv_usage", "")]) == (12.0, 5.0, 0.28)
    assert s[("preemptions_total", "")] == 2.0 and s[("queue_time_seconds_bucket", "le=0.0")] == 1.0
    t = _norm(TGI, "tgi")
    assert (t[("running", "")], t[("waiting", "")]) == (8.0, 3.0)
    assert t[("queue_time_seconds_bucket", "le=0.05")] == 9.0 and t[("prompt_tokens_total", "")] == 1500.0


def test_generic_keeps_raw_only() -> None:
    got = _norm(LLAMACPP, "generic")
    assert ("running", "") not in got and got[("llamacpp:requests_processing", "")] == 4.0


def test_gauges_always_written_counters_and_raw_on_change() -> None:
    points = normalise(parse_exposition(VLLM), flavor="vllm", source="server:x")
    always = {p.metric for p in points if p.always}
    assert always == {"running", "waiting", "kv_usage"}
    assert all(parse_labels(p.labels).keys() == {"le"} for p in points
               if p.metric == "queue_time_seconds_bucket")


@pytest.mark.parametrize(("text", "flavor"), [(VLLM, "vllm"), (LLAMACPP, "llamacpp"), (SGLANG, "sglang"),
                                              (TGI, "tgi"), ("process_cpu_seconds_total 1\n", "generic")])
def test_flavor_detected_from_names(text: str, flavor: str) -> None:
    assert detect_flavor_from_names(s.name for s in parse_exposition(text)) == flavor


#: llama-server's /slots as llama-cpp-python 0.3.36's vendored `server_slot::to_json` writes it (trimmed)
LLAMACPP_SLOTS = [
    {"id": 0, "n_ctx": 2048, "speculative": False, "is_processing": True, "id_task": 12,
     "n_prompt_tokens": 700, "n_prompt_tokens_processed": 690, "n_prompt_tokens_cache": 10,
     "next_token": [{"has_next_token": True, "n_remain": 90, "n_decoded": 10}]},
    {"id": 1, "n_ctx": 2048, "speculative": False, "is_processing": False, "id_task": 7,
     "n_prompt_tokens": 1500},  # idle: its cached prompt is reusable, not held by a request
]


def test_llamacpp_kv_usage_from_slots_busy_tokens_over_all_context(monkeypatch) -> None:
    import llmload.telemetry.sources as sources

    assert sources.slot_context_usage(LLAMACPP_SLOTS) == pytest.approx(700 / 4096)
    assert sources.slot_context_usage([{**s, "n_prompt_tokens": None} for s in LLAMACPP_SLOTS]) is None
    assert sources.slot_context_usage([{"id": 0, "is_processing": False}]) is None
    monkeypatch.setattr(sources, "fetch_json", lambda *a, **k: LLAMACPP_SLOTS)
    points = {p.metric: p.value for p in sources.SlotsPoller("http://x", timeout_s=1.0).poll()}
    assert points["kv_usage"] == pytest.approx(700 / 4096) and points["slots_processing"] == 1.0
