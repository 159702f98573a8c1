"""How a worker turns a job into a streamed request: the client library's mix, transport and `send`.

One `Sender` per worker process, built from the config in the step message (never from the
worker's own options). The request for arrival `index` of a step is built from the step's seed and
that index, so it is the same in every process and no two requests share text by accident; trace
arrivals fix their own sizes.
"""

from __future__ import annotations

import random
from typing import Any

import gevent

from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.core import send
from llmload.client.mix import RequestMix
from llmload.client.quality import case_request
from llmload.client.transport import Transport
from llmload.clock import now
from llmload.config import Config
from llmload.records import Record

__all__ = ["Sender", "build_sender", "preflight_send", "wait_until"]

#: the last stretch before an arrival's time is spent yielding to the loop rather than in a timer
SPIN_S = 0.0006


def wait_until(at: float) -> None:
    """Return at wall time `at` (within microseconds): a gevent sleep until `SPIN_S` before it (its timers
    wake ~0.5 ms late), then yields to the loop, so other greenlets and I/O run meanwhile."""
    delay = at - now() - SPIN_S
    if delay > 0:
        gevent.sleep(delay)
    while now() < at:
        gevent.sleep(0)


class Sender:
    """Builds and sends the requests of one worker."""

    def __init__(self, config: Config, *, concurrency: int, seed: int, base_dir: str = ".") -> None:
        self.config = config
        self.transport = Transport.from_target(config.target, concurrency=concurrency, seed=seed,
                                               base_dir=base_dir)
        self.mix = RequestMix(config.requests, config.target, base_dir=base_dir,
                              tokens_per_word=config.requests.tokens_per_word)

    def send(self, record: Record, job: Any) -> None:
        """Fill `record` by sending `job` (server failures are data; a kill propagates as cancelled).

        A seeded fraction `quality.sample_under_load` of requests are quality cases instead, checked
        under load (a wrong answer is outcome `quality_fail`).
        """
        a = job.arrival
        case = self._sampled_case(job.seed, a.index)
        if case is not None:
            request, expect = case_request(case, self.config.target, record.request_id), case.expect
        else:
            request, expect = self.mix.build(record.request_id, a.index, job.seed, input_tokens=a.input_tokens,
                                             output_tokens=a.output_tokens, prefix_id=a.prefix_id), None
        wait_until(job.scheduled_at)  # the job is queued a little early (worker.QUEUE_AHEAD_S)
        send(self.transport, request, record, expect=expect)

    def _sampled_case(self, seed: int, index: int) -> Any:
        quality = self.config.quality
        if not quality.cases or quality.sample_under_load <= 0:
            return None
        rng = random.Random(f"llmload-quality/{seed}/{index}")
        if rng.random() >= quality.sample_under_load:
            return None
        return quality.cases[rng.randrange(len(quality.cases))]

    def close(self) -> None:
        self.transport.close()


def build_sender(config: dict, *, worker: str, shard: int, shards: int, seed: int,
                 base_dir: str = ".") -> Sender:
    """The sender for a worker, from the config dict a step message carries."""
    cfg = Config.model_validate(config)
    cap = cfg.client.max_concurrency
    concurrency = max(1, -(-cap // shards)) if cap else 512
    from shapes.plan import closed_loop_levels

    levels = closed_loop_levels(cfg)
    if levels:
        concurrency = max(concurrency, -(-max(levels) // shards))
    return Sender(cfg, concurrency=concurrency, seed=seed + shard, base_dir=base_dir)


def preflight_send(config: Config, *, prompt: str, max_tokens: int, request_id: str) -> Record:
    """One request outside the measurements (pre-flight); returns its filled record."""
    transport = Transport.from_target(config.target, concurrency=1)
    try:
        body = build_body(config.target.api, model=config.target.model, max_tokens=max_tokens, prompt=prompt,
                          temperature=config.requests.temperature, server=config.target.server)
        record = Record(request_id=request_id, step="preflight", worker="master", scheduled_at=0.0)
        send(transport, PreparedRequest(request_id, config.target.api, body), record)
        return record
    finally:
        transport.close()
