"""The master's door (issue 33 item 15): it listens on loopback unless told, a worker proves the shared
worker token before it gets anything, and a forged worker's records are never accepted. Against frames no
worker sends (issue 44 item 3): the master decodes nothing of a peer that has not proven the worker token
but its hello (or the `client_ready` it refuses), a frame it cannot read drops that peer and never
Locust's receiving greenlet, and the run goes on with the real worker.

The ground truth is what a forged worker (`forged_worker.py`: Locust's protocol, none of llmload's
worker code) received, and the run's records. The bad frames come from real ZeroMQ sockets (pyzmq) to the
same real master on 127.0.0.1: one run for every knock on the door."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import zmq
from runtime_helpers import base_config, records, write_config
from support import free_port, start_sim, stop_process

from llmload.cli import main
from llmload.runtime.launcher.child_env import TOKEN_ENV
from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue.workerauth import proof

TOKEN = "a-shared-worker-token-0123456789"
FORGED = Path(__file__).with_name("forged_worker.py")


def _config(tmp_path: Path, url: str = "http://127.0.0.1:9", **target: object) -> Path:
    config = base_config(url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                          "steps": [{"rate": 4, "duration": "3s"}]}})
    config["target"].update(target)
    return write_config(tmp_path, config)


def test_a_master_listens_on_loopback_unless_told(tmp_path):
    cmd = locust_command(tmp_path / "run.yaml", tmp_path / "run", master=True)
    assert cmd[cmd.index("--master-bind-host") + 1] == "127.0.0.1"
    cmd = locust_command(tmp_path / "run.yaml", tmp_path / "run", master=True, master_bind_host="0.0.0.0")
    assert cmd[cmd.index("--master-bind-host") + 1] == "0.0.0.0"


@pytest.mark.parametrize(("extra", "env", "said"), [
    ([], {}, f"--master needs a worker token of at least 16 characters, the same on every worker: set {TOKEN_ENV}"),
    (["--worker-token-file", "{tmp}/short"], {}, "the token must be at least 16 characters"),
    (["--worker-token-file", "{tmp}/none"], {}, "cannot read it"),
    ([], {TOKEN_ENV: TOKEN}, "target.headers.X-Api-Key: a secret header is not sent to remote workers"),
])
def test_a_master_without_a_token_or_with_a_shared_secret_does_not_start(tmp_path, monkeypatch, capsys, extra,
                                                                          env, said):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("llmload.runtime.launcher.run._start_gated", lambda: pytest.fail("Locust was started"))
    (tmp_path / "short").write_text("abc\n")
    path = _config(tmp_path, headers={"X-Api-Key": "secret-header-value-1"})
    code = main(["run", str(path), "--master", *[e.format(tmp=tmp_path) for e in extra]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, err
    assert "secret-header-value-1" not in err


#: two forged workers beside one real one in one run: one that proves nothing, one with a bad proof
FORGERS = {"forged_0123456789abcdef": None, "forged_fedcba9876543210": "bad"}
#: two real workers the master refuses before the real one joins: no token, another token
REFUSED_TOKENS = [None, "another-token-0123456789"]


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


@pytest.fixture(scope="module")
def door(tmp_path_factory) -> dict:
    """One master (a Locust process is ~3 s of CPU) for this module's door tests: the bad frames are queued
    before it listens, the forged workers and the refused real workers knock next, then one real worker with
    the token runs the 3 s step. What each saw is returned, not asserted: each test fails on its own part."""
    tmp = tmp_path_factory.mktemp("door")
    sim = start_sim(tmp, flavor="vllm")
    path = _config(tmp, sim.url)
    run_dir, port = tmp / "run", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMLOAD_WORKER_TOKEN")}
    stop = tmp / "stop"
    outs = {client_id: tmp / f"{client_id}.json" for client_id in FORGERS}
    forgers = [arg for client_id, forged_proof in FORGERS.items()
               for arg in (str(outs[client_id]), proof("not-the-token-at-all-000", client_id) if forged_proof else "-",
                           client_id)]
    forged = [subprocess.Popen([sys.executable, str(FORGED), "127.0.0.1", str(port), str(stop), *forgers],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    master = subprocess.Popen(locust_command(path, run_dir, master=True, expect_workers=1, master_port=port)
                              + ["--llmload-no-report"],  # what the workers sent is the point
                              env={**env, TOKEN_ENV: TOKEN}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    sockets = _send_bad_frames(port)  # queued before the master binds: they reach it before any worker
    refused: list[subprocess.Popen] = []
    worker = None
    seen: dict = {"refused": {}}
    try:
        deadline = time.time() + 60  # the forged workers are refused before the real ones join
        while time.time() < deadline and not all(out.exists() and json.loads(out.read_text() or "[]")
                                                 for out in outs.values()):
            time.sleep(0.2)
        refused = [subprocess.Popen(locust_command(path, None, worker=True, master_port=port),
                                    env=env if token is None else {**env, TOKEN_ENV: token},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for token in REFUSED_TOKENS]
        for token, proc in zip(REFUSED_TOKENS, refused, strict=True):
            _, err = proc.communicate(timeout=90)
            seen["refused"][token] = (proc.returncode, err)
        worker = subprocess.Popen(locust_command(path, None, worker=True, master_port=port), env={**env, TOKEN_ENV: TOKEN},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, seen["master_err"] = master.communicate(timeout=120)
    finally:
        for sock in sockets:
            sock.close()
        stop.touch()
        for proc in (master, worker, *refused, *forged):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait()
        stop_process(sim.proc)
    seen["forged"] = {client_id: json.loads(out.read_text()) if out.exists() else None
                      for client_id, out in outs.items()}
    seen["run_dir"] = run_dir
    return seen


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_forged_worker_gets_nothing_and_its_records_are_dropped(door):
    master_err = door["master_err"]
    for client_id, got in door["forged"].items():
        assert got and set(got) == {"llmload:refused"}, (client_id, got)  # no ack, no spawn, no step (config, headers)
        assert f"refused worker {client_id}" in master_err
    run_dir = door["run_dir"]
    df = records(run_dir)
    assert len(df) == 12 and "forged-000001" not in set(df["request_id"])  # the real worker's 3 s at 4/s
    assert "9" not in set(df["worker"])
    assert (run_dir / "summary.json").exists(), master_err[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("worker_token", REFUSED_TOKENS)
def test_a_worker_without_the_token_is_told_why_in_one_line(door, worker_token):
    returncode, stderr = door["refused"][worker_token]
    lines = [line for line in stderr.splitlines() if "llmload" in line]
    assert returncode == 2, stderr[-2000:]
    assert lines == ["llmload: error: the master refused this worker: "
                     + ("it gave no worker token: set LLMLOAD_WORKER_TOKEN (or --worker-token-file) on the worker "
                        "to the master's" if worker_token is None else "its worker token is not the master's")]
    assert TOKEN not in stderr


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bad_frames_on_the_master_port_leave_the_run_going(door):
    master_err, run_dir = door["master_err"], door["run_dir"]
    assert (run_dir / "summary.json").exists(), master_err[-3000:]
    assert len(records(run_dir)) == 12  # the real worker's 3 s at 4/s, all of them
    for identity in ("junk_peer", "big_peer"):  # never read again
        assert f"dropped peer {identity} on the master port" in master_err, master_err[-3000:]
    assert "refused worker date_peer" in master_err  # its type read, its data (the bad datetime) never
    assert master_err.count("corrupted message") == 2  # the proven peer's two bad frames, dropped alone
    assert "Traceback" not in master_err, master_err[-3000:]
