"""`llmload sim`: the HTTP face of the simulated server, one flavour per process.

`serve()` validates the flavour and the sim YAML, builds the engine for the flavour (vLLM: `max_num_seqs`
sequences; Ollama and llama.cpp: `num_parallel` slots, the rest waiting / deferred), binds (127.0.0.1 by
default), prints one line and serves until SIGTERM / SIGINT. `SimServer.handle` routes requests;
generation requests pass admission (faults, queue limits, context checks), join the engine loop and
stream until their sequence ends. Every request id comes from `X-Request-Id` (vLLM echoes it) or is
made up, and lands in the ground-truth log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import sys
import uuid
from pathlib import Path
from typing import TypeVar

from llmload.client.lengths import LengthSampler
from llmload.clock import now
from llmload.errors import ConfigError, ServerError
from llmload.sim.engine import Engine, EngineLimits, Sequence, StepResult
from llmload.sim.faults import draw_request
from llmload.sim.groundtruth import GroundTruthRow, GroundTruthWriter
from llmload.sim.http import Connection, Request, start_http_server
from llmload.sim.info import OLLAMA_VERSION, VLLM_VERSION, InfoPages, token_ids
from llmload.sim.loop import EngineLoop, Job, error_body
from llmload.sim.metrics import LlamaCppMetrics, VllmMetrics, content_type
from llmload.sim.params import (
    EMBEDDINGS,
    ParamRefusal,
    check_model,
    check_params,
    embeddings_refusal,
    sglang_as_common,
    stop_strings,
)
from llmload.sim.prefix import request_block_hashes
from llmload.sim.residency import ModelResidency, QueueFull, is_load_only, load_only_answer
from llmload.sim.settings import FLAVORS, SimSettings, load_sim_settings
from llmload.sim.text import AnswerText, chat_prompt_tokens, prompt_text, prompt_tokens
from llmload.sim.wire import Exchange, renderer_for
from llmload.units import parse_duration

__all__ = ["SimServer", "serve"]

_GENERATE = {
    "vllm": {"/v1/chat/completions": "chat", "/v1/completions": "completions"},
    "ollama": {"/api/chat": "ollama_chat", "/api/generate": "ollama_generate",
               "/v1/chat/completions": "chat", "/v1/completions": "completions"},
    "llamacpp": {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/completions": "completions",
                 "/completions": "completions", "/completion": "llamacpp_completion"},
    "sglang": {"/generate": "sglang_generate", "/v1/chat/completions": "chat", "/v1/completions": "completions"},
}
_LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


class _Refusal(Exception):
    """A request the server answers with an error before it reaches the engine."""

    def __init__(self, status: int, message: str, *, input_tokens: int = 0, body: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.input_tokens, self.body = status, message, input_tokens, body


class SimServer:
    """One simulated server: engine, loop, metrics, residency and the request handler."""

    def __init__(self, *, flavor: str, settings: SimSettings, seed: int, model: str,
                 ground_truth: GroundTruthWriter) -> None:
        self.flavor, self.settings, self.seed, self.model = flavor, settings, seed, model
        self.gt = ground_truth
        s = settings
        slots = s.max_num_seqs if flavor in ("vllm", "sglang") else s.num_parallel
        self.engine = Engine(EngineLimits(
            max_num_seqs=slots, max_num_batched_tokens=s.max_num_batched_tokens, num_blocks=s.num_blocks,
            block_size=s.block_size, step_base_s=s.step_base_s, prefill_cost_s=s.prefill_cost_s,
            decode_cost_s=s.decode_cost_s, step_cost_growth_s_per_min=s.step_cost_growth_s_per_min,
            kv_leak_blocks_per_min=s.kv_leak_blocks_per_min,
            enable_prefix_caching=flavor == "vllm" and s.enable_prefix_caching,
            prompt_tail_tokens=s.prompt_tail_tokens if flavor == "llamacpp" else 0,
            decode_step_s=tuple(s.decode_step_s or ())))
        self.loop = EngineLoop(self.engine, self._on_step)
        self.started_at = now()
        self.ready_at = self.started_at + (s.load_time_s if flavor == "llamacpp" else 0.0)
        self.info = InfoPages(model=model, settings=s, started_at=self.started_at)
        self.vllm_metrics = VllmMetrics(model, self.info.vllm_cache_info(), s.max_model_len) if flavor == "vllm" else None
        self.llama_metrics = LlamaCppMetrics(self.info.slot_ctx) if flavor == "llamacpp" else None
        self.residency = ModelResidency(load_time_s=s.load_time_s, keep_alive_s=s.keep_alive_s,
                                        max_queue=s.max_queue) if flavor == "ollama" else None
        self.reasoning = LengthSampler.from_dist(s.reasoning_tokens) if s.reasoning_tokens is not None else None
        self.arrivals = 0
        self.listening_at = self.started_at  # reset when the socket is bound; fault windows count from it
        self.in_flight = 0

    # ------------------------------------------------------------ routing
    async def handle(self, req: Request, conn: Connection) -> None:
        rid = req.headers.get("x-request-id") or uuid.uuid4().hex
        echo = {"x-request-id": rid} if self.flavor == "vllm" else {}
        kind = _GENERATE[self.flavor].get(req.path)
        if self.flavor == "llamacpp" and now() < self.ready_at:
            conn.send(503, _LOADING, headers=echo)
            return
        if kind is not None:
            if req.method == "POST":
                await self._generate(req, conn, kind, rid, echo)
            else:
                conn.send(405, _not_found(self.flavor, 405), headers=echo)
            return
        if req.path in EMBEDDINGS.get(self.flavor, ()) and req.method == "POST":
            conn.send(501, embeddings_refusal(self.flavor, req.path), headers=echo)
            return
        status, body, ctype = self._info(req)
        conn.send(status, body, content_type=ctype, headers=echo)

    def _info(self, req: Request) -> tuple[int, object, str]:
        json_type, flavor, path, info = "application/json", self.flavor, req.path, self.info
        if req.method not in ("GET", "HEAD", "POST"):
            return 405, _not_found(flavor, 405), json_type
        if flavor == "vllm":
            pages = {"/health": lambda: b"", "/version": lambda: {"version": VLLM_VERSION},
                     "/v1/models": info.vllm_models, "/metrics": _made(self.vllm_metrics, "vLLM metrics").render}
            if path == "/tokenize" and req.method == "POST":
                return self._json_call(req, info.vllm_tokenize)
        elif flavor == "sglang":  # entrypoints/http_server.py; /metrics only with --enable-metrics
            pages = {"/health": lambda: b"", "/health_generate": lambda: b"",
                     "/get_model_info": info.sglang_model_info, "/v1/models": info.sglang_models}
            if path == "/tokenize" and req.method == "POST":
                return self._json_call(req, info.sglang_tokenize)
        elif flavor == "ollama":
            r = _made(self.residency, "model residency")
            pages = {"/": lambda: b"Ollama is running", "/api/version": lambda: {"version": OLLAMA_VERSION},
                     "/api/tags": info.ollama_tags, "/v1/models": lambda: {"object": "list", "data": [
                         {"id": self.model, "object": "model", "created": int(self.started_at),
                          "owned_by": "library"}]},
                     "/api/ps": lambda: info.ollama_ps(loaded=r.state != "unloaded", expires_at=r.expires_at),
                     "/api/show": info.ollama_show}
            if path in ("/api/pull", "/api/copy") and req.method == "POST":
                fn = info.ollama_pull if path == "/api/pull" else info.ollama_copy
                try:
                    body = req.json()
                except ValueError:
                    body = None
                return fn(body) if isinstance(body, dict) else (400, {"error": "missing request body"}, json_type)
        else:
            pages = {"/health": lambda: {"status": "ok"}, "/props": info.llamacpp_props,
                     "/v1/models": info.llamacpp_models, "/models": info.llamacpp_models,
                     "/metrics": _made(self.llama_metrics, "llama.cpp metrics").render,
                     "/slots": lambda: info.llamacpp_slots(
                         [(s.seq_id, s.generated, self._n_predict(s.seq_id), s.prompt_tokens)
                          for s in self.engine.running])}
            if path == "/tokenize" and req.method == "POST":
                return self._json_call(req, lambda b: {"tokens": token_ids(str(b.get("content", "")))})
        page = pages.get(path)
        if page is None:
            body = _not_found(flavor, 404)
            return 404, body, "text/plain; charset=utf-8" if isinstance(body, bytes) else json_type
        body = page()
        if path == "/metrics":
            return 200, body, content_type()
        if path == "/" and flavor == "ollama":
            return 200, body, "text/plain; charset=utf-8"
        return 200, body, json_type

    def _n_predict(self, seq_id: int) -> int:
        job = self.loop.jobs.get(seq_id)
        return job.ex.n_predict if job is not None else -1

    def _json_call(self, req: Request, fn) -> tuple[int, object, str]:
        try:
            body = req.json()
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            return 400, error_body(self.flavor, "", f"invalid JSON body: {exc}", 400), "application/json"
        return 200, fn(body), "application/json"

    # ------------------------------------------------------------ generation
    async def _generate(self, req: Request, conn: Connection, kind: str, rid: str, echo: dict) -> None:
        flavor, s = self.flavor, self.settings
        row = GroundTruthRow(request_id=rid, flavor=flavor, endpoint=req.path, received_at=now())
        index = self.arrivals
        self.arrivals += 1

        def reject(status: int, message: str, outcome: str, body: dict | None = None) -> None:
            row.http_status, row.outcome, row.finished_at = status, outcome, now()
            self.gt.write(row)  # before the answer: the row is on disk when the client sees the end
            conn.send(status, body or error_body(flavor, kind, message, status), headers=echo)

        try:
            body, n_prompt, max_tokens, eos_at = self._parse(req, kind)  # a /generate body already common
        except _Refusal as refusal:
            row.input_tokens = refusal.input_tokens
            if kind == "sglang_generate" and refusal.status == 400 and _streamed(req):
                self._stream_refusal(conn, row, refusal.message, echo)
            else:
                reject(refusal.status, refusal.message, "http_error", refusal.body)
            return
        row.input_tokens = n_prompt
        opts = _object(body, "options")
        ignore_eos = bool(body.get("ignore_eos") or opts.get("ignore_eos"))
        messages = body.get("messages") if kind in ("chat", "ollama_chat") else None
        draws = draw_request(self.seed, index, s.faults.at(now() - self.listening_at), max_tokens=max_tokens,
                             eos_probability=s.eos_probability, ignore_eos=ignore_eos, eos_at=eos_at)
        if s.faults.slow_headers_s > 0:
            await asyncio.sleep(s.faults.slow_headers_s)
        if draws.error in ("http_429", "http_503", "http_500"):
            status = int(draws.error[-3:])
            message = {429: "Too many requests: rate limit exceeded, please retry later",
                       503: "Service temporarily unavailable: the server is overloaded",
                       500: "Internal server error: the engine raised an unexpected exception"}[status]
            reject(status, message, "http_error" if status == 500 else "rejected")
            return
        if flavor == "vllm" and s.max_num_queued_reqs is not None and self.in_flight >= s.max_num_queued_reqs:
            _made(self.vllm_metrics, "vLLM metrics").rejections.inc()
            reject(503, f"The server is at capacity (max_num_queued_reqs={s.max_num_queued_reqs}): "
                   "too many requests in flight, please retry later.", "rejected")
            return
        load_s = 0.0
        keep_alive = body.get("keep_alive")
        if self.residency is not None:
            try:
                load_s = await self.residency.acquire()
            except QueueFull as exc:
                reject(503, str(exc), "rejected")
                return
            if is_load_only(body, kind):
                self._load_only(body, kind, row, conn, load_s, keep_alive)
                return
        stream = bool(body.get("stream", kind.startswith("ollama")))
        stream_opts = _object(body, "stream_options")
        include_usage = bool(stream_opts.get("include_usage"))
        model = (body.get("model") or self.model) if flavor == "ollama" else self.model
        answer = AnswerText(prompt_text(body.get("prompt"), messages), index)
        stops = stop_strings(body, kind)
        stopped = answer.stop_at(stops, draws.output_tokens) if stops else None
        if stopped is not None:  # the stop string ends the answer: finish_reason "stop"
            draws = dataclasses.replace(draws, output_tokens=stopped[0], eos=True)
        ex = Exchange(flavor=flavor, kind=kind, model=model,
                      completion_id=("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex,
                      prompt_tokens=n_prompt, answer=answer,
                      stream=stream, include_usage=include_usage,
                      continuous_usage=include_usage and bool(stream_opts.get("continuous_usage_stats")),
                      received_at=row.received_at, load_s=load_s)
        row.load_s = load_s
        ex.stop_reason = stopped[1] if stopped is not None else None
        ex.n_predict = max_tokens if eos_at is None else -1
        ex.reasoning = self._reasoning_tokens(body, kind, index, draws.output_tokens)
        ex.sent_planned = draws.output_tokens
        ex.tool = _called_tool(body) if kind == "chat" else None
        if conn.closed:  # the client left while its request waited for the model or the headers
            if self.residency is not None:
                self.residency.release()
            row.outcome, row.finished_at = "client_gone", now()
            self.gt.write(row)
            return
        seq = Sequence(seq_id=index, prompt_tokens=n_prompt, output_tokens=draws.output_tokens,
                       block_hashes=self._block_hashes(body, messages, n_prompt))
        job = Job(conn=conn, renderer=renderer_for(kind), ex=ex, draws=draws, seq=seq, row=row,
                  stall_s=s.faults.stall_s, headers=echo, defer_headers=flavor == "ollama",
                  on_done=lambda j, outcome: self._on_done(j, outcome, keep_alive))
        self.in_flight += 1
        def gone() -> None:
            job.end(self.engine, "client_gone")

        conn.on_close.append(gone)
        if stream and flavor != "ollama":
            job.send_headers()
        self.loop.submit(job)
        try:
            await job.done
        finally:  # a keep-alive connection serves many requests: each ended one must not stay held by it
            with contextlib.suppress(ValueError):
                conn.on_close.remove(gone)

    def _parse(self, req: Request, kind: str) -> tuple[dict, int, int, int | None]:
        """Body, prompt tokens, output cap and (no cap asked) where EOS comes, of a generation request,
        with each server's context rules (vLLM: 400 past `max_model_len`, cap max_tokens; llama.cpp: 400
        past the slot context; Ollama: truncate to the context). Without an output cap the real servers
        generate to EOS or the context limit: the cap is the context left and the model stops by itself
        after `default_max_tokens` (unless `ignore_eos`). Raises _Refusal for a request the server would
        refuse."""
        flavor, s = self.flavor, self.settings
        try:
            body = req.json()
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            raise _Refusal(500 if flavor == "llamacpp" else 400, f"invalid JSON body: {exc}") from None
        try:
            check_model(flavor, body, self.model)
            check_params(flavor, kind, body, self.model, thinking=s.reasoning_tokens is not None)
        except ParamRefusal as exc:
            raise _Refusal(exc.status, exc.message, body=exc.body) from None
        if kind == "sglang_generate":
            body = sglang_as_common(body)
        opts = _object(body, "options")
        messages = body.get("messages") if kind in ("chat", "ollama_chat") else None
        if messages is not None and not isinstance(messages, list):
            raise _Refusal(400, "messages must be a list")
        n_prompt = chat_prompt_tokens(messages) if messages is not None else prompt_tokens(body.get("prompt", ""))
        requested = (opts.get("num_predict") if kind.startswith("ollama") else
                     body.get("n_predict") if kind == "llamacpp_completion" else None)
        if requested is None:
            requested = body.get("max_completion_tokens") or body.get("max_tokens")
        cap = requested if isinstance(requested, int) and requested > 0 else None
        max_tokens = cap if cap is not None else 1 << 62
        eos_at = None if cap is not None else s.default_max_tokens
        if flavor in ("vllm", "sglang"):  # SGLang: its own wording, the same rule (see docs/SIM.md)
            if n_prompt >= s.max_model_len and flavor == "sglang":
                raise _Refusal(400, f"The input ({n_prompt} tokens) is longer than the model's context length "
                               f"({s.max_model_len} tokens).", input_tokens=n_prompt)
            if n_prompt >= s.max_model_len:
                raise _Refusal(400, f"This model's maximum context length is {s.max_model_len} tokens. However, "
                               f"your request has {n_prompt} input tokens. Please reduce the length of the input "
                               "messages.", input_tokens=n_prompt)
            max_tokens = min(max_tokens, s.max_model_len - n_prompt)
        elif flavor == "llamacpp":
            n_ctx = self.info.slot_ctx
            if n_prompt >= n_ctx:
                raise _Refusal(400, "", input_tokens=n_prompt, body={"error": {
                    "code": 400, "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error", "n_prompt_tokens": n_prompt, "n_ctx": n_ctx}})
            max_tokens = min(max_tokens, n_ctx - n_prompt)
        else:  # Ollama: the prompt is cut to the context; context shift lets generation go on past it,
            # up to 10 x num_ctx (llm/server.go Completion caps num_predict -1 or larger there)
            n_prompt = min(n_prompt, s.ctx_size - 1)
            max_tokens = min(max_tokens, 10 * s.ctx_size)
        capacity = self.engine.limits.num_blocks * self.engine.limits.block_size
        if n_prompt + 1 > capacity:
            raise _Refusal(400, f"prompt of {n_prompt} tokens does not fit the KV cache ({capacity} tokens)",
                           input_tokens=n_prompt)
        return body, n_prompt, max(1, min(max_tokens, capacity - n_prompt)), eos_at

    def _stream_refusal(self, conn: Connection, row: GroundTruthRow, message: str, echo: dict) -> None:
        """SGLang validates a `/generate` request inside its stream generator: the ValueError becomes a
        200 stream of one `{"error": {"message": ...}}` event and `[DONE]` (http_server.py)."""
        row.http_status, row.outcome, row.finished_at = 200, "http_error", now()
        self.gt.write(row)
        renderer = renderer_for("sglang_generate")
        conn.start_stream(200, renderer.content_type, echo)
        conn.write_event(renderer.sse({"error": {"message": message}}))
        conn.write_event(renderer.done)
        conn.end_stream()

    def _load_only(self, body: dict, kind: str, row: GroundTruthRow, conn: Connection, load_s: float,
                   keep_alive: object) -> None:
        """Ollama's load / unload idiom: see `residency.load_only_answer`."""
        unload, out = load_only_answer(body, kind, self.model)
        row.load_s, row.finished_at = load_s, now()
        self.gt.write(row)
        _made(self.residency, "model residency").release(0.0 if unload else self._keep_alive_s(keep_alive))
        conn.send(200, out)

    def _keep_alive_s(self, keep_alive: object) -> float | None:
        try:
            negative = isinstance(keep_alive, (int, float)) and keep_alive < 0
            return -1.0 if negative else parse_duration(keep_alive) if keep_alive is not None else None
        except ValueError:
            return None

    def _reasoning_tokens(self, body: dict, kind: str, index: int, output_tokens: int) -> int:
        """How many of a chat answer's first tokens are reasoning (the sim's `reasoning_tokens`, drawn
        from the request's own generator; none when the request turns thinking off)."""
        if self.reasoning is None or kind not in ("chat", "ollama_chat", "ollama_generate"):
            return 0
        if body.get("think") in (False, "false") or body.get("reasoning_effort") == "none":
            return 0
        drawn = self.reasoning.draw(random.Random(f"llmload-sim/{self.seed}/{index}/reasoning"))
        return min(drawn, output_tokens)

    def _block_hashes(self, body: dict, messages: list | None, n_prompt: int) -> tuple[int, ...]:
        """The prompt's full-block hashes for the prefix cache (vLLM flavour with caching on)."""
        if self.engine.cache is None:
            return ()
        return request_block_hashes(body, messages, n_prompt, self.engine.limits.block_size)

    def _on_done(self, job: Job, outcome: str, keep_alive: object) -> None:
        self.in_flight -= 1
        self.loop.release(job)
        row, ex = job.row, job.ex
        self.gt.write(row)
        if self.residency is not None:
            self.residency.release(self._keep_alive_s(keep_alive))
        end = row.finished_at or now()
        if self.vllm_metrics is not None and outcome not in ("client_gone",):
            times = row.token_times
            self.vllm_metrics.on_finish(
                queue_s=None if row.admitted_at is None else row.admitted_at - row.received_at,
                e2e_s=end - row.received_at,
                ttft_s=None if row.first_token_at is None else row.first_token_at - row.received_at,
                token_gaps_s=[b - a for a, b in zip(times[:-1], times[1:], strict=True)],
                reason=job.reason if outcome in ("ok", "stall", "malformed") else "abort")
            if row.admitted_at is not None and row.first_token_at is not None:
                last = times[-1] if times else row.first_token_at
                self.vllm_metrics.on_request(
                    prompt_tokens=row.input_tokens, output_tokens=row.output_tokens,
                    max_tokens=job.draws.max_tokens, prefill_s=row.first_token_at - row.admitted_at,
                    decode_s=last - row.first_token_at, inference_s=last - row.admitted_at)
        if self.llama_metrics is not None and ex.first_token_at is not None:
            self.llama_metrics.on_finish(
                prompt_n=ex.prompt_tokens, prompt_s=ex.first_token_at - (ex.admitted_at or ex.first_token_at),
                predicted_n=ex.sent, predicted_s=(ex.last_token_at or ex.first_token_at) - ex.first_token_at)

    def _on_step(self, step: StepResult) -> None:
        metrics = self.vllm_metrics or self.llama_metrics
        if metrics is not None:
            metrics.on_step(step, running=len(self.engine.running), waiting=len(self.engine.waiting),
                            kv_usage=self.engine.kv_usage)


_PartT = TypeVar("_PartT")


def _made(part: _PartT | None, what: str) -> _PartT:
    """A flavour's own part (its metrics, Ollama's model residency), made in `SimServer.__init__` for
    that flavour and only read on that flavour's paths."""
    if part is None:
        raise RuntimeError(f"this flavour's simulated server has no {what}")
    return part


def _object(body: dict, key: str) -> dict:
    """`body[key]` when it is a JSON object, else an empty one (absent, or a value of another type)."""
    value = body.get(key)
    return value if isinstance(value, dict) else {}


def _not_found(flavor: str, status: int) -> object:
    """Unknown route (404) or wrong method (405), as FastAPI (vLLM), Gin (Ollama), llama.cpp answer."""
    text = "Not Found" if status == 404 else "Method Not Allowed"
    if flavor in ("vllm", "sglang"):  # FastAPI
        return {"detail": text}
    if flavor == "ollama":
        return b"404 page not found" if status == 404 else b"405 method not allowed"
    return {"error": {"code": status, "message": "File Not Found" if status == 404 else text,
                      "type": "not_found_error" if status == 404 else "invalid_request_error"}}


def _streamed(req: Request) -> bool:
    try:
        body = req.json()
    except ValueError:
        return False
    return isinstance(body, dict) and bool(body.get("stream"))


def _banner(flavor: str, host: str, port: int) -> str:
    scope = "loopback only" if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.") \
        else "all interfaces"
    shown = f"[{host}]" if ":" in host else host
    return f"llmload sim ({flavor}) listening on http://{shown}:{port} ({scope})"


async def _main(server: SimServer, host: str, port: int, reuse_port: bool = False) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if server.flavor in ("vllm", "sglang") and server.settings.load_time_s > 0:
        await asyncio.sleep(server.settings.load_time_s)  # vLLM, SGLang listen once the model is loaded
    try:
        http = await start_http_server(server.handle, host, port, reuse_port=reuse_port)
    except OSError as exc:
        raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    server.listening_at = now()
    real_port = http.sockets[0].getsockname()[1]
    print(_banner(server.flavor, host, real_port), flush=True)
    engine_task = loop.create_task(server.loop.run())
    exit_after = server.settings.faults.exit_after_s
    if exit_after is not None:
        def _exit() -> None:
            server.gt.close()
            print(f"llmload sim: exit_after_s={exit_after} reached, exiting", file=sys.stderr, flush=True)
            os._exit(1)

        loop.call_later(exit_after, _exit)
    await stop.wait()
    http.close()
    engine_task.cancel()


def serve(*, flavor: str, host: str, port: int, seed: int, config_path: Path | None,
          ground_truth_path: Path | None, model: str, reuse_port: bool = False) -> None:
    """Run the simulated server until SIGTERM / SIGINT (see the package docstring). With `reuse_port`, other
    sims may listen on the same port (SO_REUSEPORT; each process has its own engine and ground truth)."""
    if flavor not in FLAVORS:
        raise ConfigError(f'unknown flavor "{flavor}", expected one of {", ".join(FLAVORS)}', key="--flavor")
    settings = load_sim_settings(config_path)
    if flavor == "vllm":  # the one flavour whose /metrics prometheus-client writes (llmload.sim.metrics)
        from prometheus_client import disable_created_metrics

        disable_created_metrics()  # vLLM exposes no *_created series
    writer = GroundTruthWriter(ground_truth_path)
    try:
        server = SimServer(flavor=flavor, settings=settings, seed=seed, model=model, ground_truth=writer)
        asyncio.run(_main(server, host, port, reuse_port))
    finally:
        writer.close()


def _called_tool(body: dict) -> str | None:
    """The function a chat request with `tools` gets called (the sim's model always calls one unless
    `tool_choice` is `none`): the named one, else the first tool's. None without tools."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return name
    first = tools[0].get("function") if isinstance(tools[0], dict) else None
    return first.get("name") if isinstance(first, dict) and isinstance(first.get("name"), str) else "tool"
