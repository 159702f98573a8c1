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
request with 503 (`rejected`) while that many are in flight, as `llmload sim` does. The engine has the
sim's prefix cache (vLLM flavour, `enable_prefix_caching`, on by default): each request's prompt blocks
are hashed as `llmload sim` hashes them, from the body the live client would send
(`llmload.sim.prefix.request_block_hashes`, cut to the planned prompt tokens), so shared prefixes and
Mooncake `hash_ids` hit it as they would live; what hit shows where the live sim shows it (the
ground-truth log's `cached_tokens`, `vllm:prefix_cache_hits_total`), not in the records (vLLM's usage
has no `prompt_tokens_details` unless asked for, and the sim sends none).

What `llmload sim` tells besides its answers, the engine tells too, on the run's clock: its ground-truth
log (`llmload.sim.groundtruth`: one row per generation request, written as the request ends, its
`received_at`, `admitted_at` at the start of the step that first scheduled it, token times at step
ends, preemptions; a refusal's row with its status), and its pages (`page`): `/metrics` from the sim's
own metric objects (`llmload.sim.metrics`, fed as `SimServer` feeds them: each step, each finished
request), llama.cpp `/props` and `/slots`, Ollama `/api/ps` (`llmload.sim.info`), and the probe's other
pages. `llmload.runtime.virtual.telemetry` scrapes them as the live collector scrapes the sim.

`EngineServer.die()` is the server process dying (`run_virtual(during=...)` calls it at a virtual time):
what it was serving loses its connection mid-stream, and every later request meets a closed port; each
record says so as the live client's would (`llmload.client.outcomes.classify_exception` of the socket
error it would have read: `disconnect`, `connect_error`).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event

from llmload.client.core import COLD_LOAD_S
from llmload.client.mix import RequestMix
from llmload.client.outcomes import Failure, SendContext, classify_exception
from llmload.clocks import Clock
from llmload.config import Config
from llmload.records import Record
from llmload.sim.engine import Engine, StepResult
from llmload.sim.engine import Sequence as EngineSequence
from llmload.sim.groundtruth import GroundTruthRow, GroundTruthWriter
from llmload.sim.info import OLLAMA_VERSION, VLLM_VERSION, InfoPages
from llmload.sim.metrics import LlamaCppMetrics, VllmMetrics
from llmload.sim.prefix import request_block_hashes
from llmload.sim.settings import SimSettings
from llmload.sim.truth import engine_limits

__all__ = ["EngineSender", "EngineServer", "unsupported"]


@dataclass(slots=True, eq=False)
class Served:
    """One request inside the engine: its sequence, its ground-truth row (token times included), and when
    it is done."""

    seq: EngineSequence
    row: GroundTruthRow
    #: the output cap the request asked for (vLLM's `request_params_max_tokens`)
    max_tokens: int
    done: Event = field(default_factory=Event)
    #: the server died before it finished (`EngineServer.die`)
    dropped: bool = False

    @property
    def token_times(self) -> list[float]:
        return self.row.token_times


class EngineServer:
    """The engine of `llmload sim` stepped on a `Clock`, with its log and pages (see the module docstring).
    `truth`: where its ground-truth log goes (None: nowhere)."""

    def __init__(self, settings: SimSettings, clock: Clock, *, flavor: str = "vllm", model: str = "sim-model",
                 truth: GroundTruthWriter | None = None) -> None:
        self.settings, self.flavor, self.model = settings, flavor, model
        #: `llmload sim`'s engine, its prefix cache included (vLLM flavour, `enable_prefix_caching`)
        self.engine = Engine(engine_limits(settings, flavor, prefix_caching=True))
        self.clock = clock
        self.started_at = clock.now()
        self.truth = truth or GroundTruthWriter(None)
        self.info = InfoPages(model=model, settings=settings, started_at=self.started_at)
        self.vllm_metrics = (VllmMetrics(model, self.info.vllm_cache_info(), settings.max_model_len)
                             if flavor == "vllm" else None)
        self.llama_metrics = LlamaCppMetrics(self.info.slot_ctx) if flavor == "llamacpp" else None
        #: Ollama: when the model unloads after the last request (None: in use, or never loaded)
        self.expires_at: float | None = None
        self.loaded = False
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

    @property
    def prefix_caching(self) -> bool:
        """Whether the engine has a prefix cache (then `submit` wants each prompt's block hashes)."""
        return self.engine.cache is not None

    def submit(self, prompt_tokens: int, output_tokens: int, *, request_id: str = "", endpoint: str = "",
               block_hashes: tuple[int, ...] = ()) -> Served:
        """Queue one request (it must fit the KV cache: `fits`), received now. `block_hashes`: its prompt's
        (`llmload.sim.prefix.request_block_hashes`), for the prefix cache."""
        self._ids += 1
        row = GroundTruthRow(request_id=request_id or f"virtual-{self._ids}", flavor=self.flavor,
                             endpoint=endpoint, received_at=self.clock.now(), input_tokens=prompt_tokens)
        served = Served(EngineSequence(seq_id=self._ids, prompt_tokens=prompt_tokens,
                                       output_tokens=max(1, output_tokens), block_hashes=block_hashes),
                        row, max_tokens=max(1, output_tokens))
        self.engine.add(served.seq)
        self._serving[served.seq.seq_id] = served
        self.loaded, self.expires_at = True, None
        self._submitted.set()
        if self._loop is None:
            self._loop = gevent.spawn(self._run)
        return served

    def refuse(self, status: int, outcome: str, *, request_id: str, endpoint: str, input_tokens: int) -> None:
        """A request answered with an error before the engine (its row, as the sim's `reject` writes it)."""
        t = self.clock.now()
        if status == 503 and self.vllm_metrics is not None:
            self.vllm_metrics.rejections.inc()
        self.truth.write(GroundTruthRow(request_id=request_id, flavor=self.flavor, endpoint=endpoint, received_at=t,
                                        finished_at=t, input_tokens=input_tokens, outcome=outcome,
                                        http_status=status))

    def abort(self, served: Served) -> None:
        """The client went away (a cancel): the engine drops the request and frees its blocks."""
        if self._serving.pop(served.seq.seq_id, None) is not None:
            self.engine.abort(served.seq)
            self._end(served, "client_gone")

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

    def page(self, path: str) -> Any:
        """What the simulated server answers a GET of `path` with, as `llmload sim` answers it: a JSON
        body, `/metrics` text; None where the flavour has no such page (a 404) or the server is dead."""
        if self.dead:
            return None
        info, vllm, llama = self.info, self.vllm_metrics, self.llama_metrics
        pages: dict[str, Callable[[], Any]]
        if vllm is not None:
            pages = {"/version": lambda: {"version": VLLM_VERSION}, "/v1/models": info.vllm_models,
                     "/metrics": _text(vllm.render)}
        elif llama is not None:
            pages = {"/props": info.llamacpp_props, "/v1/models": info.llamacpp_models,
                     "/metrics": _text(llama.render), "/slots": self._slots}
        elif self.flavor == "ollama":
            pages = {"/api/version": lambda: {"version": OLLAMA_VERSION}, "/api/ps": self._ps,
                     "/api/show": info.ollama_show}
        else:
            pages = {}
        page = pages.get(path)
        return None if page is None else page()

    def _slots(self) -> list[dict]:
        return self.info.llamacpp_slots([(s.seq_id, s.generated, self._max_tokens(s.seq_id), s.prompt_tokens)
                                         for s in self.engine.running])

    def _max_tokens(self, seq_id: int) -> int:
        served = self._serving.get(seq_id)
        return served.max_tokens if served is not None else -1

    def _ps(self) -> dict:
        """Ollama's loaded model: loaded by the first request, unloaded `keep_alive_s` after the last."""
        now, expires = self.clock.now(), self.expires_at
        if expires is not None and now >= expires and not self._serving:
            self.loaded, self.expires_at = False, None
        return self.info.ollama_ps(loaded=self.loaded, expires_at=self.expires_at)

    def _run(self) -> None:
        engine, clock = self.engine, self.clock
        while True:
            if engine.idle:
                self._wait_submit()
                continue
            start = clock.now()
            result = engine.step(start - self.started_at)
            for seq in result.admitted:
                served = self._serving.get(seq.seq_id)
                if served is not None:
                    served.row.admitted_at = max(start, served.row.received_at)
            if not result.batch:  # nothing schedulable: the live loop waits for the next submit
                self._on_step(result)
                self._wait_submit()
                continue
            clock.sleep(result.cost_s)
            t = clock.now()
            for seq in result.emitted:
                served = self._serving.get(seq.seq_id)
                if served is not None:
                    row = served.row
                    if row.first_token_at is None:
                        row.first_token_at = row.first_answer_at = t
                    row.token_times.append(t)
                    row.planned_times.append(t)
            for seq in result.finished:
                served = self._serving.pop(seq.seq_id, None)
                if served is not None:
                    self._end(served, "ok")
                    served.done.set()
            self._on_step(result)

    def _end(self, served: Served, outcome: str) -> None:
        """The request ends: its row written, the metrics of a finished request counted (`SimServer._on_done`)."""
        row, seq = served.row, served.seq
        row.outcome, row.finished_at = outcome, self.clock.now()
        row.output_tokens = len(row.token_times)
        row.preemptions, row.cached_tokens = seq.preemptions, max(0, seq.cached_tokens)
        self.truth.write(row)
        if not self._serving and self.flavor == "ollama":
            self.expires_at = row.finished_at + self.settings.keep_alive_s
        times, end = row.token_times, row.finished_at
        if self.vllm_metrics is not None and outcome != "client_gone":
            self.vllm_metrics.on_finish(
                queue_s=None if row.admitted_at is None else row.admitted_at - row.received_at,
                e2e_s=end - row.received_at,
                ttft_s=None if row.first_token_at is None else row.first_token_at - row.received_at,
                token_gaps_s=[b - a for a, b in zip(times[:-1], times[1:], strict=True)],
                reason="length" if outcome == "ok" else "abort")
            if row.admitted_at is not None and row.first_token_at is not None:
                last = times[-1] if times else row.first_token_at
                self.vllm_metrics.on_request(
                    prompt_tokens=row.input_tokens, output_tokens=row.output_tokens, max_tokens=served.max_tokens,
                    prefill_s=row.first_token_at - row.admitted_at, decode_s=last - row.first_token_at,
                    inference_s=last - row.admitted_at)
        if self.llama_metrics is not None and row.first_token_at is not None:
            self.llama_metrics.on_finish(
                prompt_n=row.input_tokens, prompt_s=row.first_token_at - (row.admitted_at or row.first_token_at),
                predicted_n=len(times), predicted_s=(times[-1] if times else row.first_token_at) - row.first_token_at)

    def _on_step(self, step: StepResult) -> None:
        metrics = self.vllm_metrics or self.llama_metrics
        if metrics is not None:
            metrics.on_step(step, running=len(self.engine.running), waiting=len(self.engine.waiting),
                            kv_usage=self.engine.kv_usage)

    def _wait_submit(self) -> None:
        self._submitted.clear()
        self._submitted.wait()


def _text(render: Callable[[], bytes]) -> Callable[[], str]:
    """A page rendered as bytes (`/metrics`), read as the text a scrape decodes."""
    return lambda: render().decode()


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
        rid, path = record.request_id, request.path
        if not self.server.fits(n_in, n_out):  # the sim answers 400: the prompt cannot fit its KV cache
            self.server.refuse(400, "http_error", request_id=rid, endpoint=path, input_tokens=n_in)
            record.closed_at, record.http_status = record.sent_at, 400
            record.outcome, record.error = "http_error", "HTTP 400: the request does not fit the KV cache"
            return
        if self.max_in_flight is not None and self.server.in_flight >= self.max_in_flight:
            self.server.refuse(503, "rejected", request_id=rid, endpoint=path, input_tokens=n_in)
            record.closed_at, record.http_status = record.sent_at, 503
            record.outcome = "rejected"
            record.error = (f"HTTP 503: The server is at capacity (max_num_queued_reqs={self.max_in_flight}): "
                            "too many requests in flight, please retry later.")
            return
        hashes: tuple[int, ...] = ()
        if self.server.prefix_caching:  # the blocks `llmload sim` hashes, from the body it would be sent
            body = json.loads(request.body)
            hashes = request_block_hashes(body, body.get("messages") if self.mix.chat else None, n_in,
                                          self.server.engine.limits.block_size)
        served = self.server.submit(n_in, n_out, request_id=rid, endpoint=path, block_hashes=hashes)
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
        _server_timings(record, served.row, self.server.flavor)

    def _failed(self, record: Record, failure: Failure) -> None:
        record.closed_at = self.clock.now()
        record.outcome, record.error = failure.outcome, failure.message

    def planner(self) -> Any:
        raise RuntimeError("a virtual run has no sessions")

    def close(self) -> None:
        """Nothing to close: no connection was opened."""


def _server_timings(record: Record, row: GroundTruthRow, flavor: str) -> None:
    """The timings the sim's answer carries, as the live client reads them (`llmload.client.core._count`):
    llama.cpp's `timings` (`prompt_ms`: first token - admitted; `predicted_ms`: last - first token), Ollama's
    integer-nanosecond durations (`llmload.sim.wire.Exchange.ollama_durations`; no model load simulated)."""
    first, last = row.first_token_at, row.token_times[-1] if row.token_times else None
    if first is None or last is None:
        return
    admitted = row.admitted_at if row.admitted_at is not None else first
    if flavor == "llamacpp":
        record.server_prompt_s, record.server_decode_s = (first - admitted), (last - first)
    elif flavor == "ollama":
        finished = row.finished_at if row.finished_at is not None else last
        ns = [int(x * 1e9) * 1e-9 for x in (finished - row.received_at, 0.0, first - admitted, last - first)]
        record.server_total_s, record.server_load_s, record.server_prompt_s, record.server_decode_s = ns
        record.cold = record.server_load_s > COLD_LOAD_S
        record.server_queue_s = max(0.0, ns[0] - ns[1] - ns[2] - ns[3])
