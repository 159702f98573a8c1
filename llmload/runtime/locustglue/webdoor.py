"""The web UI's door for every request: only its own address may be asked, and no other origin may read.

Locust turns CORS on for every route of its web UI (`flask_cors.CORS(app)`, which echoes any `Origin`
into `Access-Control-Allow-Origin`), so another site could read the page that holds the UI's token, the
live data and `/metrics`, and its pre-flight allowed the token header. And a GET answered any `Host`: a
DNS name another site points at 127.0.0.1 ("DNS rebinding") made that site the UI's own origin.

`OwnOriginOnly` wraps the Flask app's WSGI callable (outside every Flask hook, whatever their order):

- a request whose `Host` is not this UI's address (`host_allowed`: a loopback name, an IP address, the
  name the UI was bound to, or a name in `LLMLOAD_WEB_HOSTS`) is answered 403 with one line, whatever
  its method or route;
- every `Access-Control-*` header is removed from the answer, unless the request's `Origin` is listed in
  `LLMLOAD_WEB_ORIGINS` (comma-separated, e.g. `https://grafana.example:3000`): CORS only when asked for;
- every answer says `X-Frame-Options: DENY` and `X-Content-Type-Options: nosniff` (no other page frames
  the UI to click its buttons, no script tag reads its JSON as script).

POSTs have their own, stricter check (`webui.check_post`: origin and the UI's token). docs/SECURITY.md.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["HOSTS_ENV", "ORIGINS_ENV", "OwnOriginOnly", "host_allowed"]

#: extra host names the UI may be reached by (comma-separated); loopback names and IP addresses always
HOSTS_ENV = "LLMLOAD_WEB_HOSTS"
#: origins allowed to read the UI from their pages (CORS), comma-separated; none by default
ORIGINS_ENV = "LLMLOAD_WEB_ORIGINS"


def _names(env: str) -> set[str]:
    return {h.strip().lower().rstrip("/") for h in os.environ.get(env, "").split(",") if h.strip()}


def host_allowed(host: str, *, bound: str = "") -> bool:
    """Whether a `Host` header names this UI: a loopback name (`localhost`, `*.localhost`), an IP address
    (an address cannot be rebound: a browser sent the request to it), `bound` (the `--web-host` the UI
    listens on, when it is a name), or a name in `LLMLOAD_WEB_HOSTS`. The port is not compared: an SSH
    tunnel or a published container port reaches the UI by another one, and a port is no defence."""
    name = host.strip()
    name = name.rsplit(":", 1)[0] if not name.endswith("]") else name
    name = name.strip("[]").lower().rstrip(".")
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    bound = bound.strip().strip("[]").lower().rstrip(".")
    return (bool(bound) and bound not in ("*", "0.0.0.0", "::") and name == bound) or name in _names(HOSTS_ENV)


class OwnOriginOnly:
    """WSGI middleware around the web UI's app: the module docstring's three rules."""

    SECURITY_HEADERS = (("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"))

    def __init__(self, app: Callable, *, bound: str = "", say: Callable[[str], None] = print) -> None:
        self.app = app
        self.bound = bound
        self.say = say

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST") or ""
        if not host_allowed(host, bound=self.bound):
            why = (f"Host {host[:100]!r} is not this UI's address (a loopback name, an IP address, the "
                   f"--web-host name; others in {HOSTS_ENV})")
            self.say(f"llmload: refused a web UI request to {environ.get('PATH_INFO', '')[:100]}: {why}")
            body = f"llmload: refused: {why}\n".encode()
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(body))), *self.SECURITY_HEADERS])
            return [body]
        origin = (environ.get("HTTP_ORIGIN") or "").strip().lower().rstrip("/")
        cors = bool(origin) and origin in _names(ORIGINS_ENV)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers
                    if (cors or not k.lower().startswith("access-control-"))
                    and k.lower() not in ("x-frame-options", "x-content-type-options")]
            return start_response(status, kept + list(self.SECURITY_HEADERS), *(() if exc_info is None else (exc_info,)))

        return self.app(environ, start)
