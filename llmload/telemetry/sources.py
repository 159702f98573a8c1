"""What one target endpoint exposes, polled once per interval: /metrics, llama.cpp /slots, Ollama /api/ps.

`EndpointSource` finds the server flavour (the `target.server` hint, else the names on `/metrics`,
else `/api/version` for Ollama or `/props` for llama.cpp) and then polls what that flavour has. Each
poller raises TelemetryError on a failed poll; the endpoint turns that into `scrape_error=1` for the
poller's source and keeps polling the others. A 404/501 means "this server has no such endpoint":
the poller is retired after one logged line instead of failing every second.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from llmload.clock import now
from llmload.errors import TelemetryError
from llmload.telemetry.exposition import format_labels, parse_exposition
from llmload.telemetry.http import HttpStatusError, fetch_json, fetch_text, public_url
from llmload.telemetry.profiles import detect_flavor_from_names, normalise
from llmload.telemetry.sink import Point

__all__ = [
    "EndpointSource",
    "MetricsPoller",
    "OllamaPsPoller",
    "SlotsPoller",
    "Unavailable",
    "detect_flavor",
    "error_label",
    "parse_timestamp",
    "ps_points",
    "slots_points",
]

log = logging.getLogger("llmload.telemetry")

_NOT_HERE = (404, 405, 501)


class Unavailable(TelemetryError):
    """The server has no such endpoint (404/501): stop asking."""


def _get(fetch: Callable[..., object], url: str, timeout_s: float, headers: Mapping[str, str]) -> object:
    try:
        return fetch(url, timeout_s=timeout_s, headers=headers)
    except HttpStatusError as exc:
        if exc.status in _NOT_HERE:
            raise Unavailable(f"{url}: HTTP {exc.status} (not offered by this server)") from None
        raise


class MetricsPoller:
    """Scrapes a Prometheus endpoint into normalised points (per flavour) plus raw series."""

    def __init__(self, url: str, *, source: str, flavor: str, timeout_s: float,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url, self.source, self.flavor, self.timeout_s = url, source, flavor, timeout_s
        self.headers = dict(headers or {})

    def poll(self) -> list[Point]:
        text = _get(fetch_text, self.url, self.timeout_s, self.headers)
        samples = parse_exposition(str(text))
        if not samples:
            raise TelemetryError(f"{self.url}: no samples in the answer")
        return normalise(samples, flavor=self.flavor, source=self.source)


class SlotsPoller:
    """llama.cpp `/slots`: how many slots exist and how many are busy, each slot's context size, and
    `kv_usage`: the context tokens busy slots hold (`n_prompt_tokens`, the slot's prompt plus what it
    generated so far) over all slots' context (`n_ctx`). llama-server reports no KV-cache usage of its
    own (its /metrics has no such series since `llamacpp:kv_cache_usage_ratio` was removed); a server
    whose slots do not give both fields gets no `kv_usage` point (the report says not reported)."""

    def __init__(self, base_url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None) -> None:
        self.url, self.source, self.timeout_s = f"{base_url}/slots", f"slots:{public_url(base_url)}", timeout_s
        self.headers = dict(headers or {})

    def poll(self) -> list[Point]:
        slots = _get(fetch_json, self.url, self.timeout_s, self.headers)
        if not isinstance(slots, list):
            raise TelemetryError(f"{self.url}: expected a list of slots")
        return slots_points(self.source, slots)


def slots_points(source: str, slots: list) -> list[Point]:
    """The points of one `/slots` answer (`SlotsPoller`; a virtual run's simulated server's too)."""
    busy = sum(1 for s in slots if isinstance(s, dict) and (s.get("is_processing") or s.get("state") == 1))
    points = [Point(source, "slots_total", float(len(slots))), Point(source, "slots_processing", float(busy))]
    for i, slot in enumerate(slots):
        if isinstance(slot, dict) and isinstance(slot.get("n_ctx"), (int, float)):
            points.append(Point(source, "slot_n_ctx", float(slot["n_ctx"]),
                                format_labels({"id": slot.get("id", i)}), always=False))
    usage = slot_context_usage(slots)
    if usage is not None:
        points.append(Point(source, "kv_usage", usage))
    return points


def slot_context_usage(slots: list) -> float | None:
    """Tokens held by busy llama.cpp slots / all slots' `n_ctx` (0-1); None unless every slot gives
    `n_ctx` and every busy one `n_prompt_tokens`."""
    total, held = 0.0, 0.0
    for slot in slots:
        if not isinstance(slot, dict) or not isinstance(slot.get("n_ctx"), (int, float)):
            return None
        total += float(slot["n_ctx"])
        if slot.get("is_processing") or slot.get("state") == 1:
            tokens = slot.get("n_prompt_tokens")
            if not isinstance(tokens, (int, float)):
                return None
            held += float(tokens)
    return min(held / total, 1.0) if total > 0 else None


_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_timestamp(text: str) -> float | None:
    """Wall seconds of an RFC 3339 time (Ollama writes nanoseconds; Python keeps microseconds)."""
    try:
        return datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00"))).timestamp()
    except (ValueError, TypeError, AttributeError):
        return None


class OllamaPsPoller:
    """Ollama `/api/ps`: loaded models with `size_vram`, `size`, `context_length`, time left to unload."""

    def __init__(self, base_url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None) -> None:
        self.url, self.source, self.timeout_s = f"{base_url}/api/ps", f"ollama_ps:{public_url(base_url)}", timeout_s
        self.headers = dict(headers or {})

    def poll(self) -> list[Point]:
        body = _get(fetch_json, self.url, self.timeout_s, self.headers)
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            raise TelemetryError(f"{self.url}: expected {{\"models\": [...]}}")
        return ps_points(self.source, models, now())


def ps_points(source: str, models: list, wall: float) -> list[Point]:
    """The points of one `/api/ps` answer's `models` read at `wall` (`OllamaPsPoller`; a virtual run's
    simulated server's too)."""
    points = [Point(source, "ollama_loaded_models", float(len(models)))]
    for m in models:
        if not isinstance(m, dict):
            continue
        labels = format_labels({"model": m.get("name") or m.get("model") or "?"})
        for key, metric in (("size_vram", "ollama_size_vram_bytes"), ("size", "ollama_size_bytes"),
                            ("context_length", "ollama_context_length")):
            if isinstance(m.get(key), (int, float)):
                points.append(Point(source, metric, float(m[key]), labels))
        expires = parse_timestamp(m.get("expires_at", ""))
        if expires is not None and math.isfinite(expires):
            points.append(Point(source, "ollama_expires_in_seconds", expires - wall, labels))
    return points


def detect_flavor(base_url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None,
                  deadline: float | None = None) -> str:
    """`vllm`, `llamacpp`, `sglang`, `tgi`, `ollama` or `generic`; TelemetryError when nothing answers.
    Each GET within `timeout_s`, all of them before `deadline` (monotonic; default 3 x `timeout_s`)."""
    headers = dict(headers or {})
    if deadline is None:
        deadline = time.monotonic() + 3 * timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TelemetryError(f"{base_url}: no flavour found within the probe's time", url=base_url)
        return min(timeout_s, remaining)

    try:
        text = fetch_text(f"{base_url}/metrics", timeout_s=left(), headers=headers)
        try:
            names = [s.name for s in parse_exposition(text)]
        except TelemetryError:
            names = []
        return detect_flavor_from_names(names)
    except HttpStatusError:
        pass
    for path, flavor in (("/api/version", "ollama"), ("/props", "llamacpp")):
        try:
            body = fetch_json(f"{base_url}{path}", timeout_s=left(), headers=headers)
        except HttpStatusError:
            continue
        except TelemetryError as exc:
            if "not JSON" in str(exc):
                continue
            raise
        if isinstance(body, dict) and (flavor != "ollama" or "version" in body):
            return flavor
    return "generic"


class EndpointSource:
    """Everything polled for one `target.urls` entry; source names `server:`, `slots:`, `ollama_ps:<url>`."""

    def __init__(self, base_url: str, *, flavor: str | None, metrics_url: str | None, timeout_s: float,
                 headers: Mapping[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.source = f"server:{public_url(self.base_url)}"
        self.flavor = flavor
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.pollers: list = []
        self._ready = False
        self._lock = threading.Lock()  # one poll at a time (the polling thread and sample_now may meet)

    def _setup(self) -> None:
        if self.flavor is None:
            self.flavor = detect_flavor(self.base_url, timeout_s=self.timeout_s, headers=self.headers)
            log.info("telemetry: %s looks like %s", self.base_url, self.flavor)
        timeout_s, headers = self.timeout_s, self.headers
        if self.flavor == "ollama":
            self.pollers = [OllamaPsPoller(self.base_url, timeout_s=timeout_s, headers=headers)]
        else:
            if self.metrics_url:
                self.pollers.append(MetricsPoller(self.metrics_url, source=self.source, flavor=self.flavor,
                                                  timeout_s=timeout_s, headers=headers))
            if self.flavor == "llamacpp":
                self.pollers.append(SlotsPoller(self.base_url, timeout_s=timeout_s, headers=headers))
        self._ready = True

    def poll(self) -> list[Point]:
        """Points from every poller; a failed poller adds `scrape_error=1` (with the reason) for its source."""
        with self._lock:
            return self._poll()

    def _poll(self) -> list[Point]:
        if not self._ready:
            self._setup()  # raises TelemetryError while the server does not answer: retried next time
        points: list[Point] = []
        for poller in list(self.pollers):
            try:
                points.extend(poller.poll())
                points.append(Point(poller.source, "scrape_error", 0.0))
            except Unavailable as exc:
                log.warning("telemetry: %s; not polled again", exc)
                self.pollers.remove(poller)
                points.append(Point(poller.source, "scrape_error", 1.0, format_labels({"error": "unavailable"})))
            except TelemetryError as exc:
                points.append(Point(poller.source, "scrape_error", 1.0, error_label(exc)))
        return points


def error_label(exc: Exception) -> str:
    """`error=<kind>` for a failed poll: timeout, refused, malformed or failed."""
    text = str(exc)
    for needle, kind in (("timed out", "timeout"), ("refused", "refused"), ("malformed", "malformed"),
                         ("not JSON", "malformed"), ("no samples", "malformed"), ("expected", "malformed")):
        if needle in text:
            return format_labels({"error": kind})
    return format_labels({"error": "failed"})
