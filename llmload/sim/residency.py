"""Ollama's model residency: cold load on demand, the pending-load queue limit, keep-alive unload.

Requests for an unloaded model wait for one load of `load_time_s`; while it loads, at most `max_queue`
may wait (more get Ollama's 503 `server busy, please try again.  maximum pending requests exceeded`, as
since 0.11.5). Requests to a loaded model never get that 503: they wait for a slot without limit. When
the last request ends, the model stays `keep_alive_s` (or the request's `keep_alive`) and is unloaded.
"""

from __future__ import annotations

import asyncio
import time

from llmload.clock import now
from llmload.sim.wire import rfc3339

__all__ = ["MAX_QUEUE_MESSAGE", "ModelResidency", "QueueFull", "is_load_only", "load_only_answer"]

MAX_QUEUE_MESSAGE = "server busy, please try again.  maximum pending requests exceeded"


class QueueFull(Exception):
    """Too many requests waiting for a model load."""


class ModelResidency:
    """Loaded / loading / unloaded state of the one model, with its timers."""

    def __init__(self, *, load_time_s: float, keep_alive_s: float, max_queue: int) -> None:
        self.load_time_s, self.keep_alive_s, self.max_queue = load_time_s, keep_alive_s, max_queue
        self.state = "unloaded"
        self.pending = 0
        self.active = 0
        self.expires_at: float | None = None
        self._loaded = asyncio.Event()
        self._unload: asyncio.TimerHandle | None = None

    async def acquire(self) -> float:
        """Wait until the model is loaded (loading it if needed); returns the seconds spent waiting."""
        self._cancel_unload()
        self.active += 1
        if self.state == "loaded":
            return 0.0
        if self.pending >= self.max_queue:
            self.active -= 1
            self._maybe_schedule_unload(self.keep_alive_s)
            raise QueueFull(MAX_QUEUE_MESSAGE)
        self.pending += 1
        t0 = now()
        try:
            if self.state == "unloaded":
                self.state = "loading"
                asyncio.get_running_loop().call_later(self.load_time_s, self._finish_load)
            await self._loaded.wait()
        except BaseException:
            self.active -= 1
            raise
        finally:
            self.pending -= 1
        return now() - t0

    def release(self, keep_alive_s: float | None = None) -> None:
        """A request ended; the last one starts the keep-alive timer."""
        self.active = max(0, self.active - 1)
        self._maybe_schedule_unload(self.keep_alive_s if keep_alive_s is None else keep_alive_s)

    def _finish_load(self) -> None:
        self.state = "loaded"
        self._loaded.set()
        self._maybe_schedule_unload(self.keep_alive_s)

    def _maybe_schedule_unload(self, keep_alive_s: float) -> None:
        if self.active or self.state != "loaded":
            return
        self._cancel_unload()
        if keep_alive_s < 0:  # Ollama: a negative keep_alive keeps the model loaded forever
            self.expires_at = None
            return
        self.expires_at = now() + keep_alive_s
        self._unload = asyncio.get_running_loop().call_later(keep_alive_s, self._do_unload)

    def _cancel_unload(self) -> None:
        if self._unload is not None:
            self._unload.cancel()
            self._unload = None

    def _do_unload(self) -> None:
        if self.active == 0:
            self.state = "unloaded"
            self._loaded.clear()
            self.expires_at = None


def is_load_only(body: dict, kind: str) -> bool:
    """An Ollama native request that only loads or unloads the model: an empty prompt, or no messages."""
    if kind == "ollama_generate":
        return body.get("prompt") in (None, "") and not body.get("images")
    return kind == "ollama_chat" and not body.get("messages")


def load_only_answer(body: dict, kind: str, model: str) -> tuple[bool, dict]:
    """(unload?, the answer) of a load-only request, as `server/routes.go` GenerateHandler / ChatHandler
    answer it once the model is scheduled: one JSON object, `done_reason` "load", or "unload" (and the
    model is unloaded) with `keep_alive` 0."""
    unload = body.get("keep_alive") in (0, "0", "0s")
    out: dict = {"model": body.get("model") or model, "created_at": rfc3339(time.time())}
    if kind == "ollama_chat":
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    out.update({"done": True, "done_reason": "unload" if unload else "load"})
    return unload, out
