"""The master port against frames no worker sends (issue 44 item 3): the master decodes nothing of a peer
that has not proven the worker token but its hello (or the `client_ready` it refuses), a frame it cannot
read drops that peer and never Locust's receiving greenlet, and the run goes on with the real worker.

The bad frames come from real ZeroMQ sockets (pyzmq) to a real master on 127.0.0.1; the ground truth is the
run: its summary written and the real worker's records all there."""

from __future__ import annotations

import os
import subprocess

import msgpack
import pytest
import zmq
from runtime_helpers import base_config, records, write_config
from support import free_port

from llmload.runtime.launcher.child_env import TOKEN_ENV
from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue.workerauth import proof

TOKEN = "a-shared-worker-token-0123456789"

#: (identity, frame): not msgpack at all; msgpack whose datetime Locust's decoder cannot parse (a ValueError,
#: which Locust's listener does not catch); a frame too big to be a hello. `_send_bad_frames` adds a peer
#: that proves the token first and then sends both bad kinds (read as Locust reads, each dropped alone)
BAD_FRAMES = [
    (b"junk_peer", b"\xc1\xc1 this is not msgpack"),
    (b"date_peer", msgpack.packb(["client_ready", {"__datetime__": True, "as_str": "not a date"}, "date_peer"])),
    (b"big_peer", msgpack.packb(["client_ready", "x" * 100_000, "big_peer"])),
]


def _send_bad_frames(port: int) -> list[zmq.Socket]:
    """Connect one DEALER per bad frame and queue it (ZeroMQ delivers it once the master listens)."""
    context = zmq.Context.instance()
    sockets = []
    for identity, frame in BAD_FRAMES:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(frame)
        sockets.append(sock)
    proven = context.socket(zmq.DEALER)
    proven.setsockopt(zmq.IDENTITY, b"proven_peer")
    proven.setsockopt(zmq.LINGER, 0)
    proven.connect(f"tcp://127.0.0.1:{port}")
    proven.send(msgpack.packb(["llmload:hello", {"proof": proof(TOKEN, "proven_peer")}, "proven_peer"]))
    proven.send(msgpack.packb(["stats", {"__datetime__": True, "as_str": "not a date"}, "proven_peer"]))
    proven.send(b"\xc1 not msgpack from a proven peer")
    return [*sockets, proven]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bad_frames_on_the_master_port_leave_the_run_going(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                              "steps": [{"rate": 4, "duration": "3s"}]}})
    path, run_dir, port = write_config(tmp_path, config), tmp_path / "run", free_port()
    env = {**os.environ, TOKEN_ENV: TOKEN}
    master = subprocess.Popen(locust_command(path, run_dir, master=True, expect_workers=1, master_port=port),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sockets = _send_bad_frames(port)  # queued before the master binds: they reach it before any worker
    worker = subprocess.Popen(locust_command(path, None, worker=True, master_port=port), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, master_err = master.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        master.kill()
        _, master_err = master.communicate()
        pytest.fail(f"the run did not end: {master_err[-3000:]}")
    finally:
        for sock in sockets:
            sock.close()
        for proc in (master, worker):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert (run_dir / "summary.json").exists(), master_err[-3000:]
    assert len(records(run_dir)) == 12  # the real worker's 3 s at 4/s, all of them
    for identity in ("junk_peer", "big_peer"):  # never read again
        assert f"dropped peer {identity} on the master port" in master_err, master_err[-3000:]
    assert "refused worker date_peer" in master_err  # its type read, its data (the bad datetime) never
    assert master_err.count("corrupted message") == 2  # the proven peer's two bad frames, dropped alone
    assert "Traceback" not in master_err, master_err[-3000:]
