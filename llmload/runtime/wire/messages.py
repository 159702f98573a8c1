"""The messages between the master's step controller and the workers' schedulers, each a typed payload.

Each step is one self-contained `llmload:step` message per worker (`StepMessage`): it carries everything
the worker needs (step spec, absolute start time, seed, shard, run directory, the whole config as a
dict), because a custom message sent from the master's `test_start` reaches a worker before that worker
applies the master's options (NOTES.md). Workers answer with batches of compact per-request summaries
(`ResultsMessage`, `llmload:results`) and one `DrainedMessage` (`llmload:drained`) per step; the master
may send a `CancelMessage` (`llmload:cancel`) when a step's drain times out. The master measures the
workers' clocks with `ClockPing` / `ClockPong` (`llmload:clock_ping` / `llmload:clock_pong`,
`llmload.runtime.wire.clocksync`). Before all that, a worker proves the worker token with a `HelloMessage`
and a master that does not take it says why in a `RefusedMessage` (`llmload.runtime.locustglue.workerauth`).

On the wire a message is `to_dict()`: plain types only, as it crosses ZeroMQ as msgpack (a local
runner hands the dict over in-process). `from_dict` is strict, as the receiving end must be: a field
missing, one it does not know, or one of the wrong type raises `MessageError` naming it, never a
default that hides a renamed key (a master and a worker of different llmload versions). The
constructors' defaults are for Python callers only; `to_dict` always writes every field.

What a malformed message does to a run: a worker that cannot read the master's step or cancel says so
in a `DrainedMessage` whose `error` is the one line (label `""` when it could not find the step's), so
the master ends the run with it; a master that cannot read a worker's results or drained notice ends
the run with the one line after the step under way (`read_message`, `StepController.fail`; a drained
notice it could not read leaves that step to its drain deadline). A clock exchange that cannot be read
is logged and left unanswered (the worker's records then stay on its own clock, said once).

A summary is a record's fields with `token_times` packed as float64 bytes: shipping per-event float
lists raised send lag (NOTES.md), one bytes object is cheap to encode.
"""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self, TypeVar

from llmload.errors import MessageError
from llmload.records import Record
from shapes.steps import StepSpec

__all__ = [
    "CANCEL",
    "CLOCK_PING",
    "CLOCK_PONG",
    "DRAINED",
    "RESULTS",
    "STEP",
    "CancelMessage",
    "ClockPing",
    "ClockPong",
    "DrainedMessage",
    "HelloMessage",
    "Message",
    "RefusedMessage",
    "ResultsMessage",
    "StepMessage",
    "pack_record",
    "read_message",
    "unpack_record",
]

STEP = "llmload:step"
CANCEL = "llmload:cancel"
RESULTS = "llmload:results"
DRAINED = "llmload:drained"
CLOCK_PING = "llmload:clock_ping"
CLOCK_PONG = "llmload:clock_pong"

M = TypeVar("M", bound="Message")


@dataclass(frozen=True, slots=True)
class Message:
    """A typed message: `TYPE` is its Locust message type; `to_dict` / `from_dict` its wire form."""

    TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """Every field, as plain msgpack-able data."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Any, *, worker: str | None = None) -> Self:
        """The message `data` carries; `MessageError` (one line naming the field) when a field is missing,
        unknown or of the wrong type. `worker` names the worker concerned in that line when `data` has
        no readable `worker` field of its own."""
        if isinstance(data, dict) and isinstance(data.get("worker"), str):
            worker = data["worker"]
        return cls(**_read_fields(cls, data, kind=cls.TYPE, worker=worker))


@dataclass(frozen=True, slots=True)
class StepMessage(Message):
    """master → worker: run one step (everything it needs; the step is sent again for every worker).

    `base_dir` resolves relative paths in the config (datasets, key files) as on the master;
    `clock_offset_s` is the worker's clock minus the master's as the master measured it
    (`llmload.runtime.wire.clocksync`; None: not measured, the worker keeps its own clock).
    """

    TYPE: ClassVar[str] = STEP

    step: StepSpec
    start_at: float
    seed: int
    shard: int
    shards: int
    run_dir: str
    config: dict[str, Any]
    worker: str
    base_dir: str = "."
    clock_offset_s: float | None = None

    def to_dict(self, *, step: dict[str, Any] | None = None) -> dict[str, Any]:
        """`step`: `self.step.to_dict()` made once for every worker's message (a trace step's takes
        ~0.1 s for 20,000 requests)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["step"] = self.step.to_dict() if step is None else step
        return data


@dataclass(frozen=True, slots=True)
class CancelMessage(Message):
    """master → worker: step `label`'s drain timed out: cancel its queued and in-flight requests."""

    TYPE: ClassVar[str] = CANCEL

    label: str


@dataclass(frozen=True, slots=True)
class ResultsMessage(Message):
    """worker → master: a batch of per-request summaries (`pack_record`) and the worker's CPU.

    `cpu`, `cpu_at`, `cpu_step`: the last CPU sample while sending (fraction of one core), its interval's
    start, its step (None: none yet); `sent`: per undrained step, its window's arrivals taken by a user so
    far (the web UI's running rates)."""

    TYPE: ClassVar[str] = RESULTS

    worker: str
    rows: list[dict] = field(default_factory=list)
    cpu: float | None = None
    cpu_at: float | None = None
    cpu_step: str | None = None
    sent: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DrainedMessage(Message):
    """worker → master: step `label` is over on this worker (`put` arrivals queued, `finished` recorded).

    `error`: None, or the one line saying why the step ended early (a greenlet of the worker failed, or
    it could not read the master's message: `label` is then `""` when it found none)."""

    TYPE: ClassVar[str] = DRAINED

    worker: str
    label: str
    put: int
    finished: int
    cancelled: bool = False
    at: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ClockPing(Message):
    """master → worker: exchange `seq` of a clock measurement, sent at master time `t0`."""

    TYPE: ClassVar[str] = CLOCK_PING

    seq: int
    t0: float


@dataclass(frozen=True, slots=True)
class ClockPong(Message):
    """worker → master: the answer to ping `seq`: its `t0`, and the worker's own clock at receipt (`t1`)
    and answer (`t2`)."""

    TYPE: ClassVar[str] = CLOCK_PONG

    seq: int
    t0: float
    t1: float
    t2: float


@dataclass(frozen=True, slots=True)
class HelloMessage(Message):
    """worker → master, just before Locust's `client_ready`: `proof` of the worker token
    (`llmload.runtime.locustglue.workerauth.proof`; the token itself never crosses the wire)."""

    TYPE: ClassVar[str] = "llmload:hello"

    proof: str


@dataclass(frozen=True, slots=True)
class RefusedMessage(Message):
    """master → worker: the master does not take this worker, and why (one line; the worker prints it
    and exits with code 2)."""

    TYPE: ClassVar[str] = "llmload:refused"

    reason: str


def read_message(cls: type[M], data: Any, *, worker: str | None, fail: Callable[[str], None]) -> M | None:
    """`cls.from_dict(data)`, or None once `fail` got the one line saying what is wrong with it: a
    handler of a run never raises on a message it cannot read."""
    try:
        return cls.from_dict(data, worker=worker)
    except MessageError as exc:
        fail(str(exc))
        return None


# ------------------------------------------------------------------ strict reading


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of dataclass `cls` (cached)."""
    hints = _HINTS.get(cls)
    if hints is None:
        resolved = typing.get_type_hints(cls)
        hints = _HINTS[cls] = {f.name: resolved[f.name] for f in fields(cls)}
    return hints


def _read_fields(cls: type, data: Any, *, kind: str, worker: str | None, path: str = "") -> dict[str, Any]:
    """`data`'s fields for `cls(**...)`: exactly its fields, each of its declared type; a nested
    dataclass (the step's spec and trace) is checked the same way and built with its own `from_dict`."""
    def error(problem: str, name: str | None) -> MessageError:
        return MessageError(problem, message_type=kind, field=name, worker=worker)

    if not isinstance(data, dict):
        where = f"field '{path[:-1]}': " if path else ""
        raise error(f"{where}expected a mapping, got {type(data).__name__}", path[:-1] or None)
    hints = _hints(cls)
    missing = [path + name for name in hints if name not in data]
    unknown = [path + str(key) for key in data if key not in hints]
    if missing or unknown:  # a renamed key is both: say both
        said = [_listed(what, names) for what, names in (("missing", missing), ("unknown", unknown)) if names]
        raise error("; ".join(said), (missing or unknown)[0])
    values = {}
    for name, hint in hints.items():
        value = data[name]
        nested = _dataclass_of(hint)
        if nested is not None and isinstance(value, dict):
            _read_fields(nested, value, kind=kind, worker=worker, path=f"{path}{name}.")
            if not path:  # the top level builds it; a nested one is built by its parent's `from_dict`
                from_dict = getattr(nested, "from_dict", None)
                if from_dict is None:  # a message's dataclass field reads itself (`StepSpec.from_dict`)
                    raise TypeError(f"{nested.__name__} (field {name!r}) has no from_dict")
                try:
                    value = from_dict(value)
                except (TypeError, ValueError) as exc:
                    raise error(f"field '{name}': {exc}", name) from None
        elif path and nested is None:
            pass  # a nested dataclass's own values: its `__post_init__` checks them
        elif not _fits(value, hint):
            raise error(f"field '{path}{name}': expected {_type_name(hint)}, got {type(value).__name__}",
                        path + name)
        values[name] = value
    return values


def _listed(what: str, names: list[str]) -> str:
    quoted = ", ".join(f"'{n}'" for n in names)
    return f"{what} field{'s' if len(names) > 1 else ''} {quoted}"


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass `hint` names (alone or in a union with None), else None."""
    for option in _options(hint):
        if dataclasses.is_dataclass(option) and isinstance(option, type):
            return option
    return None


def _options(hint: Any) -> tuple:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of type `hint` (the few forms messages use: scalars, unions with None, Any,
    list[X], dict[K, V])."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            return False
        if item in (dict, str):  # a batch's rows: one isinstance each (thousands a second on a master)
            return all(isinstance(v, item) for v in value)
        return item is Any or all(_fits(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(_fits(k, key) and _fits(v, item) for k, v in value.items())
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(option) for option in typing.get_args(hint))
    return str(hint) if typing.get_origin(hint) is not None else hint.__name__


# ------------------------------------------------------------------ per-request summaries


def pack_record(record: Record) -> dict[str, Any]:
    """A record as a compact message dict: per-event times as one bytes object."""
    row = record.as_dict()
    row["token_times"] = array("d", record.token_times).tobytes()
    row["token_counts"] = array("q", record.token_counts).tobytes()
    return row


def unpack_record(row: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `pack_record`: a plain dict with the record's fields (JSON-serialisable)."""
    out = dict(row)
    for key, code in (("token_times", "d"), ("token_counts", "q")):
        raw = out.get(key)
        if isinstance(raw, (bytes, bytearray)):
            values = array(code)
            values.frombytes(bytes(raw))
            out[key] = values.tolist()
        elif raw is None:
            out[key] = []
    return out
