"""Shared helpers for the client tests: targets for a sim, and sending a batch under gevent."""

from __future__ import annotations

import gevent.pool

from llmload.client import RequestMix, Transport, send
from llmload.clock import now
from llmload.config import Requests, Target
from llmload.records import Record


def sim_target(url: str, api: str, server: str | None, **kw) -> Target:
    return Target(url=url, api=api, model="sim-model", server=server, **kw)


def fixed_requests(input_tokens: int = 24, output_tokens: int = 8, **kw) -> Requests:
    return Requests(input_tokens={"dist": "fixed", "value": input_tokens},
                    output_tokens={"dist": "fixed", "value": output_tokens}, **kw)


def send_batch(target: Target, requests: Requests, n: int, *, concurrency: int = 1, prefix: str = "r",
               transport: Transport | None = None) -> list[Record]:
    """Send `n` requests from the mix, at most `concurrency` at once; the records in request order."""
    tr = transport or Transport.from_target(target, concurrency=concurrency)
    mix = RequestMix(requests, target)
    records = [Record(request_id=f"{prefix}-{i}", step="s0", worker="w0", scheduled_at=now()) for i in range(n)]

    def one(i: int) -> None:
        send(tr, mix.build(records[i].request_id, i, seed=7), records[i])

    pool = gevent.pool.Pool(concurrency)
    try:
        for i in range(n):
            pool.spawn(one, i)
        pool.join(raise_error=True)
    finally:
        if transport is None:
            tr.close()
    return records
