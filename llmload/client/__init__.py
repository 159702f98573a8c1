"""The streaming request core and what feeds it: the public API the runtime (Locust users) calls.

Set up once per worker process (before the users start)::

    from llmload.client import Transport, RequestMix, send, calibrate_tokens_per_word
    transport = Transport.from_target(cfg.target, concurrency=users_per_worker, seed=shard_seed,
                                      base_dir=config_dir)      # pools, routing, timeouts, API key
    ratio = calibrate_tokens_per_word(cfg.target.endpoints[0], server=cfg.target.server,
                                      model=cfg.target.model)    # None: no /tokenize, keep 1.0
    mix = RequestMix(cfg.requests, cfg.target, base_dir=config_dir, tokens_per_word=ratio)

Per arrival, inside a user greenlet::

    prepared = mix.build(request_id, index, seed=step_shard_seed,
                         input_tokens=arrival.input_tokens, output_tokens=arrival.output_tokens)
    record = Record(request_id=..., step=..., worker=..., scheduled_at=...)   # runtime's fields
    result = send(transport, prepared, record, expect=case.expect if sampled else None)
    writer.write(result.record)            # result.text is the answer; never store it

`send` never raises for a server failure (the outcome says it); it re-raises `GreenletExit` after
recording the request as `cancelled`. Before a test: `run_quality_cases(cfg.quality, cfg.target,
transport)` and `quality_failure(results)`. `check_answer(text, expect)` is the pure check.

Modules: `core` (send), `transport` (pools, `EndpointRouter`), `bodies` (request bodies per API,
`PreparedRequest`), `mix` / `lengths` / `prompts` / `dataset` (the request mix), `outcomes`
(status and error text -> outcome), `checks` / `quality` (answer checks), `auth` (`Credentials`).
"""

from __future__ import annotations

from importlib import import_module

#: public name -> submodule, imported on first use (`llmload run`'s reachability check needs only
#: `auth`, not gevent, geventhttpclient and jsonschema)
_LAZY = {"Credentials": "auth", "API_PATHS": "bodies", "PreparedRequest": "bodies", "build_body": "bodies",
         "check_answer": "checks", "COLD_LOAD_S": "core", "SendResult": "core", "send": "core",
         "DatasetEntry": "dataset", "load_dataset": "dataset", "LengthSampler": "lengths",
         "RequestMix": "mix", "classify_error_text": "outcomes", "classify_status": "outcomes",
         "is_oom": "outcomes", "calibrate_tokens_per_word": "prompts", "QualityResult": "quality",
         "case_request": "quality", "quality_failure": "quality", "run_quality_cases": "quality",
         "ConnectFailed": "transport", "EndpointRouter": "transport", "Transport": "transport"}

__all__ = [
    "API_PATHS",
    "COLD_LOAD_S",
    "ConnectFailed",
    "Credentials",
    "DatasetEntry",
    "EndpointRouter",
    "LengthSampler",
    "PreparedRequest",
    "QualityResult",
    "RequestMix",
    "SendResult",
    "Transport",
    "build_body",
    "calibrate_tokens_per_word",
    "case_request",
    "check_answer",
    "classify_error_text",
    "classify_status",
    "is_oom",
    "load_dataset",
    "quality_failure",
    "run_quality_cases",
    "send",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"llmload.client.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
