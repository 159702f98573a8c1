"""Pre-flight on the master, before the first step: reachable, model served, cold load, quality.

- reachable: each endpoint answers HTTP at all (a refused connection or a timeout stops the run with
  one line and exit code 3; any HTTP status counts as reachable); the timeout bounds the whole probe,
  so a server that drips its answer cannot hold the pre-flight;
- model: listed by the API's probe path (`ApiSpec.probe_path`: `/v1/models` for OpenAI and SGLang,
  `/api/tags` for Ollama); a model the server does not list stops the run (`ModelNotServed`, exit code
  2), except where the server takes any name (llama.cpp, SGLang, TGI) or lists none (a
  warning): `llmload.runtime.master.served_model`;
- cold load: one tiny request, timed and recorded apart (`preflight.json`), never in the records;
- quality cases (`quality.cases`) through the client library: a failure stops the run unless
  `quality.required` is false.

Also the manifest (`manifest.json`, fixed conditions, secrets removed) and the telemetry collector.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.apis import get_api
from llmload.config import Config
from llmload.errors import RunError, TelemetryError
from llmload.redaction import redact, redact_text
from llmload.runtime.master.served_model import IGNORES_MODEL_OWNERS, served_model_check

__all__ = ["ModelNotServed", "PreflightFailed", "check_model_served", "check_reachable", "preflight", "start_telemetry", "write_run_manifest"]

log = logging.getLogger("llmload.preflight")


class PreflightFailed(RunError):
    """The run cannot start (exit code 3): target unreachable or a required quality case failed."""


class ModelNotServed(PreflightFailed):
    """`target.model` is not among the models the server lists (exit code 2: the config names it wrong)."""

    exit_code = 2


def _get_json(url: str, *, timeout_s: float, headers: dict[str, str]) -> tuple[int, Any]:
    """GET `url` within `timeout_s` in all (a server dripping its answer cannot hold the pre-flight) and
    at most `MAX_BODY_BYTES`; (status, JSON body or None)."""
    from llmload.telemetry.http import open_url, read_capped

    request = urllib.request.Request(url, headers=headers)
    try:
        with open_url(request, timeout_s=timeout_s) as resp:
            body = read_capped(resp, url)
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except TelemetryError as exc:  # too long: it answered HTTP, but not with a model list
        log.warning("%s", exc)
        return 200, None
    except http.client.HTTPException as exc:  # a broken answer: not an HTTP server we can talk to
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def check_reachable(config: Config, *, timeout_s: float | None = None) -> dict[str, Any]:
    """Each endpoint answers HTTP; returns the models each one lists. Raises PreflightFailed."""
    from llmload.client.auth import Credentials
    from llmload.telemetry.http import public_url

    headers = Credentials.from_target(config.target).headers()
    path = get_api(config.target.api).probe_path
    timeout = timeout_s if timeout_s is not None else min(config.target.connect_timeout, 10.0)
    found: dict[str, Any] = {}
    for base in config.target.endpoints:
        shown = public_url(base)  # a user:password@ goes as a header (in `headers`), never in a message
        try:
            status, body = _get_json(shown + path, timeout_s=timeout, headers=headers)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                reason = f"no complete answer to GET {path} within {timeout:g}s"
            raise PreflightFailed(f"target {shown} is unreachable: {reason}") from None
        found[shown] = {"status": status, "models": _model_names(body), "ignores_model": _takes_any_name(body)}
    return found


def check_model_served(config: Config, endpoints: dict[str, Any]) -> list[str]:
    """Raises `ModelNotServed` when an endpoint lists its models without `target.model` (one line, the
    names it serves); returns the warnings (an endpoint that lists none)."""
    refusal, warnings = served_model_check(config, endpoints)
    if refusal:
        raise ModelNotServed(redact_text(refusal))  # a server may echo the key in its model list
    return warnings


def _items(body: Any) -> list[Any]:
    """The entries of a model list: OpenAI's `data`, Ollama's `models`."""
    if not isinstance(body, dict):
        return []
    items = body.get("data") or body.get("models") or []
    return items if isinstance(items, list) else []


def _model_names(body: Any) -> list[str]:
    names = []
    for item in _items(body):
        if isinstance(item, dict):
            names.append(str(item.get("id") or item.get("name") or item.get("model") or ""))
    return [n for n in names if n]


def _takes_any_name(body: Any) -> bool:
    """llama.cpp's or SGLang's `/v1/models` (`owned_by`): it answers any model name with the one it loaded."""
    return any(isinstance(item, dict) and item.get("owned_by") in IGNORES_MODEL_OWNERS for item in _items(body))


def _cold_request(config: Config, now: Callable[[], float]) -> dict[str, Any]:
    """One short request, timed apart from the measurements (a cold model load shows here) on `now`."""
    from llmload.runtime.worker.sending import preflight_send

    t0 = now()
    record = preflight_send(config, prompt="Hello", max_tokens=4, request_id="preflight-cold")
    out = {"outcome": record.outcome, "http_status": record.http_status, "error": record.error,
           "elapsed_s": now() - t0, "cold": record.cold, "server_load_s": record.server_load_s}
    if record.sent_at is not None and record.first_token_at is not None:
        out["ttft_s"] = record.first_token_at - record.sent_at
    if record.sent_at is not None and record.last_token_at is not None:
        out["e2e_s"] = record.last_token_at - record.sent_at
    return out


def preflight(config: Config, run_dir: Path, *, clock: Callable[[], float]) -> dict[str, Any]:
    """Run every check; writes `preflight.json`; raises PreflightFailed when the run must not start.
    `clock`: the run's time (`RunLifecycle`'s), for `started_at` and the cold request's `elapsed_s`."""
    endpoints = check_reachable(config)
    result: dict[str, Any] = {"started_at": clock(), "endpoints": endpoints,
                              "warnings": check_model_served(config, endpoints)}
    result["tokens_per_word"] = _tokens_per_word(config)
    result["cold_load"] = _cold_request(config, clock)
    if result["cold_load"]["outcome"] != "ok":
        result["warnings"].append(f"the first request ended {result['cold_load']['outcome']}: "
                                  f"{result['cold_load'].get('error') or ''}")
    from llmload.client import quality_failure

    cases = _quality(config)
    result["quality"] = [{"index": c.index, "passed": c.passed, "reason": c.reason, "outcome": c.outcome,
                          "ttft_s": c.ttft_s, "e2e_s": c.e2e_s} for c in cases]
    failure = quality_failure(cases)
    if failure and not config.quality.required:
        result["warnings"].append(f"{failure} (quality.required is false: the run goes on)")
    result = redact(result)  # a server may echo the key (in its model list, an error body)
    for warning in result["warnings"]:
        print(f"llmload: warning: {warning}", flush=True)
    (Path(run_dir) / "preflight.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    if failure and config.quality.required:
        raise PreflightFailed(f"{failure} {_quality_advice(config, cases)}; the answers are in "
                              f"{Path(run_dir) / 'preflight.json'}")
    return result


def _quality_advice(config: Config, cases: list[Any]) -> str:
    """What to do about the first failed quality case: only a wrong answer is a quality failure; a request
    that failed (a 404 for a model or path the server does not know, a timeout) says nothing of quality."""
    first = next(case for case in cases if not case.passed)
    if first.outcome == "quality_fail":
        return "(set quality.required: false to run anyway)"
    reason = (first.reason or "").lower()
    if reason.startswith("http 404") or "not found" in reason or "does not exist" in reason:
        path = get_api(config.target.api).path
        return (f"(not a quality failure: the server does not know model {config.target.model!r} or the path "
                f"{path}: check target.model, target.api and target.url)")
    return (f"(not a quality failure: the request ended {first.outcome} before any answer was checked: "
            "check the server)")


def _tokens_per_word(config: Config) -> float | None:
    """Server tokens per synthesised word via `/tokenize`, so prompts get their planned token length on
    a real tokenizer; None when the config gives it, prompts come from a dataset, or the server has none."""
    if config.requests.tokens_per_word is not None or config.requests.dataset:
        return None
    if get_api(config.target.api).tokenize_path is None:  # the API's server has no /tokenize
        return None
    from llmload.client import calibrate_tokens_per_word
    from llmload.client.auth import Credentials

    return calibrate_tokens_per_word(config.target.endpoints[0], server=config.target.server,
                                     model=config.target.model,
                                     headers=Credentials.from_target(config.target).headers())


def _quality(config: Config) -> list[Any]:
    """The quality cases, sent once each at the lowest load (answers are not kept)."""
    if not config.quality.cases:
        return []
    from llmload.client import Transport, run_quality_cases

    transport = Transport.from_target(config.target, concurrency=1)
    try:
        return run_quality_cases(config.quality, config.target, transport)
    finally:
        transport.close()


def write_run_manifest(config: Config, run_dir: Path, *, checks: dict, workers: int, config_path: str,
                       overrides: dict | None = None, shape: dict | None = None,
                       servers: list[dict] | None = None) -> None:
    """`manifest.json` from the telemetry package's builder (fixed conditions, secrets removed); the
    config is the one run, `run_overrides` says what the start form changed from the file, and `shape`
    (`manifest.shape_record`) the shape that planned the run: a locustfile's own one names its class
    as `plan_kind`. `servers`: probe answers made elsewhere (a virtual run's simulated server), none asked."""
    from llmload.telemetry.manifest import build_manifest, write_manifest

    seeds = {"requests": config.requests.seed, "trace": getattr(config.shape.trace, "seed", None)}
    kind = shape["class"] if shape and shape.get("replaces_config_shape") else config.shape.kind
    manifest = build_manifest(config, run_id=Path(run_dir).name, seeds=seeds, plan_kind=kind, servers=servers)
    if shape is not None:
        manifest["shape"] = shape
    manifest["workers"] = workers
    manifest["preflight"] = checks
    manifest["config_file"] = config_path
    manifest["run_overrides"] = overrides or {}
    write_manifest(run_dir, manifest)


def start_telemetry(config: Config, run_dir: Path) -> Any:
    """Start the telemetry collector (server metrics, GPU); None (with a warning) if it cannot start."""
    try:
        from llmload.telemetry.collector import TelemetryCollector

        collector = TelemetryCollector(config, run_dir)
        collector.start()
        return collector
    except Exception as exc:
        log.exception("telemetry did not start")
        print(f"llmload: warning: telemetry did not start: {exc}", flush=True)
        return None
