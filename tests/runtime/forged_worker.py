"""Forged Locust workers for tests: they speak Locust's protocol without llmload's worker code.

    python forged_worker.py HOST PORT STOP_FILE OUT PROOF CLIENT_ID [OUT PROOF CLIENT_ID ...]

Each (OUT, PROOF, CLIENT_ID) is one forged worker, side by side in one process (a greenlet and a
connection each: one Locust import for all): it connects to the master at HOST:PORT as CLIENT_ID,
optionally sends an `llmload:hello` with PROOF (a bad one, say; `-`: none),
then every 0.5 s a `client_ready`, Locust `stats` and an `llmload:results` carrying one forged record
(request id `forged-000001`, TTFT 1 ms), until STOP_FILE exists or 120 s passed. Every message type it
received is written to OUT (JSON list), so a test can check what the master gave it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import gevent
import locust
from locust.rpc import Message, zmqrpc

from llmload.records import Record
from llmload.runtime.wire.messages import RESULTS, pack_record


def main() -> None:
    host, port, stop, forgers = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
    gevent.joinall([gevent.spawn(forge, host, port, stop, Path(forgers[i]),
                                 forgers[i + 1] if forgers[i + 1] != "-" else None, forgers[i + 2])
                    for i in range(0, len(forgers), 3)], raise_error=True)


def forge(host: str, port: int, stop: Path, out: Path, proof: str | None, client_id: str) -> None:
    client = zmqrpc.Client(host, port, client_id)
    now = time.time()
    forged = Record(request_id="forged-000001", step="r1", worker="9", scheduled_at=now, outcome="ok",
                    sent_at=now, first_token_at=now + 0.001, last_token_at=now + 0.002, output_tokens=1)
    received: list[str] = []

    def listen() -> None:
        while True:
            msg = client.recv()
            received.append(msg.type)

    listener = gevent.spawn(listen)
    deadline = time.time() + 120
    while time.time() < deadline and not stop.exists():
        if proof:
            client.send(Message("llmload:hello", {"proof": proof}, client_id))
        client.send(Message("client_ready", locust.__version__, client_id))
        client.send(Message("stats", {"stats": [], "stats_total": {}, "errors": {}, "user_count": 0,
                                      "user_classes_count": {}}, client_id))
        client.send(Message(RESULTS, {"worker": "9", "rows": [pack_record(forged)], "cpu": 0.0}, client_id))
        gevent.sleep(0.5)
        write_atomically(out, received)
    listener.kill()
    write_atomically(out, received)
    client.close()


def write_atomically(out: Path, received: list[str]) -> None:
    """OUT whole or not at all: the test kills this process once its stop file is there, and a kill in the
    middle of a plain write left OUT empty (a CI-like run beside two CPU hogs read '' as JSON)."""
    part = out.with_name(out.name + ".part")
    part.write_text(json.dumps(received))
    os.replace(part, out)


if __name__ == "__main__":
    main()
