"""API keys: read once from an environment variable or a file, sent only as a header, never shown.

`Credentials.from_target(target, base_dir=...)` reads `target.api_key_env` or `target.api_key_file`.
The key lives in one private attribute; `repr`/`str` say `Credentials(***)`; `headers()` is the only
way out (the `Authorization: Bearer ...` header for the target), and `redact(text)` removes the key
from any text (an error body that echoes the header, an exception message) before it is stored.

`open_url(request, timeout_s=...)` is how every urllib probe (pre-flight, telemetry scrapes) opens a URL:
a redirect to another origin (scheme, host or port) is followed without the credentials (`Authorization`
and every secret-named header): urllib's own handler copies them to wherever the server points.
"""

from __future__ import annotations

import base64
import os
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from llmload.errors import ConfigError
from llmload.redaction import register_secret

if TYPE_CHECKING:
    from llmload.config import Target

__all__ = ["Credentials", "REDACTED", "is_secret_header", "open_url", "same_origin"]

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
        extra = dict(target.headers)
        basic = _url_basic_auth(target.endpoints)
        if basic and not key and not any(name.lower() == "authorization" for name in extra):
            extra["Authorization"] = basic  # as telemetry sends it: the pre-flight and the load alike
        return cls(key, extra_headers=extra)

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


def _url_basic_auth(urls: list[str]) -> str | None:
    """`Basic <base64 user:password>` from the `user:password@` the target's URLs give (the same in
    each), or None; ConfigError when they differ (one set of headers goes to every endpoint)."""
    pairs: set[tuple[str, str] | None] = set()
    for url in urls:
        parts = urlsplit(url)
        pairs.add(None if parts.username is None else (unquote(parts.username), unquote(parts.password or "")))
    if len(pairs) > 1:
        raise ConfigError("give the same user:password@ in every URL, or none (one set of credentials goes "
                          "to every endpoint)", key="target.urls")
    only = pairs.pop()
    if only is None:
        return None
    user, password = only
    value = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    register_secret(value.split(" ", 1)[1])
    return value


def is_secret_header(header: str) -> bool:
    """Whether a header's name says its value is a secret (`Authorization`, `X-Api-Key`, `Cookie`, ...)."""
    return _secret_name(header)


def _secret_name(header: str) -> bool:
    h = header.lower()
    return any(word in h for word in ("key", "token", "auth", "secret", "cookie"))


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (the port their scheme implies when not given)."""
    pa, pb = urlsplit(a), urlsplit(b)

    def origin(parts: Any) -> tuple:
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            port = None
        return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)

    return origin(pa) == origin(pb)


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects, dropping credentials (and every secret-named header) when the origin changes."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not same_origin(req.full_url, new.full_url):
            for name in [n for n in new.headers if _secret_name(n)]:
                del new.headers[name]
            for name in [n for n in new.unredirected_hdrs if _secret_name(n)]:
                del new.unredirected_hdrs[name]
        return new


def open_url(request: urllib.request.Request | str, *, timeout_s: float, handlers: tuple | list = ()) -> Any:
    """`urllib.request.urlopen`, except that credentials never follow a redirect to another origin;
    `handlers`: more urllib handlers (`llmload.telemetry.http.open_url` adds connections that keep to a
    deadline for the whole exchange)."""
    return urllib.request.build_opener(_CredentialsStayHome, *handlers).open(request, timeout=timeout_s)
