"""Engine profiles: which server metric names mean the same thing, mapped to one normalised schema.

The analysis reads only normalised names (docs/ARCHITECTURE.md "Telemetry schema"): `running`,
`waiting`, `kv_usage` (0-1), `preemptions_total`, token counters, `admission_rejections_total`,
`deferred`, `processing`, and the histograms `queue_time_seconds`, `ttft_seconds`, `itl_seconds`,
`e2e_seconds` (`_bucket` with `le=<bound>`, `_count`, `_sum`). Raw series are kept too, under their
server names, so nothing a server exposes is lost and an unknown server (`generic`) still has data.

Names were checked against the servers' sources: vLLM (`vllm/v1/metrics/loggers.py`, with the deprecated
`gpu_cache_usage_perc` and `time_per_output_token_seconds` as fallbacks), llama.cpp `server.cpp`
(`llamacpp:` gauges and counters; no KV gauge in current builds), SGLang `srt/metrics/collector.py`,
TGI's metrics reference (its Rust exporter writes counters without `_total`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from llmload.telemetry.exposition import Sample, format_bound, format_labels
from llmload.telemetry.sink import Point

__all__ = ["FLAVORS", "PROFILES", "Profile", "detect_flavor_from_names", "normalise"]

FLAVORS = ("vllm", "ollama", "llamacpp", "sglang", "tgi", "generic")

Mapping_ = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Profile:
    """Normalised name -> server names to try, first present wins (current name before deprecated)."""

    name: str
    gauges: Mapping_ = ()
    counters: Mapping_ = ()
    histograms: Mapping_ = ()
    #: gauges averaged over label sets (engines, models) instead of summed
    averaged: frozenset[str] = field(default_factory=lambda: frozenset({"kv_usage"}))


PROFILES: dict[str, Profile] = {
    "vllm": Profile(
        "vllm",
        gauges=(("running", ("vllm:num_requests_running",)),
                ("waiting", ("vllm:num_requests_waiting",)),
                ("kv_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))),
        counters=(("preemptions_total", ("vllm:num_preemptions_total", "vllm:num_preemptions")),
                  ("prompt_tokens_total", ("vllm:prompt_tokens_total", "vllm:prompt_tokens")),
                  ("generation_tokens_total", ("vllm:generation_tokens_total", "vllm:generation_tokens")),
                  ("admission_rejections_total", ("vllm:admission_rejections_total",))),
        histograms=(("queue_time_seconds", ("vllm:request_queue_time_seconds",)),
                    ("ttft_seconds", ("vllm:time_to_first_token_seconds",)),
                    ("itl_seconds", ("vllm:inter_token_latency_seconds",
                                     "vllm:time_per_output_token_seconds")),
                    ("e2e_seconds", ("vllm:e2e_request_latency_seconds",))),
    ),
    "llamacpp": Profile(
        "llamacpp",
        gauges=(("running", ("llamacpp:requests_processing",)),
                ("processing", ("llamacpp:requests_processing",)),
                ("waiting", ("llamacpp:requests_deferred",)),
                ("deferred", ("llamacpp:requests_deferred",)),
                # older llama-server only; the current one (llama-cpp-python 0.3.36's) has no KV series:
                # `kv_usage` comes from /slots (`SlotsPoller`: busy slots' tokens / all slots' n_ctx)
                ("kv_usage", ("llamacpp:kv_cache_usage_ratio",))),
        counters=(("prompt_tokens_total", ("llamacpp:prompt_tokens_total",)),
                  ("generation_tokens_total", ("llamacpp:tokens_predicted_total",))),
    ),
    "sglang": Profile(
        "sglang",
        gauges=(("running", ("sglang:num_running_reqs",)),
                ("waiting", ("sglang:num_queue_reqs",)),
                ("kv_usage", ("sglang:token_usage",))),
        counters=(("preemptions_total", ("sglang:num_retracted_requests_total",)),
                  ("prompt_tokens_total", ("sglang:prompt_tokens_total",)),
                  ("generation_tokens_total", ("sglang:generation_tokens_total",))),
        histograms=(("queue_time_seconds", ("sglang:queue_time_seconds",)),
                    ("ttft_seconds", ("sglang:time_to_first_token_seconds",)),
                    ("itl_seconds", ("sglang:inter_token_latency_seconds",
                                     "sglang:time_per_output_token_seconds")),
                    ("e2e_seconds", ("sglang:e2e_request_latency_seconds",))),
    ),
    "tgi": Profile(
        "tgi",
        gauges=(("running", ("tgi_batch_current_size",)),
                ("waiting", ("tgi_queue_size",))),
        counters=(("prompt_tokens_total", ("tgi_request_input_length_sum",)),
                  ("generation_tokens_total", ("tgi_request_generated_tokens_sum",))),
        histograms=(("queue_time_seconds", ("tgi_request_queue_duration",)),
                    ("e2e_seconds", ("tgi_request_duration",))),
    ),
    "generic": Profile("generic"),
    "ollama": Profile("ollama"),
}

_PREFIXES = (("vllm:", "vllm"), ("llamacpp:", "llamacpp"), ("sglang:", "sglang"), ("tgi_", "tgi"))


def detect_flavor_from_names(names: Iterable[str]) -> str:
    """The engine whose metric prefix appears most on a /metrics page; `generic` when none does."""
    counts: dict[str, int] = defaultdict(int)
    for name in names:
        for prefix, flavor in _PREFIXES:
            if name.startswith(prefix):
                counts[flavor] += 1
    return max(counts, key=counts.__getitem__) if counts else "generic"


def _first(by_name: dict[str, list[Sample]], candidates: tuple[str, ...]) -> list[Sample] | None:
    return next((by_name[c] for c in candidates if c in by_name), None)


def normalise(samples: list[Sample], *, flavor: str, source: str, raw: bool = True) -> list[Point]:
    """Points for one scrape: normalised series for the flavour, plus every raw series if `raw`."""
    profile = PROFILES.get(flavor, PROFILES["generic"])
    by_name: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_name[s.name].append(s)
    points: list[Point] = []
    for norm, candidates in profile.gauges:
        found = _first(by_name, candidates)
        if found:
            total = sum(s.value for s in found)
            value = total / len(found) if norm in profile.averaged else total
            points.append(Point(source, norm, value))
    for norm, candidates in profile.counters:
        found = _first(by_name, candidates)
        if found:
            points.append(Point(source, norm, sum(s.value for s in found), always=False))
    for norm, candidates in profile.histograms:
        base = next((c for c in candidates if f"{c}_bucket" in by_name), None)
        if base is None:
            continue
        buckets: dict[str, float] = defaultdict(float)
        for s in by_name[f"{base}_bucket"]:
            if "le" in s.labels:
                buckets[format_bound(s.labels["le"])] += s.value
        for bound, value in buckets.items():
            points.append(Point(source, f"{norm}_bucket", value, f"le={bound}", always=False))
        for part in ("count", "sum"):
            if f"{base}_{part}" in by_name:
                points.append(Point(source, f"{norm}_{part}",
                                    sum(s.value for s in by_name[f"{base}_{part}"]), always=False))
    if raw:
        points.extend(Point(source, s.name, s.value, format_labels(s.labels), always=False) for s in samples)
    return points
