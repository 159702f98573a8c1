"""API keys: read once from an environment variable or a file, sent only as a header, never shown.

`Credentials.from_target(target, base_dir=...)` reads `target.api_key_env` or `target.api_key_file`.
The key lives in one private attribute; `repr`/`str` say `Credentials(***)`; `headers()` is the only
way out (the `Authorization: Bearer ...` header for the target), and `redact(text)` removes the key
from any text (an error body that echoes the header, an exception message) before it is stored.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from llmload.config import Target
from llmload.errors import ConfigError
from llmload.redaction import register_secret

__all__ = ["Credentials", "REDACTED"]

REDACTED = "***"


class Credentials:
    """A bearer key (or none) plus the target's extra headers."""

    __slots__ = ("_key", "_extra")

    def __init__(self, key: str | None = None, *, extra_headers: dict[str, str] | None = None) -> None:
        self._key = key or None
        self._extra = dict(extra_headers or {})
        register_secret(self._key)  # every writer and the console of this process now redact it
        for name, value in self._extra.items():
            if _secret_name(name):
                register_secret(value)

    @classmethod
    def from_target(cls, target: Target, *, base_dir: str | Path = ".") -> Credentials:
        """The key from `api_key_env` / `api_key_file` (relative to `base_dir`); ConfigError if named
        but missing or empty."""
        key = None
        if target.api_key_env:
            key = os.environ.get(target.api_key_env, "").strip()
            if not key:
                raise ConfigError(f"environment variable {target.api_key_env} is not set or empty",
                                  key="target.api_key_env")
        elif target.api_key_file:
            path = Path(base_dir) / target.api_key_file
            try:
                key = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"cannot read the API key file: {exc.strerror}", file=str(path),
                                  key="target.api_key_file") from None
            if not key:
                raise ConfigError("the API key file is empty", file=str(path), key="target.api_key_file")
        for url in target.endpoints:  # a password in a URL (http://user:pass@host) is a secret too
            register_secret(urlsplit(url).password)
        return cls(key, extra_headers=target.headers)

    @property
    def has_key(self) -> bool:
        return self._key is not None

    def headers(self) -> dict[str, str]:
        """Headers to send to the target: extra headers, then `Authorization` when a key is set."""
        out = dict(self._extra)
        if self._key:
            out["Authorization"] = f"Bearer {self._key}"
        return out

    def redact(self, text: str) -> str:
        """`text` with the key (and any extra header value that looks secret) replaced by ***."""
        if self._key and self._key in text:
            text = text.replace(self._key, REDACTED)
        for name, value in self._extra.items():
            if value and len(value) >= 8 and _secret_name(name) and value in text:
                text = text.replace(value, REDACTED)
        return text

    def __repr__(self) -> str:
        return f"Credentials({REDACTED if self._key else 'no key'})"

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        raise TypeError("Credentials are not serialisable: they hold a secret")


def _secret_name(header: str) -> bool:
    h = header.lower()
    return any(word in h for word in ("key", "token", "auth", "secret", "cookie"))
