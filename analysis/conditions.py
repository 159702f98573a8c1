"""The fixed conditions a result holds for (METRICS.md "Fixed conditions") and the retest triggers.

`fixed_conditions(manifest, conditions)` flattens what the manifest recorded (the config as run:
target model and server kind, client cap, config `conditions:`; then the manifest's own flat
`conditions` map, which `llmload.telemetry.manifest` fills from the server's answers) into one
`{name: scalar}` map; a `Conditions` given to `analyze` overrides it.
`retest_triggers` turns that map into the seed's list of changes that invalidate the result.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.config import Conditions

__all__ = ["WORKSHEET_CONDITIONS", "fixed_conditions", "retest_triggers"]

#: the conditions the worksheet shows, in its order (seed 000 "固定条件")
WORKSHEET_CONDITIONS = (
    "model", "model_revision", "quantization", "server", "server_version", "driver_version", "gpus",
    "gpu_model", "gpu_residency", "context_length", "kv_cache_dtype", "kv_num_gpu_blocks", "prefix_cache",
    "max_num_seqs", "ollama_num_parallel", "ollama_max_queue", "ollama_context_length", "instances",
    "routing", "client_max_concurrency", "server_admission_cap", "cache_state",
)

_GENERAL_TRIGGERS = (
    "a different request mix (input/output token distribution, shared-prefix ratio, dataset)",
    "a different burst shape or arrival trace",
    "a model or weights update, a new server, engine or driver version",
    "more or fewer instances or GPUs, or CPU offload",
    "new SLO thresholds",
)


def _scalar(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(data, dict):
        return out
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and key != "extra":
            out.update(_flatten(value, f"{name}."))
        elif _present(value):
            out[name] = _scalar(value)
    return out


def _present(value: Any) -> bool:
    return value is not None and value != "" and value != {} and value != []


def fixed_conditions(manifest: dict, conditions: Conditions | None = None) -> dict[str, Any]:
    """One flat map of the run's fixed conditions (later sources override earlier ones)."""
    manifest = manifest or {}
    given_config = manifest.get("config")
    config = given_config if isinstance(given_config, dict) else {}
    out: dict[str, Any] = {}
    target = config.get("target") or {}
    if _present(target.get("model")):
        out["model"] = target["model"]
    if _present(target.get("server")):
        out["server"] = target["server"]
    client = config.get("client") or {}
    if "max_concurrency" in client:
        out["client_max_concurrency"] = client["max_concurrency"]
    out.update({k: v for k, v in _flatten(config.get("conditions")).items() if _present(v)})
    out.update({k: v for k, v in _flatten(manifest.get("conditions")).items() if _present(v)})
    if conditions is not None:
        given = conditions.model_dump()
        out.update({k: _scalar(v) for k, v in given.items() if _present(v)})
    return out


def retest_triggers(conditions: dict[str, Any]) -> list[str]:
    """Changes that invalidate the result: each recorded condition, then the seed's general ones."""
    skip = {"owner", "notes", "cost_per_hour"}
    recorded = [f"{k} changes (recorded: {v})" for k, v in conditions.items()
                if k not in skip and _present(v)]
    return recorded + list(_GENERAL_TRIGGERS)
