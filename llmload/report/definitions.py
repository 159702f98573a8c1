"""The metric definitions the report prints (METRICS.md) and the name map to the peers' terms.

Peers use the same words for different quantities, so every report carries both. The map was checked
against the peers' own sources: `vllm bench serve` (TPOT = (E2E - TTFT) / (output tokens - 1), ITL =
gaps between streamed chunks), GuideLLM (`time_per_output_token_ms` = (last - first token) / output
tokens, documented as including the first token; `inter_token_latency_ms` = (last - first token) /
(output tokens - 1)), AIPerf (`inter_token_latency` = (request_latency - TTFT) / (OSL - 1);
`inter_chunk_latency` = gaps between consecutive responses).
"""

from __future__ import annotations

__all__ = ["DEFINITIONS", "NAME_MAP"]

#: (name, definition) in METRICS.md's words
DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("scheduled_at / sent_at", "when the arrival process planned the request / just before its bytes "
     "were written (after any client-side cap). Monotonic clock, mapped once per process to wall time."),
    ("first output", "the first stream event that carries output (content, reasoning, text, response or "
     "a tool call); role-only, empty and usage-only chunks do not count."),
    ("client wait", "sent_at − scheduled_at: time queued inside the load generator (cap reached or "
     "generator late)."),
    ("TTFT", "first_token_at − sent_at: what the server made the request wait (same start as "
     "vllm bench serve)."),
    ("user TTFT", "first_token_at − scheduled_at: TTFT plus client wait."),
    ("E2E / user E2E", "last_token_at − sent_at / last_token_at − scheduled_at."),
    ("TPOT", "(E2E − TTFT) ÷ (output_tokens − 1), only for requests with ≥ 2 output tokens; a 1-token "
     "answer has no TPOT and is left out of TPOT percentiles (never entered as 0)."),
    ("ITL (chunk)", "gaps between consecutive output-bearing events; token-level ITL divides a gap by the "
     "tokens in that event when the server reports them."),
    ("server queue", "vLLM request_queue_time_seconds histogram, read from the step's start to its drained "
     "end (its requests are admitted and observed until then): exact mean from _sum/_count, p95 only as "
     "the bucket it lies in; Ollama total − load − prompt_eval − eval, per request; llama.cpp reports no "
     "queue time: TTFT − timings.prompt_ms, a remainder. Part of TTFT, never added to it."),
    ("queueing split", "per step, over every completed request of the step (warm-up included): client wait "
     "+ server queue + prefill to first token (admission to first token) + decode (first to last token) "
     "= user E2E, exactly, in the means. Each part says its basis: per_request (measured per request), "
     "histogram (from the server's histogram) or remainder (what is left of TTFT: inferred, not measured)."),
    ("output / total / good output tokens/s", "output tokens (and input + output tokens) of the ok requests "
     "that finished in the window ÷ window length; good: output tokens of those same requests that arrived "
     "in the window and met every per-request threshold ÷ window length (one basis: good ≤ output). Token "
     "counts as the server reported them."),
    ("offered rate", "planned arrivals in the measurement window ÷ window length. It does not tell that "
     "the server finished them or that the generator kept up (see achieved rate and send lag)."),
    ("in-flight", "time-average of requests sent and not finished (client view); server running/waiting "
     "come from its metrics. Not a fixed capacity per second."),
    ("completion throughput", "ok requests that finished in the window ÷ window length. It does not tell "
     "that latency met the targets or that no queue built up."),
    ("goodput", "ok requests meeting every per-request threshold (TTFT, TPOT, E2E, client wait …) ÷ window "
     "length; a request with no TPOT is judged on the others. It does not tell that answers were right."),
    ("SLO attainment", "requests meeting every SLO ÷ all arrivals in the window (rejected, timed-out, "
     "cancelled and failed stay in the denominator; client_error, a failure inside llmload, leaves it)."),
    ("KV usage", "vLLM kv_cache_usage_perc: a 0–1 ratio of KV blocks, not GPU memory. llama.cpp reports "
     "none: context tokens held by busy slots ÷ all slots' n_ctx, from /slots (not reported when /slots "
     "is off)."),
    ("verdict", "invalid: the generator's own deviation could have changed the load or a judged number "
     "(achieved send rate > 2% under offered, p99 send lag over its step's limit, worker CPU over its limit "
     "while sending, or a client_error); insufficient: too few completions for the "
     "tail; fail: an SLO percentile over its threshold, a growing queue (trend test), OOM or rejections "
     "over the limit, each failing dimension named; pass: none of these. Unrun steps stay blank."),
    ("last passing sustained rate", "the highest ladder or refine rate whose step passed, below the first "
     "failing rate. It holds only for the recorded conditions; it is not a number of users."),
)

#: (our name, vllm bench serve, GuideLLM, AIPerf)
NAME_MAP: tuple[tuple[str, str, str, str], ...] = (
    ("TTFT (from sent_at)", "TTFT", "time_to_first_token_ms", "time_to_first_token (TTFT)"),
    ("TPOT = (E2E − TTFT) ÷ (out − 1)", "TPOT", "inter_token_latency_ms (ITL)",
     "inter_token_latency (ITL)"),
    ("—", "—", "time_per_output_token_ms (TPOT): (last − first token) ÷ out, counts the first token",
     "—"),
    ("ITL (chunk): gaps between output events", "ITL", "—", "inter_chunk_latency (ICL)"),
    ("E2E (from sent_at)", "E2EL", "request_latency", "request_latency"),
    ("client wait", "— (not reported)", "— (not reported)", "— (credit → request start, not reported)"),
    ("goodput (every threshold met)", "goodput (with --goodput thresholds)", "—", "goodput (with --goodput)"),
)
