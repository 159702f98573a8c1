"""`MasterWatch`'s decision, against real sockets: silence alone never loses the master (a master busy
finalising still listens); silence and a refused port do; and losing it stops the worker, says one
line and exits 3 (issue 44, item 8). The real processes: tests/runtime/test_distributed_endings.py."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

from llmload.runtime.locustglue.master_watch import LOST_EXIT, SILENT_S, UNREACHABLE_S, MasterWatch


class _Worker:
    run_dir = Path("/runs/r1")

    def __init__(self) -> None:
        self.abandoned = 0

    def abandon(self) -> int:
        self.abandoned += 1
        return 7


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _watch(port: int, *, silent_s: float | None, exits: list[int]) -> MasterWatch:
    last = None if silent_s is None else 1000.0 - silent_s
    runner = SimpleNamespace(master_host="127.0.0.1", master_port=port, last_heartbeat_timestamp=last)
    return MasterWatch(runner, _Worker(), clock=lambda: 1000.0, exit=exits.append)


def test_a_silent_master_that_still_listens_is_not_lost():
    with socket.socket() as busy:  # listening, never accepting: the kernel still completes the connection
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        watch = _watch(busy.getsockname()[1], silent_s=SILENT_S * 10, exits=[])
        assert watch.unreachable() is None and watch.lost() is None


def test_a_master_not_heard_from_yet_or_heard_lately_is_not_lost():
    port = _closed_port()
    assert _watch(port, silent_s=None, exits=[]).lost() is None  # not joined yet
    assert _watch(port, silent_s=SILENT_S / 2, exits=[]).lost() is None


def test_a_silent_master_whose_port_refuses_is_lost_and_the_worker_stops_in_one_line(capsys):
    port, exits = _closed_port(), []
    watch = _watch(port, silent_s=SILENT_S + 2, exits=exits)
    why = watch.lost()
    assert why is not None and "no heartbeat for 5 s" in why and "refused" in why
    watch.stop(why)
    assert watch.worker.abandoned == 1 and exits == [LOST_EXIT]
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert lines == [f"llmload: error: lost the master at 127.0.0.1:{port} ({why}): this worker stopped sending, "
                     "its in-flight requests recorded as cancelled: its 7 record(s) are in /runs/r1/records "
                     f"(exit code {LOST_EXIT})"]


def test_a_master_behind_a_cut_link_is_lost_only_after_locusts_own_timeout(monkeypatch):
    # a port that does not answer (a cut link: tests/runtime/test_netns.py cuts one for 6 s) may come
    # back; a refused one is a master that is gone
    port = _closed_port()
    watch = _watch(port, silent_s=SILENT_S + 7, exits=[])
    monkeypatch.setattr(watch, "unreachable", lambda: "no answer within 2 s")
    assert watch.lost() is None
    monkeypatch.setattr(watch, "unreachable", lambda: "no route to host")  # the netns test's cut link
    assert watch.lost() is None
    late = _watch(port, silent_s=UNREACHABLE_S + 1, exits=[])
    monkeypatch.setattr(late, "unreachable", lambda: "no answer within 2 s")
    assert late.lost() is not None and "no answer" in late.lost()
