"""The manifest as the report shows it: flattened to `a.b.c` rows, with anything secret-looking dropped.

The manifest is written with secrets already removed; this is a second guard at the last step before
text leaves the machine in a report. An entry is dropped when its key is named like a credential
(`api_key`, `*_token`, `authorization`, `password`, `secret` …) unless the key only says where the
secret lives (`api_key_env`, `api_key_file`), or when its value looks like one (`Bearer …`, `sk-…`).
Token counts (`input_tokens`, `max_tokens`) are not credentials and stay.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["conditions_of", "flatten", "is_secret_key", "redact"]

_SECRET_KEY = re.compile(
    r"(?i)(api[_-]?key|secret|passw(or)?d|authori[sz]ation|bearer|credential|cookie|private[_-]?key"
    r"|(^|[_-])token$|^key$|[_-]key$)"
)
_SAFE_SUFFIX = re.compile(r"(?i)[_-](env|file|path|var)$")
_SECRET_VALUE = re.compile(r"(?i)^\s*(bearer|basic)\s+\S+|^sk-[A-Za-z0-9_-]{6,}|^hf_[A-Za-z0-9]{10,}")


def is_secret_key(name: str) -> bool:
    """True when a key is named like a credential (and not just where one is stored)."""
    return bool(_SECRET_KEY.search(name)) and not _SAFE_SUFFIX.search(name)


def redact(value: Any) -> Any:
    """A copy of nested dicts/lists without secret-named keys or secret-looking strings."""
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()
                if not is_secret_key(str(k)) and not _looks_secret(v)}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value if not _looks_secret(v)]
    return value


def _looks_secret(value: Any) -> bool:
    return isinstance(value, str) and bool(_SECRET_VALUE.search(value))


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """`{"a": {"b": 1}, "c": [1, 2]}` -> `[("a.b", 1), ("c", "1, 2")]`, redacted first."""
    value = redact(value)
    rows: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        if not value and prefix:
            return rows
        for key, item in value.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(item, dict):
                rows.extend(flatten(item, name))
            elif isinstance(item, list) and any(isinstance(x, dict) for x in item):
                for i, x in enumerate(item):
                    rows.extend(flatten(x, f"{name}[{i}]"))
            else:
                rows.append((name, item))
    elif prefix:
        rows.append((prefix, value))
    return rows


def conditions_of(manifest: dict | None) -> dict[str, Any]:
    """The fixed conditions of a run: `manifest["conditions"]` (what the server reported, else the
    config), completed by the config's `conditions:` for what only the user can state (cost_per_hour,
    owner, notes). Redacted."""
    if not manifest:
        return {}
    stated = ((manifest.get("config") or {}).get("conditions")) or {}
    recorded = manifest.get("conditions")
    recorded = recorded if isinstance(recorded, dict) else {}
    merged = {k: v for k, v in stated.items() if not isinstance(v, dict)}
    merged.update({k: v for k, v in recorded.items() if v is not None or k not in merged})
    return redact(merged)
