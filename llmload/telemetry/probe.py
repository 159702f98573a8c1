"""Fixed conditions a server can tell about itself, read once at the start of a run for the manifest.

vLLM: `/v1/models` (`max_model_len`), `/version`, `vllm:cache_config_info` labels on `/metrics`.
Ollama: `/api/version`, `/api/ps` (loaded, `size_vram`, `context_length`), `/api/show` (quantisation).
llama.cpp: `/props` (`n_ctx`, `total_slots`, `build_info`), `/slots` (`n_ctx` per slot).
SGLang `/get_server_info`, TGI `/info`. Every probe is optional: what fails is listed in `errors`
and the fact stays None, so the manifest says "unknown" rather than guessing. Each GET has `timeout_s`
as its total deadline and the whole probe of one server `PROBE_BUDGET_TIMEOUTS` times that, so a server
that drips its answers delays the start of a run by seconds, not for ever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from llmload.errors import TelemetryError
from llmload.telemetry.exposition import parse_exposition
from llmload.telemetry.http import fetch_json, fetch_text
from llmload.telemetry.sources import detect_flavor

__all__ = ["FACT_KEYS", "probe_server"]

#: the facts every probe result has (None where the server did not say)
FACT_KEYS = ("flavor", "server_version", "model", "model_path", "model_revision", "context_length",
             "max_num_seqs", "slots", "kv_block_size", "kv_num_gpu_blocks", "kv_cache_dtype", "prefix_cache",
             "gpu_memory_utilization", "quantization", "parameter_size", "model_loaded", "gpu_residency",
             "cache_state")

_MAX_RAW_STRING = 500
#: a server's whole probe (every path it asks) takes at most this many `timeout_s`: each GET has
#: `timeout_s` as its total deadline (`llmload.telemetry.http`), and the paths left when the budget is
#: spent are not asked (listed in `errors`)
PROBE_BUDGET_TIMEOUTS = 3


def _trim(value: Any) -> Any:
    """Raw answers kept in the manifest, with long strings (chat templates) shortened."""
    if isinstance(value, str):
        return value if len(value) <= _MAX_RAW_STRING else value[:_MAX_RAW_STRING] + "..."
    if isinstance(value, dict):
        return {k: _trim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trim(v) for v in value[:64]]
    return value


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


class _Prober:
    def __init__(self, base: str, headers: Mapping[str, str], timeout_s: float, *,
                 deadline: float | None = None, pages: Callable[[str], Any] | None = None) -> None:
        self.base, self.headers, self.timeout_s = base, dict(headers), timeout_s
        #: answers by path instead of HTTP (`probe_server`'s `pages`)
        self.pages = pages
        #: monotonic time after which no more paths are asked (the probe's total budget)
        self.deadline = deadline if deadline is not None else time.monotonic() + PROBE_BUDGET_TIMEOUTS * timeout_s
        self.facts: dict[str, Any] = dict.fromkeys(FACT_KEYS)
        self.raw: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def get(self, path: str, fetch: Callable[..., Any] = fetch_json, body: Any = None) -> Any:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.errors[path] = "not asked: the probe's time was spent"
            return None
        try:
            if self.pages is not None:
                answer = self.pages(path)
                if answer is None:
                    raise TelemetryError(f"{self.base}{path}: HTTP 404")
            else:
                kwargs = {"body": body} if body is not None else {}
                answer = fetch(f"{self.base}{path}", timeout_s=min(self.timeout_s, left), headers=self.headers,
                               **kwargs)
        except TelemetryError as exc:
            self.errors[path] = str(exc)
            return None
        if fetch is fetch_json:
            self.raw[path] = _trim(answer)
        return answer

    def models(self, model: str | None) -> None:
        body = self.get("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not data:
            return
        chosen = next((m for m in data if isinstance(m, dict) and m.get("id") == model), data[0])
        if isinstance(chosen, dict):
            self.facts["model"] = chosen.get("id")
            self.facts["model_path"] = chosen.get("root")
            self.facts["context_length"] = _int(chosen.get("max_model_len"))

    def vllm(self, model: str | None) -> None:
        self.models(model)
        version = self.get("/version")
        if isinstance(version, dict):
            self.facts["server_version"] = version.get("version")
        text = self.get("/metrics", fetch_text)
        if not text:
            return
        try:
            samples = parse_exposition(text)
        except TelemetryError as exc:
            self.errors["/metrics"] = str(exc)
            return
        for s in samples:
            if s.name == "vllm:cache_config_info":
                self.raw["vllm:cache_config_info"] = dict(s.labels)
                self.facts.update(kv_block_size=_int(s.labels.get("block_size")),
                                  kv_num_gpu_blocks=_int(s.labels.get("num_gpu_blocks")),
                                  kv_cache_dtype=s.labels.get("cache_dtype"),
                                  prefix_cache=_bool(s.labels.get("enable_prefix_caching")),
                                  gpu_memory_utilization=s.labels.get("gpu_memory_utilization"))
                if "max_num_seqs" in s.labels:  # not in every vLLM version
                    self.facts["max_num_seqs"] = _int(s.labels["max_num_seqs"])
        served = sum(s.value for s in samples if s.name in ("vllm:prompt_tokens_total", "vllm:prompt_tokens"))
        self.facts["cache_state"] = "used" if served > 0 else "fresh"

    def ollama(self, model: str | None) -> None:
        version = self.get("/api/version")
        if isinstance(version, dict):
            self.facts["server_version"] = version.get("version")
        self.facts["model"] = model
        ps = self.get("/api/ps")
        loaded = [m for m in (ps or {}).get("models", []) if isinstance(m, dict)] if isinstance(ps, dict) else []
        mine = next((m for m in loaded if model in (m.get("name"), m.get("model"))), None)
        if isinstance(ps, dict):
            self.facts["model_loaded"] = mine is not None
            self.facts["cache_state"] = "loaded" if mine else "not_loaded"
        if mine:
            self.facts["context_length"] = _int(mine.get("context_length"))
            self.facts["model_revision"] = mine.get("digest")
            size, vram = _int(mine.get("size")), _int(mine.get("size_vram"))
            if size and vram is not None:
                self.facts["gpu_residency"] = round(vram / size, 4)
        if model:
            show = self.get("/api/show", body={"model": model})
            details = show.get("details") if isinstance(show, dict) else None
            if isinstance(details, dict):
                self.facts["quantization"] = details.get("quantization_level")
                self.facts["parameter_size"] = details.get("parameter_size")

    def llamacpp(self, model: str | None) -> None:
        self.models(model)
        props = self.get("/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings") or {}
            self.facts["server_version"] = props.get("build_info")
            self.facts["slots"] = _int(props.get("total_slots"))
            self.facts["model_path"] = props.get("model_path") or self.facts["model_path"]
            self.facts["context_length"] = _int(settings.get("n_ctx")) or self.facts["context_length"]
        slots = self.get("/slots")
        if isinstance(slots, list) and slots:
            self.facts["slots"] = len(slots)
            per_slot = {_int(s.get("n_ctx")) for s in slots if isinstance(s, dict)} - {None}
            if len(per_slot) == 1:
                self.facts["context_length"] = per_slot.pop()
        self.facts["max_num_seqs"] = self.facts["slots"]

    def sglang(self, model: str | None) -> None:
        self.models(model)
        info = self.get("/get_server_info")
        if isinstance(info, dict):
            self.facts["server_version"] = info.get("version")
            self.facts["max_num_seqs"] = _int(info.get("max_running_requests"))
            self.facts["context_length"] = _int(info.get("context_length")) or self.facts["context_length"]
            self.facts["kv_cache_dtype"] = info.get("kv_cache_dtype")
            disabled = _bool(info.get("disable_radix_cache"))
            self.facts["prefix_cache"] = None if disabled is None else not disabled

    def tgi(self, model: str | None) -> None:
        info = self.get("/info")
        if isinstance(info, dict):
            self.facts.update(server_version=info.get("version"), model=info.get("model_id"),
                              model_revision=info.get("model_sha"),
                              max_num_seqs=_int(info.get("max_concurrent_requests")),
                              context_length=_int(info.get("max_total_tokens")))


def probe_server(base_url: str, *, flavor: str | None = None, model: str | None = None,
                 headers: Mapping[str, str] | None = None, timeout_s: float = 3.0,
                 pages: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """`{"url", "facts": {FACT_KEYS...}, "raw": {path: answer}, "errors": {path: reason}}` for one server.
    `pages`: the server's answer by path (a JSON body, `/metrics` text; None: no such page) instead of
    HTTP: a virtual run's simulated server (`llmload.runtime.virtual.telemetry`), with `flavor` given."""
    base = base_url.rstrip("/")
    prober = _Prober(base, headers or {}, timeout_s, pages=pages)
    if flavor is None:
        try:
            flavor = detect_flavor(base, timeout_s=timeout_s, headers=prober.headers,
                                   deadline=prober.deadline)
        except TelemetryError as exc:
            prober.errors["detect"] = str(exc)
    prober.facts["flavor"] = flavor
    handler = {"vllm": prober.vllm, "ollama": prober.ollama, "llamacpp": prober.llamacpp,
               "sglang": prober.sglang, "tgi": prober.tgi}.get(flavor or "", prober.models)
    if flavor is not None:
        handler(model)
    return {"url": base, "facts": prober.facts, "raw": prober.raw, "errors": prober.errors}
