"""The run manifest: the fixed conditions a result holds for, with a fingerprint `compare` can check.

`build_manifest` asks each server what it can tell (`probe.probe_server`), takes the rest from
`config.conditions`, and adds the config as run with secrets removed, the client's versions and the
seeds. `conditions` is one flat dict; `fingerprint` hashes it alone (no times, no run id), so two runs
under the same conditions share a fingerprint and `diff_conditions` names what changed.

Secrets: the API key is never written; header values named like Authorization / *key* / *token* are
replaced by `<redacted>`, credentials in URLs too, and every secret value is scrubbed from the whole
manifest (probe answers included) as a last pass.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from llmload.clock import now
from llmload.config import Config
from llmload.errors import TelemetryError
from llmload.redaction import redact_text
from llmload.telemetry.collector import dcgm_url
from llmload.telemetry.credentials import SECRET_HEADER, request_headers, secret_values
from llmload.telemetry.exposition import parse_exposition
from llmload.telemetry.gpu import NvmlSampler
from llmload.telemetry.http import fetch_text
from llmload.telemetry.probe import probe_server

__all__ = [
    "REDACTED",
    "build_manifest",
    "client_versions",
    "diff_conditions",
    "fingerprint",
    "read_manifest",
    "record_clocks",
    "redact_config",
    "shape_record",
    "write_manifest",
]

REDACTED = "<redacted>"
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


def client_versions() -> dict[str, str | None]:
    """Versions of the load generator itself."""
    from llmload import __version__

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"llmload": __version__, "locust": version("locust"), "gevent": version("gevent"),
            "python": platform.python_version(), "platform": platform.platform(),
            "implementation": sys.implementation.name}


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        value = _URL_CREDENTIALS.sub(f"{REDACTED}@", value)
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, secrets) for v in value]
    return value


def redact_config(config: Config) -> dict[str, Any]:
    """The config as a JSON-able dict with secret header values, URL credentials and the key removed."""
    data = config.model_dump(mode="json")
    headers = data["target"].get("headers") or {}
    data["target"]["headers"] = {k: (REDACTED if SECRET_HEADER.search(k) else v) for k, v in headers.items()}
    return _scrub(data, secret_values(config))


#: what `shape_record` keeps of each planned step (a trace's arrivals are left out: they are plan.json's)
_STEP_KEYS = ("label", "phase", "arrival", "target_rate", "concurrency", "requests", "warmup_s", "duration_s",
              "drain_timeout_s")


def shape_record(shape: Any, steps: list[Any], *, replaced_kind: str | None) -> dict[str, Any]:
    """The manifest's `shape`: the class that planned the run and its steps as planned. `replaced_kind`
    is the config's `shape:` kind when a locustfile's own shape planned the run instead (else None)."""
    cls = type(shape)
    return {"class": cls.__name__, "module": cls.__module__,
            "source": "locustfile" if replaced_kind else "config",
            "replaces_config_shape": replaced_kind,
            "steps": [{key: getattr(step, key, None) for key in _STEP_KEYS} for step in steps]}


def fingerprint(conditions: dict[str, Any]) -> str:
    """A stable short hash of the fixed conditions (key order and run times do not matter)."""
    text = json.dumps(conditions, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _gpu_facts(config: Config, nvml: object, timeout_s: float) -> dict[str, Any]:
    setting = config.telemetry.gpu
    if setting == "off":
        return {"source": "off", "available": False}
    if setting.startswith("dcgm:"):
        url = dcgm_url(setting)
        try:
            samples = parse_exposition(fetch_text(url, timeout_s=timeout_s))
        except TelemetryError as exc:
            return {"source": url, "available": False, "reason": str(exc)}
        gpus = {s.labels.get("gpu"): s.labels.get("modelName") for s in samples
                if s.name == "DCGM_FI_DEV_FB_USED" and "gpu" in s.labels}
        names = sorted({n for n in gpus.values() if n})
        return {"source": url, "available": bool(gpus), "count": len(gpus),
                "names": names, "devices": [{"index": k, "name": v} for k, v in sorted(gpus.items())]}
    sampler = NvmlSampler(nvml)
    if not sampler.open(log_missing=False):
        return {"source": "nvml", "available": False, "reason": sampler.reason}
    try:
        devices = sampler.devices()
    finally:
        sampler.close()
    return {"source": "nvml", "available": True, "count": len(devices),
            "names": sorted({d["name"] for d in devices if d.get("name")}),
            "driver_version": devices[0].get("driver_version") if devices else None, "devices": devices}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _conditions(config: Config, facts: dict[str, Any], gpu: dict[str, Any], seeds: Any) -> dict[str, Any]:
    c, endpoints = config.conditions, config.target.endpoints
    names = gpu.get("names") or []
    conditions = {
        "server": _first(facts.get("flavor"), config.target.server),
        "server_version": facts.get("server_version"),
        "model": _first(facts.get("model"), config.target.model),
        "model_path": facts.get("model_path"),
        "model_revision": _first(facts.get("model_revision"), c.model_revision),
        "quantization": _first(facts.get("quantization"), c.quantization),
        "context_length": _first(facts.get("context_length"), c.context_length),
        "max_num_seqs": _first(facts.get("max_num_seqs"), c.max_num_seqs),
        "kv_block_size": facts.get("kv_block_size"),
        "kv_num_gpu_blocks": facts.get("kv_num_gpu_blocks"),
        "kv_cache_dtype": facts.get("kv_cache_dtype"),
        "prefix_cache": _first(facts.get("prefix_cache"), c.prefix_cache),
        "gpu_memory_utilization": facts.get("gpu_memory_utilization"),
        "gpus": _first(c.gpus, gpu.get("count")),
        "gpu_model": _first(c.gpu_model, ", ".join(names) or None),
        "driver_version": gpu.get("driver_version"),
        "gpu_residency": facts.get("gpu_residency"),
        "instances": _first(c.instances, len(endpoints)),
        "routing": config.target.routing if len(endpoints) > 1 else None,
        "api": config.target.api,
        "client_max_concurrency": config.client.max_concurrency,
        "server_admission_cap": c.server_admission_cap,
        "ollama_num_parallel": c.ollama_num_parallel,
        "ollama_max_queue": c.ollama_max_queue,
        "ollama_context_length": c.ollama_context_length,
        "ollama_keep_alive": c.ollama_keep_alive,
        "cache_state": facts.get("cache_state"),
        "ignore_eos": config.requests.ignore_eos,
        "seeds": seeds,
    }
    conditions.update({f"extra.{k}": v for k, v in sorted(c.extra.items())})
    return conditions


def _mismatches(config: Config, facts: dict[str, Any]) -> list[str]:
    """Where the config states a condition and the server reports another value."""
    out = []
    for key in ("context_length", "max_num_seqs", "model_revision", "quantization"):
        stated, seen = getattr(config.conditions, key), facts.get(key)
        if stated is not None and seen is not None and str(stated) != str(seen):
            out.append(f"conditions.{key} is {stated!r} in the config but the server reports {seen!r}")
    return out


def build_manifest(config: Config, *, run_id: str, seeds: Any, plan_kind: str, probe: bool = True,
                   nvml: object = None, timeout_s: float = 3.0,
                   servers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The manifest of a run about to start (see the module docstring). Probes take a few requests.
    `servers`: probe answers made elsewhere (a virtual run probes its simulated server's pages): no
    target is asked, nor the GPU."""
    headers = request_headers(config)
    if servers is not None:
        probe, servers = False, list(servers)
    else:
        servers = []
        if probe:
            for base in config.target.endpoints:
                servers.append(probe_server(base, flavor=config.target.server, model=config.target.model,
                                            headers=headers, timeout_s=timeout_s))
    facts = servers[0]["facts"] if servers else {}
    gpu = _gpu_facts(config, nvml, timeout_s) if probe else {"source": config.telemetry.gpu}
    conditions = _conditions(config, facts, gpu, seeds)
    warnings = _mismatches(config, facts)
    for other in servers[1:]:
        differing = [k for k, v in other["facts"].items() if v != facts.get(k) and k != "cache_state"]
        if differing:
            warnings.append(f"{other['url']} differs from {servers[0]['url']} in {', '.join(differing)}")
    from llmload import __version__

    manifest = {
        "llmload_version": __version__,  # also under client.llmload, beside the other versions
        "run_id": run_id,
        "created_at": now(),
        "plan_kind": plan_kind,
        "seeds": seeds,
        "fingerprint": fingerprint(conditions),
        "conditions": conditions,
        "servers": servers,
        "gpu": gpu,
        "client": client_versions(),
        "config": redact_config(config),
        "warnings": warnings,
    }
    return _scrub(manifest, secret_values(config))


def write_manifest(run_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """Write `run_dir/manifest.json` (atomically: a reader never sees half a file)."""
    path = Path(run_dir) / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    text = redact_text(json.dumps(manifest, indent=2, default=str))  # whatever was added after the build
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def record_clocks(run_dir: str | Path, clocks: dict[str, dict]) -> None:
    """Put `clocks` (per worker: offset, uncertainty, drift; `llmload.runtime.wire.clocksync`) into an
    existing `manifest.json` (a run whose manifest was not written gets none)."""
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        return
    manifest = read_manifest(run_dir)
    manifest["clocks"] = clocks
    write_manifest(run_dir, manifest)


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """`manifest.json` of a run directory; TelemetryError when missing or unreadable."""
    path = Path(run_dir) / "manifest.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TelemetryError(f"{path}: cannot read manifest: {exc}") from None


def diff_conditions(manifest_a: dict[str, Any], manifest_b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """`(key, value in a, value in b)` for every fixed condition that differs, sorted by key."""
    a, b = manifest_a.get("conditions") or {}, manifest_b.get("conditions") or {}
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if json.dumps(a.get(k), sort_keys=True, default=str) != json.dumps(b.get(k), sort_keys=True, default=str)]
