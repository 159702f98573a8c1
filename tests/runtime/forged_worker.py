"""A forged Locust worker for tests: it speaks Locust's protocol without llmload's worker code.

    python forged_worker.py HOST PORT OUT STOP_FILE [PROOF [CLIENT_ID]]

Connects to the master at HOST:PORT as CLIENT_ID (default `forged_0123456789abcdef`), optionally sends an
`llmload:hello` with PROOF (a bad one, say; `-`: none),
then every 0.5 s a `client_ready`, Locust `stats` and an `llmload:results` carrying one forged record
(request id `forged-000001`, TTFT 1 ms), until STOP_FILE exists or 120 s passed. Every message type it
received is written to OUT (JSON list), so a test can check what the master gave it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import gevent
import locust
from locust.rpc import Message, zmqrpc

from llmload.records import Record
from llmload.runtime.wire.messages import RESULTS, pack_record


def main() -> None:
    host, port, out, stop = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    proof = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "-" else None
    client_id = sys.argv[6] if len(sys.argv) > 6 else "forged_0123456789abcdef"
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
        out.write_text(json.dumps(received))
    listener.kill()
    out.write_text(json.dumps(received))
    client.close()


if __name__ == "__main__":
    main()
