"""The real-time driver: runs `Engine.step()` back to back and writes each step's tokens at its end.

Timing is what the sim must not distort. Before sleeping out a step, the loop renders every event the
step will write; at the planned step end (an asyncio sleep to 2 ms before it, a thread sleep to 0.2 ms
before it, then a short spin) it only writes pre-rendered bytes, one `transport.write` per event, and
stamps each token just after its write.
The next step is planned from the previous planned end, so time spent writing, logging and counting
does not accumulate as drift (the engine keeps its modelled pace; late writes catch up).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import traceback
from collections.abc import Callable

from llmload.clock import now
from llmload.sim.engine import Engine, Sequence, StepResult
from llmload.sim.faults import RequestDraws
from llmload.sim.groundtruth import GroundTruthRow
from llmload.sim.http import Connection
from llmload.sim.wire import Exchange, Renderer

__all__ = ["EngineLoop", "Job", "error_body"]

#: how long before a step end the loop stops sleeping on the event loop's (ms-grained) timer
SPIN_S = 0.002
#: how long before a step end the loop spins (CPU traded for punctual writes: the kernel's sleep wakes
#: ~0.1 ms late)
SPIN_TAIL_S = 0.0002
#: a loop this late behind its planned step end (a pause, a swap storm) restarts its schedule from now
REANCHOR_S = 0.25
_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
        "1.06 GiB is free.")


class Job:
    """One generation request in flight: its sequence, its connection and how to write its events."""

    def __init__(self, *, conn: Connection, renderer: Renderer, ex: Exchange, draws: RequestDraws,
                 seq: Sequence, row: GroundTruthRow, stall_s: float, headers: dict[str, str],
                 defer_headers: bool, on_done: Callable[[Job, str], None]) -> None:
        self.conn, self.renderer, self.ex, self.draws = conn, renderer, ex, draws
        self.seq, self.row, self.stall_s = seq, row, stall_s
        self.headers = headers
        self.headers_sent = False
        self.defer_headers = defer_headers
        self.on_done = on_done
        self.finished = False
        self.stalled = False
        self.backlog: list[tuple[int, list[bytes]]] = []
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.reason = "length"

    # ------------------------------------------------------------ lifecycle
    def send_headers(self) -> None:
        if self.ex.stream and not self.headers_sent:
            self.headers_sent = True
            self.conn.start_stream(200, self.renderer.content_type, self.headers)

    def prepare(self, k: int) -> list[bytes]:
        """Events for token k, rendered before the step's end (streaming only)."""
        if not self.ex.stream:
            return []
        last = k + 1 >= self.seq.output_tokens
        reason = ("stop" if self.draws.eos else "length") if last else None
        events = self.renderer.before_first(self.ex) if k == 0 else []
        self.ex.sent = k + 1
        return [self.conn.frame(e) for e in events + self.renderer.token(self.ex, k, reason)]

    def deliver(self, k: int, events: list[bytes], planned_at: float, engine: Engine,
                completions: list[Job]) -> None:
        """Write token k at the step end and apply the faults placed at k. After the last token the
        job goes to `completions`: the loop finishes those once every token of the step is written."""
        if self.finished:
            return
        if self.conn.closed:
            self.end(engine, "client_gone")
            return
        if k == 0 and self.draws.error == "oom":
            self.fail_oom(engine)
            return
        if self.ex.stream:
            self.row.planned_times.append(planned_at)
        if self.stalled:
            self.backlog.append((k, events))
            return
        self._write(k, events, engine, completions)

    def _write(self, k: int, events: list[bytes], engine: Engine, completions: list[Job] | None) -> None:
        ex, row, conn = self.ex, self.row, self.conn
        if k == self.draws.disconnect_at:  # streaming or not, the connection drops here
            self.end(engine, "disconnect")
            conn.abort()
            return
        if k == self.draws.malformed_at:  # a broken event, or (not streaming) a body cut short
            row.outcome = "malformed"
        if ex.stream:
            if self.defer_headers:
                self.send_headers()
            if k == self.draws.malformed_at:
                conn.write_event(self.renderer.malformed(ex))
            for chunk in events:
                conn.write_framed(chunk)
        t = now()
        ex.sent = k + 1
        ex.last_token_at = t
        if k == 0:
            ex.first_token_at = row.first_token_at = t
        if k == ex.reasoning:
            row.first_answer_at = t
        if ex.stream:
            row.token_times.append(t)
        if k + 1 >= self.seq.output_tokens:
            self.reason = "stop" if self.draws.eos else "length"
            if completions is None:
                self.complete(engine)
            else:
                completions.append(self)
        elif k == self.draws.stall_at:  # the rest (or, not streaming, the body) comes stall_s later
            self.stalled = True
            row.outcome = "stall"
            asyncio.get_running_loop().call_later(self.stall_s, self._resume, engine)

    def _resume(self, engine: Engine) -> None:
        self.stalled = False
        backlog, self.backlog = self.backlog, []
        for k, events in backlog:
            if self.finished or self.stalled:
                break
            if self.conn.closed:
                self.end(engine, "client_gone")
                return
            self._write(k, events, engine, None)

    def complete(self, engine: Engine) -> None:
        """The answer is written: close the stream (or send the body) and finish. The ground-truth row
        is written just before the last write, so it is on disk when the client sees the end."""
        ex, conn = self.ex, self.conn
        finished_at = now()
        if ex.stream:
            *events, last = self.renderer.finish(ex, self.reason, finished_at)
            for event in events:
                conn.write_event(event)
            self.end(engine, self.row.outcome)
            conn.write_event(last)
            conn.end_stream()
        else:
            body = self.renderer.body(ex, self.reason, finished_at)
            t = now()  # the client gets the whole answer, first token included, with this write
            self.row.first_token_at = t
            self.row.first_answer_at = t if ex.sent > ex.reasoning else None
            self.row.token_times.append(t)
            self.end(engine, self.row.outcome)
            if self.row.outcome == "malformed":
                data = json.dumps(body).encode()
                conn.send(200, data[: len(data) // 2], headers=self.headers)
            else:
                conn.send(200, body, headers=self.headers)

    def fail_oom(self, engine: Engine) -> None:
        """The engine ran out of memory on this request: an error event in the stream, or a 500."""
        ex = self.ex
        if not ex.stream:
            self.row.http_status = 500
        self.end(engine, "oom")
        if ex.stream:  # every flavour streams an engine error in the 200 stream it started
            self.send_headers()
            self.conn.write_event(self.renderer.error_event(ex, _OOM))
            if ex.kind in ("chat", "completions"):
                self.conn.write_event(self.renderer.done)
            self.conn.end_stream()
        else:
            self.conn.send(500, error_body(ex.flavor, ex.kind, _OOM, 500), headers=self.headers)

    def end(self, engine: Engine, outcome: str) -> None:
        if self.finished:
            return
        self.finished = True
        if self.seq.state in ("waiting", "running"):
            engine.abort(self.seq)
        self.row.outcome = outcome
        self.row.finished_at = now()
        self.row.output_tokens = (len(self.row.token_times) if self.ex.stream else self.ex.sent) \
            if outcome != "oom" else 0
        self.row.preemptions = self.seq.preemptions
        self.row.reasoning_tokens = min(self.ex.reasoning, self.ex.sent) if outcome != "oom" else 0
        self.row.cached_tokens = max(0, self.seq.cached_tokens)
        try:
            self.on_done(self, outcome)
        finally:
            if not self.done.done():
                self.done.set_result(outcome)


def error_body(flavor: str, kind: str, message: str, code: int, err_type: str | None = None) -> dict:
    """An error body worded the way the flavour's server words it."""
    if flavor == "ollama" and kind.startswith("ollama"):
        return {"error": message}
    if flavor == "ollama":  # ollama `openai/openai.go` NewError: 400 and 404 have their own types
        default = {400: "invalid_request_error", 404: "not_found_error"}.get(code, "api_error")
        return {"error": {"message": message, "type": err_type or default, "param": None, "code": None}}
    if flavor == "llamacpp":
        return {"error": {"code": code, "message": message, "type": err_type or "server_error"}}
    if flavor == "sglang":  # http_server.py: _create_error_response natively, ErrorResponse on /v1
        if kind == "sglang_generate":
            return {"error": {"message": message}}
        return {"object": "error", "message": message, "type": err_type or str(code), "param": None, "code": code}
    names = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError",
             500: "InternalServerError", 503: "ServiceUnavailableError"}
    return {"error": {"message": message, "type": err_type or names.get(code, "InternalServerError"),
                      "param": None, "code": code}}


class EngineLoop:
    """Drives an Engine in real time; jobs join with `submit` and leave when their sequence ends."""

    def __init__(self, engine: Engine, on_step: Callable[[StepResult], None]) -> None:
        self.engine = engine
        self.jobs: dict[int, Job] = {}
        self._on_step = on_step
        self._wake = asyncio.Event()
        #: the engine's start: its age at each step drives the injected slow leak (sim settings)
        self.started_at = now()

    def submit(self, job: Job) -> None:
        self.engine.add(job.seq)
        self.jobs[job.seq.seq_id] = job
        self._wake.set()

    def release(self, job: Job) -> None:
        self.jobs.pop(job.seq.seq_id, None)

    async def run(self) -> None:
        engine, planned = self.engine, None
        while True:
            if engine.idle:
                self._wake.clear()
                await self._wake.wait()
                planned = None
            t = now()
            # keep the engine's own schedule (late writes catch up) unless the loop was stopped for long
            start = planned if planned is not None and t - planned < REANCHOR_S else t
            result = engine.step(start - self.started_at)
            end = start + result.cost_s
            for seq in result.admitted:
                job = self.jobs.get(seq.seq_id)
                if job is not None:
                    # a step kept on the engine's schedule may start before a request it admits arrived
                    # (`start` is the planned time, `t` is later): never admitted before received
                    job.row.admitted_at = job.ex.admitted_at = max(start, job.row.received_at)
            batch = []
            for seq in result.emitted:
                job = self.jobs.get(seq.seq_id)
                if job is not None:
                    k = seq.generated - 1
                    batch.append((job, k, job.prepare(k)))
            await _sleep_until(end)
            completions: list[Job] = []
            for job, k, events in batch:
                try:
                    job.deliver(k, events, end, engine, completions)
                except Exception:  # a bug in one request must not stop the engine for all
                    traceback.print_exc()
                    job.end(engine, "http_error")
                    job.conn.abort()
            for job in completions:  # after every token of the step is out: finish chunks, logs, metrics
                try:
                    job.complete(engine)
                except Exception:
                    traceback.print_exc()
                    job.end(engine, "http_error")
            self._on_step(result)
            planned = end
            if not result.batch:  # nothing schedulable (all blocked): wait for a change
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.05)


async def _sleep_until(deadline: float) -> None:
    """Sleep to `SPIN_S` before `deadline` on the event loop (its timer is ms-grained and a woken process
    may wait for a core), then in the thread (`time.sleep`: the kernel's timer, ~0.1 ms late) to
    `SPIN_TAIL_S` before it, then spin to it. Spinning the whole of `SPIN_S` cost 1.3 ms of CPU per
    step (a sim of 5 ms steps at 40% of a core) and was no more punctual on a busy machine, where a
    spinner uses up its share of the core and is the first put off it."""
    delay = deadline - now()
    if delay > SPIN_S + 0.0005:
        await asyncio.sleep(delay - SPIN_S)
    else:
        await asyncio.sleep(0)
    rest = deadline - now() - SPIN_TAIL_S
    if rest > 0:
        time.sleep(rest)  # the loop is held as the spin held it: nothing else is due before the step's end
    while now() < deadline:  # no sched_yield here: on a busy machine it gives the core away for ms
        pass
