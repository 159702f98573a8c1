"""`/metrics` as vLLM and llama.cpp write it, with prometheus-client on a private registry.

vLLM (v1 `loggers.py` names, labels `model_name` and `engine`): gauges `vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (0-1 share of KV blocks), info gauge
`vllm:cache_config_info`; counters `vllm:num_preemptions_total`, `vllm:prompt_tokens_total`,
`vllm:generation_tokens_total`, `vllm:request_success_total` (label `finished_reason`),
`vllm:admission_rejections_total` (503s from `max_num_queued_reqs`, labels `model_name, reason`),
gauge `vllm:num_requests_waiting_by_reason` (`capacity`; `deferred` stays 0); histograms `vllm:request_queue_time_seconds`, `vllm:e2e_request_latency_seconds`,
`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds` with vLLM's buckets.
Prefix caching (vLLM `v1/metrics/loggers.py`, main late 2025): counters `vllm:prefix_cache_queries_total`
and `vllm:prefix_cache_hits_total` (tokens looked up / found, per scheduler lookup, preempted requests
excluded), `vllm:prompt_tokens_cached_total`, `vllm:prompt_tokens_recomputed_total` and
`vllm:prompt_tokens_by_source_total` (label `source`: local_compute, local_cache_hit,
external_kv_transfer), counted when a request's first token comes out. Per-request histograms as vLLM's:
`vllm:request_prefill_time_seconds`, `vllm:request_decode_time_seconds`,
`vllm:request_inference_time_seconds`, `vllm:request_prompt_tokens`, `vllm:request_generation_tokens`,
`vllm:request_params_max_tokens`, `vllm:request_params_n`, `vllm:request_max_num_generation_tokens`,
`vllm:request_prefill_kv_computed_tokens`, and `vllm:iteration_tokens_total` per engine step with output.
llama.cpp (`--metrics`, no labels): see `LlamaCppMetrics` (written by hand, as llama-server does).

prometheus-client is imported when a `VllmMetrics` is made or `content_type()` is asked (a scrape): an Ollama,
SGLang or llama.cpp sim starts without it (~0.03 s of CPU, most of it its exposition's HTTP imports).
"""

from __future__ import annotations

from llmload.sim.engine import StepResult

__all__ = ["ITL_BUCKETS", "LlamaCppMetrics", "REQUEST_LATENCY_BUCKETS", "TTFT_BUCKETS", "VllmMetrics",
           "content_type"]

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def content_type() -> str:
    """What prometheus-client (and so vLLM) answers /metrics with."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return CONTENT_TYPE_LATEST


def _buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """vLLM's `build_1_2_5_buckets`: 1, 2, 5, 10, 20, 50... up to `max_value`."""
    out: list[int] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** exp > max_value:
                return tuple(out)
            out.append(m * 10 ** exp)
        exp += 1


class VllmMetrics:
    """vLLM's Prometheus series for one model on engine 0."""

    def __init__(self, model: str, cache_info: dict[str, str], max_model_len: int = 8192) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=False)
        r, names = self.registry, ["model_name", "engine"]
        labels = {"model_name": model, "engine": "0"}

        def mk(cls, name, doc, **kw):
            return cls(name, doc, names, registry=r, **kw).labels(**labels)

        counts = _buckets_1_2_5(max_model_len)
        self.cache_queries = mk(Counter, "vllm:prefix_cache_queries",
                                "Prefix cache queries, in terms of number of queried tokens.")
        self.cache_hits = mk(Counter, "vllm:prefix_cache_hits",
                             "Prefix cache hits, in terms of number of cached tokens.")
        self.tokens_cached = mk(Counter, "vllm:prompt_tokens_cached",
                                "Number of cached prompt tokens (local + external).")
        self.tokens_recomputed = mk(Counter, "vllm:prompt_tokens_recomputed",
                                    "Number of cached tokens recomputed for forward pass.")
        by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                            names + ["source"], registry=r)
        self.by_source = {src: by_source.labels(source=src, **labels)
                          for src in ("local_compute", "local_cache_hit", "external_kv_transfer")}
        self.iteration_tokens = mk(Histogram, "vllm:iteration_tokens_total",
                                   "Histogram of number of tokens per engine_step.", buckets=ITERATION_BUCKETS)
        self.req_prompt = mk(Histogram, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                             buckets=counts)
        self.req_generation = mk(Histogram, "vllm:request_generation_tokens",
                                 "Number of generation tokens processed.", buckets=counts)
        self.req_max_gen = mk(Histogram, "vllm:request_max_num_generation_tokens",
                              "Histogram of maximum number of requested generation tokens.", buckets=counts)
        self.req_n = mk(Histogram, "vllm:request_params_n", "Histogram of the n request parameter.",
                        buckets=(1, 2, 5, 10, 20))
        self.req_max_tokens = mk(Histogram, "vllm:request_params_max_tokens",
                                 "Histogram of the max_tokens request parameter.", buckets=counts)
        self.req_kv_computed = mk(Histogram, "vllm:request_prefill_kv_computed_tokens",
                                  "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                                  buckets=counts)
        self.inference_time = mk(Histogram, "vllm:request_inference_time_seconds",
                                 "Histogram of time spent in RUNNING phase for request.",
                                 buckets=REQUEST_LATENCY_BUCKETS)
        self.prefill_time = mk(Histogram, "vllm:request_prefill_time_seconds",
                               "Histogram of time spent in PREFILL phase for request.",
                               buckets=REQUEST_LATENCY_BUCKETS)
        self.decode_time = mk(Histogram, "vllm:request_decode_time_seconds",
                              "Histogram of time spent in DECODE phase for request.",
                              buckets=REQUEST_LATENCY_BUCKETS)

        self.running = mk(Gauge, "vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = mk(Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = mk(Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = mk(Counter, "vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = mk(Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = mk(Counter, "vllm:generation_tokens", "Number of generation tokens processed.")
        # labels model_name, reason (issue 18; vLLM PR #55812, not in the sources read: the reason value
        # `max_num_queued_reqs` is the limit's name, as that PR's notes describe it)
        self.rejections = Counter("vllm:admission_rejections",
                                  "Requests rejected by admission control (max_num_queued_reqs).",
                                  ["model_name", "reason"], registry=r).labels(model_name=model,
                                                                                reason="max_num_queued_reqs")
        waiting_by = Gauge("vllm:num_requests_waiting_by_reason",
                           "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
                           "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
                           "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
                           names + ["reason"], registry=r)
        self.waiting_capacity = waiting_by.labels(reason="capacity", **labels)
        waiting_by.labels(reason="deferred", **labels).set(0)  # the sim has no LoRA / KV transfer
        self.queue_time = mk(Histogram, "vllm:request_queue_time_seconds",
                             "Histogram of time spent in WAITING phase for request.",
                             buckets=REQUEST_LATENCY_BUCKETS)
        self.e2e = mk(Histogram, "vllm:e2e_request_latency_seconds",
                      "Histogram of e2e request latency in seconds.", buckets=REQUEST_LATENCY_BUCKETS)
        self.ttft = mk(Histogram, "vllm:time_to_first_token_seconds",
                       "Histogram of time to first token in seconds.", buckets=TTFT_BUCKETS)
        self.itl = mk(Histogram, "vllm:inter_token_latency_seconds",
                      "Histogram of inter-token latency in seconds.", buckets=ITL_BUCKETS)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          names + ["finished_reason"], registry=r)
        # every vLLM FinishReason (v1/engine/__init__.py) has its series from the start
        self.success = {reason: success.labels(finished_reason=reason, **labels)
                        for reason in ("stop", "length", "abort", "error", "repetition")}
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     [*cache_info, "engine"], registry=r)
        info.labels(engine="0", **cache_info).set(1)

    def on_step(self, step: StepResult, *, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_usage.set(kv_usage)
        if step.preempted:
            self.preemptions.inc(len(step.preempted))
        # as vLLM's IterationStats: a request's whole prompt counts once, when its first token comes out
        prompt = sum(seq.prompt_tokens for seq in step.emitted if seq.generated == 1)
        if prompt:
            self.prompt_tokens.inc(prompt)
        if step.emitted:
            self.generation_tokens.inc(len(step.emitted))
            self.iteration_tokens.observe(prompt + len(step.emitted))
        if step.cache_queries:
            self.cache_queries.inc(step.cache_queries)
            self.cache_hits.inc(step.cache_hits)
        cached = sum(max(0, seq.cached_tokens) for seq in step.emitted if seq.generated == 1)
        if prompt:
            self.tokens_cached.inc(cached)
            self.by_source["local_cache_hit"].inc(cached)
            self.by_source["local_compute"].inc(prompt - cached)
            for seq in step.emitted:
                if seq.generated == 1:
                    self.req_kv_computed.observe(seq.prompt_tokens - max(0, seq.cached_tokens))

    def on_request(self, *, prompt_tokens: int, output_tokens: int, max_tokens: int,
                   prefill_s: float | None, decode_s: float | None, inference_s: float | None) -> None:
        """The per-request histograms of a request that ran (vLLM observes them when it finishes)."""
        self.req_prompt.observe(prompt_tokens)
        self.req_generation.observe(output_tokens)
        self.req_max_gen.observe(max_tokens)
        self.req_max_tokens.observe(max_tokens)
        self.req_n.observe(1)
        for hist, value in ((self.prefill_time, prefill_s), (self.decode_time, decode_s),
                            (self.inference_time, inference_s)):
            if value is not None:
                hist.observe(max(0.0, value))

    def on_finish(self, *, queue_s: float | None, e2e_s: float, ttft_s: float | None,
                  token_gaps_s: list[float], reason: str) -> None:
        if queue_s is not None:
            self.queue_time.observe(queue_s)
        self.e2e.observe(e2e_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        for gap in token_gaps_s:
            self.itl.observe(gap)
        self.success.get(reason, self.success["abort"]).inc()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class LlamaCppMetrics:
    """llama-server's `/metrics` (`--metrics`), written as it writes it (tools/server/server.cpp
    handle_metrics, b6500; issue 18 item 4): `# HELP` / `# TYPE` / one sample per metric, counters first.
    Counters: `prompt_tokens_total`, `prompt_seconds_total`, `tokens_predicted_total`,
    `tokens_predicted_seconds_total`, `n_decode_total`, `n_tokens_max` and `n_busy_slots_per_decode`
    (declared counters although they are a maximum and an average). Gauges: `prompt_tokens_seconds` and
    `predicted_tokens_seconds` are averages over the requests finished since the previous scrape (every
    `/metrics` call resets that bucket; 0 when none), `requests_processing`, `requests_deferred`."""

    def __init__(self, n_ctx_slot: int) -> None:
        self._n_ctx_slot = n_ctx_slot
        self.prompt_n = self.predicted_n = 0
        self.prompt_ms = self.predicted_ms = 0.0
        self.decodes = self.busy = self.n_tokens_max = 0
        self.processing = self.deferred = 0
        self._bucket = [0, 0.0, 0, 0.0]  # prompt tokens, prompt ms, predicted tokens, predicted ms

    def on_step(self, step: StepResult, *, running: int, waiting: int, kv_usage: float) -> None:
        self.processing, self.deferred = running, waiting
        if step.batch:
            self.decodes += 1
            self.busy += step.batch

    def on_finish(self, *, prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float) -> None:
        prompt_ms, predicted_ms = max(0.0, prompt_s) * 1e3, max(0.0, predicted_s) * 1e3
        self.prompt_n += prompt_n
        self.prompt_ms += prompt_ms
        self.predicted_n += predicted_n
        self.predicted_ms += predicted_ms
        self.n_tokens_max = max(self.n_tokens_max, prompt_n + predicted_n)
        b = self._bucket
        b[0], b[1], b[2], b[3] = b[0] + prompt_n, b[1] + prompt_ms, b[2] + predicted_n, b[3] + predicted_ms

    def render(self) -> bytes:
        b, self._bucket = self._bucket, [0, 0.0, 0, 0.0]  # as metrics.reset_bucket() after each scrape
        rows = [
            ("counter", "prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_n),
            ("counter", "prompt_seconds_total", "Prompt process time", int(self.prompt_ms) / 1e3),
            ("counter", "tokens_predicted_total", "Number of generation tokens processed.", self.predicted_n),
            ("counter", "tokens_predicted_seconds_total", "Predict process time", int(self.predicted_ms) / 1e3),
            ("counter", "n_decode_total", "Total number of llama_decode() calls", self.decodes),
            ("counter", "n_tokens_max", "Largest observed n_tokens.", self.n_tokens_max),
            ("counter", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             self.busy / max(self.decodes, 1)),
            ("gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
             1e3 / b[1] * b[0] if b[0] and b[1] > 0 else 0.0),
            ("gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s.",
             1e3 / b[3] * b[2] if b[2] and b[3] > 0 else 0.0),
            ("gauge", "requests_processing", "Number of requests processing.", self.processing),
            ("gauge", "requests_deferred", "Number of requests deferred.", self.deferred),
        ]
        return "".join(f"# HELP llamacpp:{name} {doc}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value:.6g}\n"
                       for kind, name, doc, value in rows).encode()
