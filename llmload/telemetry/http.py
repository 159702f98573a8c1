"""Small blocking HTTP GETs for telemetry and probes (stdlib `urllib`, a short timeout).

Plain urllib works both in a normal process and on a Locust master patched by gevent (its sockets are
then cooperative). Every failure becomes a `TelemetryError` whose message names the URL and the reason;
`HttpStatusError` keeps the status so callers can tell "not available here" (404/501) from a failure.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import Request

from llmload.client.auth import open_url
from llmload.errors import TelemetryError

__all__ = ["HttpStatusError", "fetch_bytes", "fetch_json", "fetch_text", "public_url"]

#: the most we read from one telemetry answer (a vLLM /metrics page is ~100 kB)
MAX_BODY_BYTES = 16 * 1024 * 1024


class HttpStatusError(TelemetryError):
    """The server answered with a non-2xx status."""

    def __init__(self, message: str, *, url: str, status: int) -> None:
        super().__init__(message, url=url, status=status)
        self.url, self.status = url, status


def fetch_bytes(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None,
                body: Any = None) -> bytes:
    """GET `url` (POST a JSON `body` when given) and return the body; TelemetryError on any failure."""
    data = None if body is None else json.dumps(body).encode()
    url, headers = _split_credentials(url, dict(headers or {}))
    request = Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with open_url(request, timeout_s=timeout_s) as resp:  # credentials never follow a redirect away
            return resp.read(MAX_BODY_BYTES)
    except HTTPError as exc:
        exc.close()
        raise HttpStatusError(f"{url}: HTTP {exc.code}", url=url, status=exc.code) from None
    except TimeoutError:
        raise TelemetryError(f"{url}: timed out after {timeout_s:g}s", url=url) from None
    except URLError as exc:
        reason = exc.reason
        text = "timed out" if isinstance(reason, TimeoutError) else str(reason)
        raise TelemetryError(f"{url}: {text}", url=url) from None
    except (OSError, ValueError) as exc:  # reset, bad status line, invalid URL
        raise TelemetryError(f"{url}: {type(exc).__name__}: {exc}", url=url) from None


def public_url(url: str) -> str:
    """The URL without `user:password@`, for names that get written (sources, messages)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _split_credentials(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """`http://user:pw@host/x` -> `http://host/x` plus Basic auth (urllib refuses credentials in URLs)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, headers
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    if not any(k.lower() == "authorization" for k in headers):
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    return urlunsplit(parts._replace(netloc=netloc)), headers


def fetch_text(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None) -> str:
    """GET and decode as UTF-8 (bad bytes replaced: exposition text is ASCII in practice)."""
    return fetch_bytes(url, timeout_s=timeout_s, headers=headers).decode("utf-8", errors="replace")


def fetch_json(url: str, *, timeout_s: float, headers: Mapping[str, str] | None = None,
               body: Any = None) -> Any:
    """GET (or POST `body`) and parse JSON; TelemetryError when the answer is not JSON."""
    raw = fetch_bytes(url, timeout_s=timeout_s, headers=headers, body=body)
    try:
        return json.loads(raw)
    except ValueError:
        raise TelemetryError(f"{url}: answer is not JSON", url=url) from None
