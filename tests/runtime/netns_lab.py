"""Network namespaces for multi-host tests: each role (the sim, the master, each worker) in a namespace of
its own, linked to a hub namespace by a veth pair; nothing is added to the root namespace.

    with NetLab(["sim", "master", "w1"]) as lab:
        lab.popen("sim", [...])          # a process inside that role's namespace

Role k (from 1) has 10.231.k.2/24 on its side of its link, the hub 10.231.k.1. The hub also owns
`HUB_ADDRESS` (10.231.100.1, on its loopback), which every role routes through its link: services the
hub's delay proxies (`delay_proxy.py`) offer there are reached the same way from every namespace, so a
config's one `target.url` and one master address serve every worker. `close()` kills what `popen`
started and deletes the namespaces (their veth pairs go with them), also after a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["HUB", "HUB_ADDRESS", "NetLab", "netns_available"]

HUB = "hub"
HUB_ADDRESS = "10.231.100.1"


def netns_available() -> str | None:
    """None when namespaces can be made here (root and `ip`), else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class NetLab:
    """The namespaces of one test (names prefixed with this process's id: parallel tests never share)."""

    def __init__(self, roles: list[str]) -> None:
        self.prefix = f"ll{os.getpid() % 100000}"
        self.roles = list(roles)
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []

    def ns(self, role: str) -> str:
        return f"{self.prefix}{role}"

    def address(self, role: str) -> str:
        """The role's own address (on its side of its link to the hub)."""
        return f"10.231.{self.roles.index(role) + 1}.2"

    def __enter__(self) -> NetLab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        hub = self.ns(HUB)
        self._add(hub)
        _ip("-n", hub, "addr", "add", f"{HUB_ADDRESS}/32", "dev", "lo")
        for k, role in enumerate(self.roles, start=1):
            name = self.ns(role)
            self._add(name)
            near, far = f"{self.prefix}h{k}", f"{self.prefix}p{k}"
            # made inside the hub, so the root namespace never holds either end
            _ip("-n", hub, "link", "add", near, "type", "veth", "peer", "name", far, "netns", name)
            _ip("-n", hub, "addr", "add", f"10.231.{k}.1/24", "dev", near)
            _ip("-n", hub, "link", "set", near, "up")
            _ip("-n", name, "addr", "add", f"10.231.{k}.2/24", "dev", far)
            _ip("-n", name, "link", "set", far, "up")
            _ip("-n", name, "route", "add", f"{HUB_ADDRESS}/32", "via", f"10.231.{k}.1")

    def popen(self, role: str, cmd: list[str], *, log: Path | None = None, env: dict | None = None,
              stdout: int | None = None) -> subprocess.Popen:
        """Start `cmd` inside `role`'s namespace (its output to `log` when given)."""
        out = open(log, "wb") if log is not None else stdout  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(role), *cmd], stdout=out,
                                stderr=subprocess.STDOUT if log is not None else None,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.procs.append(proc)
        return proc

    def run(self, role: str, cmd: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns(role), *cmd], capture_output=True, text=True,
                              timeout=timeout_s)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.procs = []
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self.namespaces = []
