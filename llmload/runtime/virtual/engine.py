"""The simulated server's engine in virtual time, and a worker's sender that it answers.

`EngineServer` runs `llmload.sim.engine.Engine` as `llmload sim`'s loop does (`llmload.sim.truth` has the
rules): a request submitted at `t` is scheduled at the first step start at or after `t`; while busy, each
step starts at the previous one's end and lasts its `cost_s` on the run's `Clock`; an idle engine waits
for the next submit; a token sampled in a step is delivered at the step's end. One engine serves every
worker of a run, as one server serves every Locust worker.

`EngineSender` is the worker's `Sender` for a virtual run: the request is built by the config's mix
(the same sizes, ids and seeds as a live run's), released at its time (`Clock.wait_until`), and its
record filled from the engine's token times (outcome `ok`, usage as a server reports it). Not simulated:
the HTTP layer (faults, cold load, context-length rules), quality cases, sessions and user hooks
(`unsupported` says which a config asks for). Admission is: vLLM's `max_num_queued_reqs` refuses a
request with 503 (`rejected`) while that many are in flight, as `llmload sim` does.

`EngineServer.die()` is the server process dying (`run_virtual(during=...)` calls it at a virtual time):
what it was serving loses its connection mid-stream, and every later request meets a closed port; each
record says so as the live client's would (`llmload.client.outcomes.classify_exception` of the socket
error it would have read: `disconnect`, `connect_error`).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event

from llmload.client.mix import RequestMix
from llmload.client.outcomes import Failure, SendContext, classify_exception
from llmload.clocks import Clock
from llmload.config import Config
from llmload.records import Record
from llmload.sim.engine import Engine, EngineLimits
from llmload.sim.engine import Sequence as EngineSequence

__all__ = ["EngineSender", "EngineServer", "unsupported"]


@dataclass(slots=True, eq=False)
class Served:
    """One request inside the engine: its sequence, its tokens' delivery times, and when it is done."""

    seq: EngineSequence
    token_times: list[float] = field(default_factory=list)
    done: Event = field(default_factory=Event)
    #: the server died before it finished (`EngineServer.die`)
    dropped: bool = False


class EngineServer:
    """The engine of `llmload sim` stepped on a `Clock` (see the module docstring)."""

    def __init__(self, limits: EngineLimits, clock: Clock) -> None:
        self.engine = Engine(limits)
        self.clock = clock
        self.started_at = clock.now()
        self._serving: dict[int, Served] = {}
        self._ids = 0
        self._submitted = Event()
        self._loop: gevent.Greenlet | None = None
        #: the server process died (`die`): nothing is served any more
        self.dead = False

    @property
    def in_flight(self) -> int:
        """Requests submitted and not finished (waiting or running)."""
        return len(self._serving)

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        return self.engine.fits(prompt_tokens, output_tokens)

    def submit(self, prompt_tokens: int, output_tokens: int) -> Served:
        """Queue one request (it must fit the KV cache: `fits`)."""
        self._ids += 1
        served = Served(EngineSequence(seq_id=self._ids, prompt_tokens=prompt_tokens,
                                       output_tokens=max(1, output_tokens)))
        self.engine.add(served.seq)
        self._serving[served.seq.seq_id] = served
        self._submitted.set()
        if self._loop is None:
            self._loop = gevent.spawn(self._run)
        return served

    def abort(self, served: Served) -> None:
        """The client went away (a cancel): the engine drops the request and frees its blocks."""
        if self._serving.pop(served.seq.seq_id, None) is not None:
            self.engine.abort(served.seq)

    def die(self) -> None:
        """The server process dies now: every request it holds is dropped (see the module docstring)."""
        self.dead = True
        self.close()
        serving, self._serving = self._serving, {}
        for served in serving.values():
            served.dropped = True
            served.done.set()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None

    def _run(self) -> None:
        engine, clock = self.engine, self.clock
        while True:
            if engine.idle:
                self._wait_submit()
                continue
            result = engine.step(clock.now() - self.started_at)
            if not result.batch:  # nothing schedulable: the live loop waits for the next submit
                self._wait_submit()
                continue
            clock.sleep(result.cost_s)
            t = clock.now()
            for seq in result.emitted:
                served = self._serving.get(seq.seq_id)
                if served is not None:
                    served.token_times.append(t)
            for seq in result.finished:
                served = self._serving.pop(seq.seq_id, None)
                if served is not None:
                    served.done.set()

    def _wait_submit(self) -> None:
        self._submitted.clear()
        self._submitted.wait()


def unsupported(config: Config) -> list[str]:
    """What `config` asks for that a virtual run does not simulate (a run with any is refused)."""
    out = []
    if config.requests.sessions is not None:
        out.append("requests.sessions (multi-turn sessions)")
    if config.quality.cases and config.quality.sample_under_load > 0:
        out.append("quality.sample_under_load (quality cases under load)")
    return out


class EngineSender:
    """A worker's sender whose server is an `EngineServer` (see the module docstring)."""

    def __init__(self, config: Config, server: EngineServer, *, clock: Clock, base_dir: str = ".",
                 max_in_flight: int | None = None) -> None:
        self.config = config
        self.server = server
        #: vLLM's `max_num_queued_reqs`: a request past it is refused 503 (None: no limit)
        self.max_in_flight = max_in_flight
        self.clock = clock
        self.mix = RequestMix(config.requests, config.target, base_dir=base_dir,
                              tokens_per_word=config.requests.tokens_per_word)
        self.sessions = None

    def send(self, record: Record, job: Any, *, user: Any = None) -> None:
        """Fill `record` as a live request to the simulated server would (a kill: the engine drops it)."""
        a = job.arrival
        request = self.mix.build(record.request_id, a.index, job.seed, input_tokens=a.input_tokens,
                                 output_tokens=a.output_tokens, prefix_id=a.prefix_id, hash_ids=a.hash_ids)
        record.api = request.api
        record.planned_input_tokens = request.planned_input_tokens
        record.planned_output_tokens = request.planned_output_tokens
        record.prefix_id = request.prefix_id
        record.instance = self.config.target.url
        job.ready_at = self.clock.now()
        self.clock.wait_until(job.scheduled_at)
        record.sent_at = self.clock.now()
        if self.server.dead:  # a closed port: refused at connect
            refused = ConnectionRefusedError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))
            self._failed(record, classify_exception(refused, SendContext(stage="connect")))
            return
        n_in, n_out = int(request.planned_input_tokens or 1), int(request.planned_output_tokens or 1)
        if not self.server.fits(n_in, n_out):  # the sim answers 400: the prompt cannot fit its KV cache
            record.closed_at, record.http_status = record.sent_at, 400
            record.outcome, record.error = "http_error", "HTTP 400: the request does not fit the KV cache"
            return
        if self.max_in_flight is not None and self.server.in_flight >= self.max_in_flight:
            record.closed_at, record.http_status = record.sent_at, 503
            record.outcome = "rejected"
            record.error = (f"HTTP 503: The server is at capacity (max_num_queued_reqs={self.max_in_flight}): "
                            "too many requests in flight, please retry later.")
            return
        served = self.server.submit(n_in, n_out)
        try:
            served.done.wait()
        finally:
            if not served.done.is_set():
                self.server.abort(served)
        times = served.token_times
        if served.dropped:  # the server died mid-request: its socket closed under the stream
            record.http_status = 200
            record.token_times = list(times)
            if times:
                record.first_token_at = record.first_answer_at = times[0]
                record.last_token_at = times[-1]
            record.output_tokens = len(times)
            reset = ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))
            self._failed(record, classify_exception(reset, SendContext(answered=True, headers_status=200)))
            return
        record.http_status = 200
        record.token_times = list(times)
        record.first_token_at = record.first_answer_at = times[0]
        record.last_token_at = record.closed_at = times[-1]
        record.input_tokens, record.output_tokens = n_in, len(times)
        record.reasoning_tokens = 0
        record.finish_reason = "length"
        record.outcome = "ok"

    def _failed(self, record: Record, failure: Failure) -> None:
        record.closed_at = self.clock.now()
        record.outcome, record.error = failure.outcome, failure.message

    def planner(self) -> Any:
        raise RuntimeError("a virtual run has no sessions")

    def close(self) -> None:
        """Nothing to close: no connection was opened."""
