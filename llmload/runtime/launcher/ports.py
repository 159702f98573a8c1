"""The ports a run will listen on, checked free before anything else happens (issue 44, item 8).

A second master started on a port another process holds used to run its whole pre-flight (12 s), then
print two tracebacks from Locust's bind, exit 3 and leave an empty run directory. `llmload run` now
tries each port it will listen on (the master's, the web UI's, the live metrics') with a bind of its
own first, before the run directory is made: a port in use is one line naming it and the flag or
variable that sets it, exit 2 (a user's choice to change), and nothing on disk.

The bind sets SO_REUSEADDR, as the listeners do, so a port left in TIME_WAIT by a run that just ended
counts as free and only a port something listens on is refused. A process that takes the port between
this check and the run's own bind still fails there; the check closes the ordinary case (a second run
started while the first is still up).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from llmload.errors import ConfigError

__all__ = ["Listener", "check_ports_free", "run_listeners"]


@dataclass(frozen=True, slots=True)
class Listener:
    """One socket the run will listen on, and the flag or variable that sets its port (for the error line)."""

    host: str
    port: int
    set_by: str


def run_listeners(*, master: bool, master_bind_host: str, master_port: int | None, default_master_port: int,
                  processes: int, web: bool, metrics_port: int | None, metrics_host: str) -> list[Listener]:
    """The listeners of one `llmload run` (a worker's none: it connects). `--processes` without a port
    asked for takes a free one, so only an asked-for port is checked."""
    found = []
    if master:
        found.append(Listener(master_bind_host, master_port or default_master_port, "--master-port"))
    elif processes and master_port:
        found.append(Listener("127.0.0.1", master_port, "--master-port"))
    if web:
        host = os.environ.get("LOCUST_WEB_HOST") or "127.0.0.1"
        port = os.environ.get("LOCUST_WEB_PORT") or "8089"
        if port.isdigit():  # anything else is Locust's to refuse
            found.append(Listener(host, int(port), "LOCUST_WEB_PORT"))
    if metrics_port:
        found.append(Listener(metrics_host, metrics_port, "--metrics-port"))
    return found


def check_ports_free(listeners: list[Listener]) -> None:
    """Raise `ConfigError` for the first listener whose port something already listens on: one line
    naming the flag or variable that sets it, as the live metrics' own bind says it
    (`--metrics-port 9100: cannot listen on 127.0.0.1:9100: Address already in use`)."""
    for listener in listeners:
        problem = _bind_problem(listener.host, listener.port)
        if problem is not None:
            raise ConfigError(f"cannot listen on {listener.host}:{listener.port}: {problem}",
                              key=f"{listener.set_by} {listener.port}")


def _bind_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound now (None: it can). An address that cannot be resolved is left to
    the listener to refuse with its own words."""
    host = "0.0.0.0" if host in ("*", "") else host
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError):
        return None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
