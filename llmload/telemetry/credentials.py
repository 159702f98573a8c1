"""The target's credentials as telemetry needs them: headers to send, and secret values to scrub.

The API key is read from `target.api_key_env` or `target.api_key_file` only to authenticate probes
and to remove the key from anything written; it is never stored.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from llmload.config import Config
from llmload.redaction import register_secret

__all__ = ["SECRET_HEADER", "api_key", "request_headers", "secret_values"]

#: header names whose values are secrets (Authorization, X-Api-Key, X-Auth-Token, Cookie ...)
SECRET_HEADER = re.compile(r"authorization|key|token|secret|password|cookie", re.IGNORECASE)


def api_key(config: Config) -> str | None:
    """The API key the config points at, or None (a missing file or variable is the client's error)."""
    target = config.target
    if target.api_key_env:
        value = os.environ.get(target.api_key_env, "").strip()
        if value:
            register_secret(value)
            return value
    if target.api_key_file:
        try:
            value = Path(target.api_key_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError:
            return None
        register_secret(value)
        return value or None
    return None


def request_headers(config: Config) -> dict[str, str]:
    """The config's headers plus `Authorization: Bearer <key>` when a key is configured."""
    headers = dict(config.target.headers)
    key = api_key(config)
    if key and not any(k.lower() == "authorization" for k in headers):
        headers["Authorization"] = f"Bearer {key}"
    return headers


def secret_values(config: Config) -> list[str]:
    """Every secret string that must never be written: the key and secret header values."""
    values = [v for k, v in config.target.headers.items() if SECRET_HEADER.search(k) and v]
    key = api_key(config)
    if key:
        values.append(key)
    for value in values:
        register_secret(value)  # the writers and the console of this process redact it from now on
    return sorted({v for v in values if len(v) >= 4} | {v.split(" ", 1)[-1] for v in values
                                                          if " " in v and len(v.split(" ", 1)[-1]) >= 4},
                  key=len, reverse=True)
