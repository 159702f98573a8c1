"""The worker token: a worker proves a shared secret before a master gives it anything or takes its records.

Locust's master accepts any process that connects to its port, sends it the step plans (the whole config)
and takes its statistics. Here every Locust process that loads our locustfile has, once `install()` ran
(from `session.add_options`, before Locust makes its runner):

- a worker that sends `llmload:hello` with `HMAC-SHA256(token, client id)` just before each Locust
  `client_ready` (the token itself never crosses the wire, so a fake master does not learn it);
- a master that handles a worker's messages only once that worker's hello proved the token: an
  unproven worker's `client_ready` is answered with `llmload:refused` (one line saying why, which our
  worker prints before it exits with code 2) and never registered, so Locust never sends it a spawn,
  our controller never sends it a step, and its statistics and `llmload:results` are dropped;
- a master that decodes nothing else of a peer that has not proven the token: Locust's listener decodes
  every frame with its datetime hook, and a frame it cannot read (not msgpack, a bad datetime: errors it
  does not catch) would end that greenlet and freeze the run. `_MasterDoor` reads an unproven peer's frame
  only if it is small (`UNPROVEN_FRAME_BYTES`), as plain msgpack with no hook, and only its type (a hello
  is checked, a `client_ready` refused, anything else dropped); a frame it cannot read drops that peer
  (its later frames are not read at all). A proven worker's frames are Locust's, but one that cannot be
  read is Locust's "corrupted message" (the frame dropped), never the end of the listener.

The token is `LLMLOAD_WORKER_TOKEN` (`llmload run --worker-token-file FILE` puts a file's first line
there). A process started without one makes a random one for itself: the local workers of
`--processes` are forked after the locustfile is imported, so they share it and need nothing, while a
remote worker without the master's token cannot join. `llmload run --master` refuses to start without
a token (it would lock every worker out). See docs/SECURITY.md.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import sys
from typing import Any

from llmload.runtime.launcher.child_env import TOKEN_ENV

__all__ = ["HELLO", "REFUSED", "UNPROVEN_FRAME_BYTES", "install", "proof", "worker_token"]

#: the pid of the process that made the token itself (a forked local worker inherits it and uses it;
#: the process that made it, or a worker started without one, has no token to prove)
_MADE_BY_ENV = "LLMLOAD_WORKER_TOKEN_MADE_BY"
#: `HelloMessage.TYPE` and `RefusedMessage.TYPE` (`llmload.runtime.wire.messages`, imported where used: the
#: launcher reads `TOKEN_ENV` without the runtime's imports)
HELLO = "llmload:hello"
REFUSED = "llmload:refused"
#: the largest frame the master reads from a peer that has not proven the token (a hello or a
#: `client_ready` is about 100 bytes); a bigger one drops the peer unread
UNPROVEN_FRAME_BYTES = 4096
#: the peers a master remembers as dropped (an attacker who makes more is only not remembered: its frames
#: are then dropped one at a time, read no further)
_DROPPED_MAX = 10_000

log = logging.getLogger("llmload.workerauth")

_installed = False


def worker_token() -> str | None:
    """The shared worker token of this process (None when it has none)."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        from llmload.redaction import register_secret

        register_secret(token)  # never in a log line or a run file
    return token or None


def _own_token_only() -> bool:
    """Whether this process made its token itself (so it cannot prove any master's token)."""
    return os.environ.get(_MADE_BY_ENV) == str(os.getpid())


def proof(token: str, client_id: str) -> str:
    """What a worker sends to prove `token` without revealing it: HMAC-SHA256 over its client id."""
    return hmac.new(token.encode(), f"llmload-worker:{client_id}".encode(), hashlib.sha256).hexdigest()


def install() -> None:
    """Patch Locust's master and worker runners (once per process) as the module docstring says."""
    global _installed
    if _installed:
        return
    _installed = True
    if worker_token() is None:
        os.environ[TOKEN_ENV] = secrets.token_hex(16)
        os.environ[_MADE_BY_ENV] = str(os.getpid())
    from locust.runners import MasterRunner, WorkerRunner

    from llmload.errors import MessageError
    from llmload.runtime.wire.messages import HelloMessage

    handle = MasterRunner.handle_message
    connect = WorkerRunner.connect_to_master
    listen = MasterRunner.client_listener

    def client_listener(self: Any) -> Any:
        self.server.recv_from_client = _MasterDoor(self).recv_from_client  # before Locust's loop reads a frame
        return listen(self)

    def handle_message(self: Any, client_id: str, msg: Any) -> None:
        proven: set[str] = self.__dict__.setdefault("_llmload_proven", set())
        if msg.type == HELLO:
            token = worker_token()
            try:
                hello = HelloMessage.from_dict(msg.data)
            except MessageError as exc:
                _refuse(self, client_id, f"its hello message cannot be read ({exc.problem}): run the master's "
                                         "llmload version")
                return
            if token and hmac.compare_digest(hello.proof.encode(), proof(token, client_id).encode()):
                proven.add(client_id)
            else:
                _refuse(self, client_id, "its worker token is not the master's")
            return
        if client_id in proven:
            handle(self, client_id, msg)
        elif msg.type == "client_ready":
            _refuse(self, client_id, f"it gave no worker token: set {TOKEN_ENV} (or --worker-token-file) on the "
                                     "worker to the master's")
        # anything else from an unproven worker (stats, results, heartbeats) is dropped

    def connect_to_master(self: Any) -> None:
        from locust.rpc import Message

        if REFUSED not in self.custom_messages:
            self.register_message(REFUSED, _refused)
        token = worker_token()
        if token is not None and not _own_token_only():
            self.client.send(Message(HELLO, HelloMessage(proof=proof(token, self.client_id)).to_dict(), self.client_id))
        connect(self)

    patches = ((MasterRunner, "handle_message", handle_message), (MasterRunner, "client_listener", client_listener),
               (WorkerRunner, "connect_to_master", connect_to_master))
    for cls, name, method in patches:  # Locust's runner classes, patched in place (once: `install`)
        setattr(cls, name, method)


def _refuse(runner: Any, client_id: str, reason: str) -> None:
    from llmload.runtime.wire.messages import RefusedMessage

    refused: set[str] = runner.__dict__.setdefault("_llmload_refused", set())
    if client_id not in refused:
        refused.add(client_id)
        log.warning("llmload: refused worker %s: %s", client_id, reason)
    runner.send_message(REFUSED, RefusedMessage(reason=reason).to_dict(), client_id=client_id)


def _refused(environment: Any, msg: Any, **kwargs: Any) -> None:
    from llmload.errors import MessageError
    from llmload.runtime.wire.messages import RefusedMessage

    try:
        reason = RefusedMessage.from_dict(msg.data).reason
    except MessageError as exc:  # refused all the same: say it, with what could not be read
        reason = f"its refusal cannot be read ({exc.problem})"
    print(f"llmload: error: the master refused this worker: {reason or 'no reason given'}", file=sys.stderr,
          flush=True)
    os._exit(2)


class _MasterDoor:
    """The master's `recv_from_client` (Locust's `rpc.Server`): a proven worker's frames as Locust reads
    them; of any other peer only a small hello or `client_ready`, read without Locust's hooks."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.dropped: set[str] = set()

    def recv_from_client(self) -> tuple[str, Any]:
        """The next message to handle, as Locust's `(client id, Message)`; ZeroMQ's errors as Locust's."""
        import zmq.error
        from locust.exception import RPCError

        while True:
            try:
                frames = self.runner.server.socket.recv_multipart()
            except zmq.error.ZMQError as exc:
                raise RPCError("ZMQ network broken") from exc
            got = self.read(frames)
            if got is not None:
                return got

    def read(self, frames: list[bytes]) -> tuple[str, Any] | None:
        """One message from a peer's frames (identity, payload), or None when it is dropped."""
        from locust.exception import RPCReceiveError
        from locust.rpc import Message

        try:
            client_id = frames[0].decode()
        except UnicodeDecodeError:
            return None  # no name to answer or remember: the frame alone is dropped
        if client_id in self.dropped:
            return None
        if len(frames) != 2:
            self.drop(client_id, f"{len(frames) - 1} frames in one message")
            return None
        payload = frames[1]
        if client_id in self.runner.__dict__.get("_llmload_proven", ()):
            try:
                return client_id, Message.unserialize(payload)
            except Exception as exc:  # Locust catches two kinds; a bad datetime, a bad format end its listener
                raise RPCReceiveError(f"ZMQ interrupted or corrupted message ({type(exc).__name__})",
                                      addr=client_id) from exc
        if len(payload) > UNPROVEN_FRAME_BYTES:
            self.drop(client_id, f"a frame of {len(payload)} bytes before it proved the worker token")
            return None
        try:
            import msgpack

            msg_type, data, node_id = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as exc:  # not msgpack, not three fields: nothing of it is read
            self.drop(client_id, f"a frame that cannot be read ({type(exc).__name__})")
            return None
        if msg_type not in (HELLO, "client_ready"):
            return None  # before the hello (a heartbeat, statistics): dropped unread, as always
        return client_id, Message(msg_type, data if msg_type == HELLO else None, node_id)

    def drop(self, client_id: str, why: str) -> None:
        """Read nothing more from `client_id` (a warning the first time)."""
        if len(self.dropped) < _DROPPED_MAX:
            self.dropped.add(client_id)
        log.warning("llmload: dropped peer %s on the master port: %s", client_id[:80], why)
        return None
