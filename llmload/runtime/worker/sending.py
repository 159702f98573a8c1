"""How a worker turns a job into a streamed request: the client library's mix, transport and `send`.

One `Sender` per worker process, built from the config in the step message (never from the
worker's own options). The request for arrival `index` of a step is built from the step's seed and
that index, so it is the same in every process and no two requests share text by accident; trace
arrivals fix their own sizes.

The user's hook: `Sender.send(record, job, user=...)` hands the user a `PlannedArrival` and sends what
its `build_request` returns (a `RequestSpec` or a `PreparedRequest`; the default is the mix's request,
`PlannedArrival.default_request()`), then gives it the answer (`on_result`). The hook runs where the mix
ran: after the user took the arrival off the queue, before the wait until `scheduled_at`, so the
timing is the same (a hook slower than the queue's lead shows as client wait and send lag, never as
TTFT). A hook that raises is the user's `client_error` record (nothing was sent); the worker goes on.

Sessions (`requests.sessions`, without a user hook): an arrival starts a session and sends its first
turn (`llmload.client.sessions`); the turn and its answer ride on the job, and the worker queues the next
turn after the think time (`WorkerRuntime.finish`). Quality cases are not sampled into sessions.
"""

from __future__ import annotations

import logging
import random
from typing import Any, cast

from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.core import send
from llmload.client.mix import RequestMix
from llmload.client.outcomes import SendContext, classify_exception, trim
from llmload.client.prompts import synthesize_words, words_for_tokens
from llmload.client.quality import case_request
from llmload.client.sessions import SessionPlanner
from llmload.client.spec import prepare_spec
from llmload.client.transport import Transport
from llmload.clocks import REAL_CLOCK, Clock
from llmload.config import Config
from llmload.records import Record

__all__ = ["PlannedArrival", "Sender", "build_sender", "preflight_send"]

#: the real clock, as the `Clock` it is (`llmload.clocks.Clock` declares `precise` a settable attribute,
#: `RealClock` a read-only property: mypy refuses the plain `REAL_CLOCK` as a `Clock` default)
_DEFAULT_CLOCK = cast(Clock, REAL_CLOCK)

log = logging.getLogger("llmload.worker")

class PlannedArrival:
    """What a user's `build_request` gets: one planned arrival of the run, and what the mix would send.

    `request_id`, `step` (label), `index` (the arrival's number in its step), `seed` (the
    step's), `scheduled_at` (wall seconds), `worker`, `prefix_id` (a trace's), `config` (the run's
    `Config`). `input_tokens` / `output_tokens`: the trace's sizes, else drawn from `requests.input_tokens`
    / `output_tokens`. `random`: the arrival's own `random.Random`. Both are seeded by the run's
    `requests.seed`, the step's seed and `index`: the same in every process and every run with that seed.
    """

    __slots__ = ("request_id", "step", "index", "seed", "scheduled_at", "worker", "prefix_id", "config",
                 "_sender", "_arrival", "_random", "_lengths")

    def __init__(self, sender: Sender, job: Any, request_id: str, worker: str) -> None:
        a = job.arrival
        self.request_id, self.step, self.index, self.seed = request_id, job.label, a.index, job.seed
        self.scheduled_at, self.worker, self.prefix_id = a.scheduled_at, worker, a.prefix_id
        self.config: Config = sender.config
        self._sender, self._arrival = sender, a
        self._random: random.Random | None = None
        self._lengths: tuple[int, int] | None = None

    @property
    def random(self) -> random.Random:
        """This arrival's own seeded generator (draw from it, never from the global one)."""
        if self._random is None:
            self._random = random.Random(f"llmload-user/{self.config.requests.seed}/{self.seed}/{self.index}")
        return self._random

    def _draw(self) -> tuple[int, int]:
        if self._lengths is None:  # their own generator: the same lengths whatever the hook drew before
            mix, rng = self._sender.mix, random.Random(f"llmload-user-lengths/{self.config.requests.seed}/"
                                                       f"{self.seed}/{self.index}")
            drawn = (mix.input_lengths.draw(rng), mix.output_lengths.draw(rng))
            self._lengths = (self._arrival.input_tokens or drawn[0], self._arrival.output_tokens or drawn[1])
        return self._lengths

    @property
    def input_tokens(self) -> int:
        """The planned prompt length (the trace's, else a draw from `requests.input_tokens`)."""
        return self._draw()[0]

    @property
    def output_tokens(self) -> int:
        """The planned output length (the trace's, else a draw from `requests.output_tokens`)."""
        return self._draw()[1]

    def text(self, n_tokens: int) -> str:
        """Synthesised words for about `n_tokens` prompt tokens (exactly that many by the sim's rule, or
        at the calibrated tokens per word), drawn from `random`: text no other arrival shares."""
        return synthesize_words(words_for_tokens(n_tokens, self._sender.mix.tokens_per_word), self.random)

    def default_request(self) -> PreparedRequest:
        """The request the config's mix builds for this arrival (what `LLMUser.build_request` returns)."""
        a = self._arrival
        return self._sender.mix.build(self.request_id, a.index, self.seed, input_tokens=a.input_tokens,
                                      output_tokens=a.output_tokens, prefix_id=a.prefix_id, hash_ids=a.hash_ids)

    def __repr__(self) -> str:
        return f"PlannedArrival({self.request_id!r}, step={self.step!r}, scheduled_at={self.scheduled_at:.3f})"


def _mix_user(user: Any) -> bool:
    """No user, or one whose `build_request` is the default (the config's mix): sessions apply."""
    return user is None or getattr(type(user).build_request, "default_mix", False)


class Sender:
    """Builds and sends the requests of one worker."""

    def __init__(self, config: Config, *, concurrency: int, seed: int, base_dir: str = ".",
                 clock: Clock = _DEFAULT_CLOCK) -> None:
        self.config = config
        #: when a request is released (`Clock.wait_until`) and its user was ready
        self.clock = clock
        self.transport = Transport.from_target(config.target, concurrency=concurrency, seed=seed,
                                               base_dir=base_dir)
        self.mix = RequestMix(config.requests, config.target, base_dir=base_dir,
                              tokens_per_word=config.requests.tokens_per_word)
        self._hook_errors: set[str] = set()
        #: multi-turn sessions (`requests.sessions`): each arrival starts one, the worker sends its turns
        self.sessions = SessionPlanner(config.requests, api=config.target.api, model=config.target.model,
                                       server=config.target.server, tokens_per_word=self.mix.tokens_per_word,
                                       base_dir=base_dir) if config.requests.sessions is not None else None
        self._recorded: SessionPlanner | None = None  # a conversation trace's sessions, made when needed

    def send(self, record: Record, job: Any, *, user: Any = None) -> None:
        """Fill `record` by sending `job` (server failures are data; a kill propagates as cancelled).

        A seeded fraction `quality.sample_under_load` of requests are quality cases instead, checked
        under load (a wrong answer is outcome `quality_fail`). Otherwise `user` (an `LLMUser`), when
        given, builds the request (`build_request`) and hears its result (`on_result`); without one,
        the mix builds it.
        """
        a = job.arrival
        session = job.session
        if session is None and a.session_turns is not None and _mix_user(user):  # a trace's session
            session = job.session = self.planner().start_recorded(
                record.request_id, a.index, job.seed, input_tokens=a.input_tokens, output_tokens=a.output_tokens,
                later=a.session_turns)
        elif session is None and self.sessions is not None and _mix_user(user):
            session = job.session = self.sessions.start(record.request_id, a.index, job.seed)
        case = self._sampled_case(job.seed, a.index) if session is None else None
        planned = built = None
        if session is not None:  # a session's turn: the whole conversation so far
            record.session_id, record.turn = session.session_id, session.turn
            request, expect = self.planner().request(session), None
        elif case is not None:
            request, expect = case_request(case, self.config.target, record.request_id), case.expect
        elif user is None:
            request, expect = self.mix.build(record.request_id, a.index, job.seed, input_tokens=a.input_tokens,
                                             output_tokens=a.output_tokens, prefix_id=a.prefix_id,
                                             hash_ids=a.hash_ids), None
        else:
            planned, expect = PlannedArrival(self, job, record.request_id, record.worker), None
            try:
                built = user.build_request(planned)
                request = self.prepare(built, record.request_id)
            except Exception as exc:  # the user's code: its failure is a client_error, nothing is sent
                self._hook_failed(record, user, "build_request", exc)
                return
        job.ready_at = self.clock.now()  # the worker learns its lead from this (worker.Lead)
        self.clock.wait_until(job.scheduled_at)  # the job is queued a little early (worker.Lead)
        result = send(self.transport, request, record, expect=expect)
        if session is not None:
            session.answer = result.text
            session.tool_called = record.finish_reason == "tool_calls"
        if planned is not None:
            try:
                user.on_result(planned, built, result)
            except Exception as exc:
                self._hook_failed(record, user, "on_result", exc)

    def planner(self) -> SessionPlanner:
        """The session planner: `requests.sessions`'s, else one for a trace's recorded sessions."""
        if self.sessions is not None:
            return self.sessions
        if self._recorded is None:
            self._recorded = SessionPlanner(self.config.requests, api=self.config.target.api,
                                            model=self.config.target.model, server=self.config.target.server,
                                            tokens_per_word=self.mix.tokens_per_word)
        return self._recorded

    def prepare(self, built: Any, request_id: str) -> PreparedRequest:
        """What a user's `build_request` returned, ready to send (ValueError / TypeError if it cannot be)."""
        if isinstance(built, PreparedRequest):
            if built.request_id != request_id or built.headers.get("X-Request-Id") != request_id:
                raise ValueError(f"a PreparedRequest from build_request must carry the arrival's request_id "
                                 f"{request_id!r}, not {built.request_id!r}")
            return built
        return prepare_spec(built, request_id, target=self.config.target, requests=self.config.requests,
                            chat=self.mix.chat)

    def _hook_failed(self, record: Record, user: Any, hook: str, exc: Exception) -> None:
        """A user's hook raised: the request's outcome is `client_error` (the generator's fault, never
        the server's), the message names the hook; the first traceback per hook is logged."""
        failure = classify_exception(exc, SendContext(generator=True))
        where = f"{type(user).__name__}.{hook}"
        if where not in self._hook_errors:
            self._hook_errors.add(where)
            log.error("%s raised (each such request is recorded client_error)", where, exc_info=exc)
        message = f"{where} raised {type(exc).__name__}: {exc}" if str(exc) else f"{where} raised {type(exc).__name__}"
        record.outcome, record.error = failure.outcome, trim(self.transport.credentials.redact(message))

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
                 base_dir: str = ".", clock: Clock = _DEFAULT_CLOCK) -> Sender:
    """The sender for a worker, from the config dict a step message carries."""
    cfg = Config.model_validate(config)
    cap = cfg.client.max_concurrency
    concurrency = max(1, -(-cap // shards)) if cap else 512
    from shapes.plan import closed_loop_levels

    levels = closed_loop_levels(cfg)
    if levels:
        concurrency = max(concurrency, -(-max(levels) // shards))
    return Sender(cfg, concurrency=concurrency, seed=seed + shard, base_dir=base_dir, clock=clock)


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
