"""Small blocking HTTP GETs for telemetry and probes (stdlib `urllib`, a short timeout).

Plain urllib works both in a normal process and on a Locust master patched by gevent (its sockets are
then cooperative). Every failure becomes a `TelemetryError` whose message names the URL and the reason;
`HttpStatusError` keeps the status so callers can tell "not available here" (404/501) from a failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from llmload.errors import TelemetryError

__all__ = ["HttpStatusError", "fetch_bytes", "fetch_json", "fetch_text"]

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
    request = Request(url, data=data, headers=dict(headers or {}), method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urlopen(request, timeout=timeout_s) as resp:
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
