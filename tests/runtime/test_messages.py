"""The typed messages between master and workers (`llmload.runtime.wire.messages`): each survives the wire
(msgpack, as Locust sends it), and a field missing, unknown or of the wrong type is a `MessageError`
naming it -- never a default that hides a key renamed on one side. At run time a malformed message ends
the run with one line naming the worker and the field, on either side, instead of a traceback or a
silently wrong figure."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from types import SimpleNamespace

import gevent
import msgpack
import pytest

from llmload.clock import now
from llmload.config import parse_config
from llmload.errors import LLMLoadError, MessageError
from llmload.records import Record
from llmload.runtime.locustglue.seams import WorkerLink
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.states import ControllerState
from llmload.runtime.wire.clocksync import ClockSync, answer_ping
from llmload.runtime.wire.messages import (
    CANCEL,
    DRAINED,
    RESULTS,
    STEP,
    CancelMessage,
    ClockPing,
    ClockPong,
    DrainedMessage,
    HelloMessage,
    RefusedMessage,
    ResultsMessage,
    StepMessage,
    pack_record,
    unpack_record,
)
from llmload.runtime.worker.scheduler import WorkerRuntime
from shapes.plan import build_plan
from shapes.steps import StepSpec, TraceArrivals

RECORD = Record(request_id="r1-000001", step="r1", worker="0", scheduled_at=1.5, outcome="ok", sent_at=1.6,
                token_times=[1.7, 1.8123456789], token_counts=[1, 2], output_tokens=3)
TRACE_STEP = StepSpec(label="t0", index=0, phase="ladder", arrival="trace", duration_s=2.0, seed=5,
                      trace=TraceArrivals(offsets_s=[0.0, 0.5], input_tokens=[10, None], output_tokens=[5, 6],
                                          prefix_id=[None, 1], prefix_tokens=[None, 4]))
RATE_STEP = StepSpec(label="r2.00", index=1, phase="ladder", arrival="constant", target_rate=2.0, duration_s=1.0)

#: one of each message, every field set away from its default
MESSAGES = [
    StepMessage(step=TRACE_STEP, start_at=10.25, seed=3, shard=1, shards=2, run_dir="/r",
                config={"target": {"url": "http://127.0.0.1:9"}}, worker="1", base_dir="/cfg", clock_offset_s=-0.5),
    StepMessage(step=RATE_STEP, start_at=10.0, seed=1, shard=0, shards=1, run_dir="/r", config={}, worker="0"),
    CancelMessage(label="r2.00"),
    ResultsMessage(worker="1", rows=[pack_record(RECORD)], cpu=0.25, cpu_at=9.5, cpu_step="r2.00", sent={"r2.00": 7}),
    ResultsMessage(worker="0"),
    DrainedMessage(worker="1", label="r2.00", put=4, finished=4, cancelled=True, at=12.5, error="it broke"),
    ClockPing(seq=7, t0=1.0),
    ClockPong(seq=7, t0=1.0, t1=3.0, t2=3.25),
    HelloMessage(proof="9f86d081884c7d65"),
    RefusedMessage(reason="its worker token is not the master's"),
]


def _ids(message) -> str:
    return type(message).__name__


def _over_the_wire(data: dict) -> dict:
    """What a remote end receives: the msgpack round trip of Locust's `rpc.Message` (its options)."""
    return msgpack.loads(msgpack.dumps(data), raw=False, strict_map_key=False)


@pytest.mark.parametrize("message", MESSAGES, ids=_ids)
def test_every_message_survives_the_wire_as_plain_data(message):
    data = message.to_dict()
    assert set(data) == {f.name for f in dataclasses.fields(message)}  # every field, always
    assert type(message).from_dict(_over_the_wire(data)) == message
    assert type(message).from_dict(data) == message  # a local runner hands the dict over in-process


def test_a_shipped_record_keeps_its_packed_times_over_the_wire():
    results = ResultsMessage.from_dict(_over_the_wire(ResultsMessage(worker="0", rows=[pack_record(RECORD)]).to_dict()))
    (row,) = results.rows
    assert isinstance(row["token_times"], bytes)  # one bytes object, not a float list (NOTES.md: send lag)
    assert Record(**unpack_record(row)) == RECORD


def test_the_message_types_keep_their_locust_names():
    from llmload.runtime.locustglue import workerauth
    from llmload.runtime.wire import clocksync

    assert [m.TYPE for m in (StepMessage, CancelMessage, ResultsMessage, DrainedMessage, ClockPing, ClockPong,
                             HelloMessage, RefusedMessage)] == [
        "llmload:step", "llmload:cancel", "llmload:results", "llmload:drained", "llmload:clock_ping",
        "llmload:clock_pong", "llmload:hello", "llmload:refused"]
    assert (clocksync.PING, clocksync.PONG) == (ClockPing.TYPE, ClockPong.TYPE)
    assert (workerauth.HELLO, workerauth.REFUSED) == (HelloMessage.TYPE, RefusedMessage.TYPE)
    assert (STEP, CANCEL, RESULTS, DRAINED) == ("llmload:step", "llmload:cancel", "llmload:results", "llmload:drained")


def _every_field():
    for message in MESSAGES:
        for f in dataclasses.fields(message):
            yield pytest.param(message, f.name, id=f"{_ids(message)}.{f.name}")


@pytest.mark.parametrize(("message", "name"), list(_every_field()))
def test_a_missing_field_is_an_error_naming_it(message, name):
    data = message.to_dict()
    del data[name]
    with pytest.raises(MessageError) as raised:
        type(message).from_dict(data, worker="3")
    exc = raised.value
    assert exc.field == name and exc.message_type == message.TYPE and f"missing field '{name}'" in str(exc)
    assert isinstance(exc, LLMLoadError) and "\n" not in str(exc)


@pytest.mark.parametrize("message", MESSAGES, ids=_ids)
def test_an_unknown_field_is_an_error_naming_it(message):
    with pytest.raises(MessageError, match="unknown field 'spare'") as raised:
        type(message).from_dict({**message.to_dict(), "spare": 1})
    assert raised.value.field == "spare"


def test_a_renamed_key_names_both_ends_of_the_rename():
    data = MESSAGES[3].to_dict()
    data["cpu_now"] = data.pop("cpu")
    with pytest.raises(MessageError) as raised:
        ResultsMessage.from_dict(data)
    assert str(raised.value) == ("worker 1: malformed llmload:results message: missing field 'cpu'; "
                                 "unknown field 'cpu_now'")


@pytest.mark.parametrize(("message", "name", "value", "expected"), [
    (MESSAGES[3], "cpu", "high", "float or None"),
    (MESSAGES[3], "rows", {"a": 1}, "list[dict]"),
    (MESSAGES[3], "sent", {"r2.00": "7"}, "dict[str, int]"),
    (MESSAGES[5], "put", 4.0, "int"),
    (MESSAGES[5], "cancelled", "no", "bool"),
    (MESSAGES[1], "worker", 0, "str"),
    (MESSAGES[1], "step", None, "StepSpec"),
    (MESSAGES[6], "seq", True, "int"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_field_of_the_wrong_type_is_an_error_naming_it(message, name, value, expected):
    with pytest.raises(MessageError, match=re.escape(f"field '{name}': expected {expected}, got")):
        type(message).from_dict({**message.to_dict(), name: value})


def test_the_steps_own_fields_are_checked_too():
    data = MESSAGES[0].to_dict()
    step = data["step"] = dict(data["step"])
    step["rate"] = step.pop("target_rate")
    with pytest.raises(MessageError, match=r"missing field 'step.target_rate'; unknown field 'step.rate'"):
        StepMessage.from_dict(data)
    step["target_rate"] = step.pop("rate")
    step["trace"] = {**step["trace"], "offsets": step["trace"]["offsets_s"]}
    with pytest.raises(MessageError, match=r"unknown field 'step.trace.offsets'"):
        StepMessage.from_dict(data)
    step["trace"] = MESSAGES[0].to_dict()["step"]["trace"]
    step["phase"] = "warmup"
    with pytest.raises(MessageError, match="field 'step': step t0: phase must be one of"):
        StepMessage.from_dict(data)
    with pytest.raises(MessageError, match="worker 9: malformed llmload:drained message: expected a mapping, got list"):
        DrainedMessage.from_dict([1, 2], worker="9")


# ------------------------------------------------------------------ at run time: the worker


def _worker(tmp_path) -> tuple[WorkerRuntime, list[tuple[str, dict]]]:
    told: list[tuple[str, dict]] = []
    runtime = WorkerRuntime(lambda kind, data: told.append((kind, data)), build_sender=lambda *a, **k: None)
    runtime.worker = "2"
    return runtime, told


def test_a_worker_says_which_field_of_a_step_it_cannot_read_in_its_drained_notice(tmp_path, caplog):
    """A master of another version renames `start_at`: the old worker raised KeyError inside Locust's
    message handler (a traceback, the step left to its drain deadline); now the step drains at once on
    this worker, its notice's error the one line naming the field."""
    runtime, told = _worker(tmp_path)
    data = StepMessage(step=RATE_STEP, start_at=now() + 5, seed=1, shard=0, shards=1, run_dir=str(tmp_path),
                       config={}, worker="2").to_dict()
    data["starts_at"] = data.pop("start_at")
    with caplog.at_level(logging.ERROR, logger="llmload.worker"):
        runtime.on_step(data)
    (kind, notice), = told
    drained = DrainedMessage.from_dict(notice)
    assert kind == DRAINED and drained.label == "r2.00" and drained.worker == "2"
    assert drained.error == ("worker 2: malformed llmload:step message: missing field 'start_at'; "
                             "unknown field 'starts_at'")
    assert runtime.steps == {} and caplog.messages == [drained.error]


def test_a_cancel_the_worker_cannot_read_is_said_with_no_step(tmp_path):
    runtime, told = _worker(tmp_path)
    runtime.on_cancel({"step_label": "r2.00"})
    (kind, notice), = told
    drained = DrainedMessage.from_dict(notice)
    assert drained.label == "" and "missing field 'label'; unknown field 'step_label'" in drained.error


class LocalRunner:
    """Locust's local runner reduced to its messages, with a master that renames one key of each step."""

    def __init__(self, rename: tuple[str, str]) -> None:
        self.controller: StepController | None = None
        self.rename = rename
        self.worker = WorkerRuntime(self.to_master, build_sender=lambda *a, **k: None)

    def send_message(self, msg_type: str, data: dict, client_id=None) -> None:
        if msg_type == STEP:
            old, new = self.rename
            self.worker.on_step({(new if k == old else k): v for k, v in data.items()})

    def to_master(self, msg_type: str, data: dict) -> None:
        if msg_type == DRAINED:
            self.controller.on_drained(DrainedMessage.from_dict(data))


def test_a_step_the_worker_cannot_read_ends_the_run_at_once_with_one_line(tmp_path):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "30s",
                                                "steps": [{"rate": 10, "duration": "20s"},
                                                          {"rate": 20, "duration": "20s"}]}}})
    runner, lines = LocalRunner(rename=("shard", "shard_index")), []
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append)
    runner.controller = controller
    done = gevent.spawn(controller.run)
    done.join(timeout=15)
    assert done.dead  # at once: not after the step's 20 s of arrivals and 30 s of drain
    assert controller.state is ControllerState.FAILED
    error = "worker 0: malformed llmload:step message: missing field 'shard'; unknown field 'shard_index'"
    assert [line for line in lines if line.startswith("llmload: error:")] == [f"llmload: error: {error}; ending the run"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["error"] == plan["steps"][0]["error"] == error
    assert plan["steps"][1]["status"] == "not_run"


# ------------------------------------------------------------------ at run time: the master


class _Controller:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.results: list[ResultsMessage] = []
        self.drained: list[DrainedMessage] = []

    def fail(self, message: str) -> None:
        self.failed.append(message)

    def on_results(self, results: ResultsMessage) -> None:
        self.results.append(results)

    def on_drained(self, drained: DrainedMessage) -> None:
        self.drained.append(drained)


def _session():
    from llmload.runtime.locustglue.session import Session

    session = Session(SimpleNamespace(runner=None, parsed_options=None, process_exit_code=None))
    session.controller = _Controller()
    return session


def _sent(data: dict) -> SimpleNamespace:
    return SimpleNamespace(data=_over_the_wire(data), node_id="host_4f2a")


def test_the_master_hands_its_controller_typed_messages():
    session = _session()
    session._on_results(None, _sent(MESSAGES[3].to_dict()))
    session._on_drained(None, _sent(MESSAGES[5].to_dict()))
    assert session.controller.results == [MESSAGES[3]] and session.controller.drained == [MESSAGES[5]]
    assert session.controller.failed == []


@pytest.mark.parametrize(("handler", "message", "old", "new"), [
    ("_on_results", MESSAGES[3], "cpu", "cpu_now"),  # the old master read no CPU: no warning, no invalid step
    ("_on_results", MESSAGES[3], "sent", "sent_now"),  # the old master's web UI showed no running rate
    ("_on_drained", MESSAGES[5], "error", "failure"),  # the old master went on past a failed worker
])
def test_a_key_renamed_by_a_worker_fails_the_run_naming_the_worker_and_the_field(handler, message, old, new):
    """The old dict code read these with `.get(key, default)`: a worker of another version that renamed
    one of them went unnoticed, the run's figures silently wrong."""
    session = _session()
    data = message.to_dict()
    data[new] = data.pop(old)
    getattr(session, handler)(None, _sent(data))
    assert session.controller.failed == [f"worker 1: malformed {message.TYPE} message: missing field '{old}'; "
                                         f"unknown field '{new}'"]
    assert session.controller.results == session.controller.drained == []


def test_a_message_with_no_readable_worker_is_named_by_its_client_id():
    session = _session()
    session._on_drained(None, _sent({"label": "r2.00"}))
    (line,) = session.controller.failed
    assert line.startswith("worker host_4f2a: malformed llmload:drained message: missing fields 'worker', 'put'")


def test_a_drained_error_that_names_no_step_ends_the_run_at_once(tmp_path):
    config = parse_config({"target": {"url": "http://127.0.0.1:9"},
                           "shape": {"ladder": {"steps": [{"rate": 4, "duration": "2s"}]}}})
    lines: list[str] = []
    runner = SimpleNamespace(send_message=lambda *a, **k: None)
    controller = StepController(config, tmp_path, WorkerLink(runner), build_plan(config), out=lines.append)
    controller.on_drained(DrainedMessage(worker="0", label="", put=0, finished=0, error="worker 0: malformed x"))
    assert controller.failed and lines == ["llmload: error: worker 0: malformed x; ending the run"]


# ------------------------------------------------------------------ clock exchanges


def test_a_ping_the_worker_cannot_read_is_logged_and_left_unanswered(caplog):
    sent = []
    with caplog.at_level(logging.ERROR, logger="llmload.clocksync"):
        answer_ping({"seq": 1, "t_0": 2.0}, lambda kind, data: sent.append(data))
    assert sent == [] and caplog.messages == [
        "malformed llmload:clock_ping message: missing field 't0'; unknown field 't_0'"]


def test_a_pong_the_master_cannot_read_is_logged_and_its_exchange_times_out(caplog):
    def send(kind, data, client_id):
        pong = ClockPong(seq=data["seq"], t0=data["t0"], t1=5.0, t2=5.0).to_dict()
        pong.pop("t2")
        gevent.spawn(sync.on_pong, pong)

    sync = ClockSync(send, exchanges=2, timeout_s=0.05)
    with caplog.at_level(logging.WARNING, logger="llmload.clocksync"):
        assert sync.measure_one("c1", "1") is None
    assert caplog.messages[0] == "malformed llmload:clock_pong message: missing field 't2'"
    assert "worker 1 answered no clock exchange" in caplog.messages[-1]


# ------------------------------------------------------------------ the worker token's handshake


def test_a_refusal_the_worker_cannot_read_still_ends_it_with_one_line(monkeypatch, capsys):
    from llmload.runtime.locustglue import workerauth

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(workerauth.os, "_exit", exit_)
    with pytest.raises(SystemExit) as exited:
        workerauth._refused(None, SimpleNamespace(data={"why": "old master"}))
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("llmload: error: the master refused this worker: its refusal cannot be read "
                                       "(missing field 'reason'; unknown field 'why')\n")
