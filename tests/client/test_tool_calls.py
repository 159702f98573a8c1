"""Tool calls: `requests.tools` / `tool_choice` go into the chat body, the sims answer with streamed
`tool_calls` deltas in their flavour's shape, the client counts those tokens apart, and a tool whose
parameters are not a JSON Schema is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from client_helpers import fixed_requests, sim_target

from llmload.cli import main
from llmload.client import RequestMix, Transport, send
from llmload.clock import now
from llmload.records import Record

TOOLS = [{"type": "function", "function": {"name": "search", "description": "look it up",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                          "required": ["q"]}}}]
CHOICES = {"vllm": "required", "llamacpp": "auto", "sglang": {"type": "function", "function": {"name": "search"}}}


@pytest.mark.slow
@pytest.mark.parametrize("flavor", sorted(CHOICES))
def test_streamed_tool_calls_are_counted_apart(sim_factory, flavor: str) -> None:
    sim = sim_factory(flavor=flavor, config={"load_time_s": "0.1s"})
    target = sim_target(sim.url, "openai-chat", flavor)
    requests = fixed_requests(20, 7, ignore_eos=True, tools=TOOLS, tool_choice=CHOICES[flavor])
    transport = Transport.from_target(target, concurrency=1)
    try:
        prepared = RequestMix(requests, target).build("tool-0", 0, seed=7)
        body = json.loads(prepared.body)
        assert body["tools"] == TOOLS and body["tool_choice"] == CHOICES[flavor]
        record = Record(request_id="tool-0", step="s0", worker="w0", scheduled_at=now())
        result = send(transport, prepared, record)
    finally:
        transport.close()
    (row,) = [r for r in sim.ground_truth_rows() if r["request_id"] == "tool-0"]
    assert record.outcome == "ok", record.error
    assert record.finish_reason == "tool_calls"
    assert record.output_tokens == row["output_tokens"] == 7 and record.tool_call_tokens == 7
    assert record.first_answer_at == record.first_token_at  # a tool call is the answer
    assert set(json.loads(result.text)) == {"q"}  # the streamed arguments are the whole JSON object


def test_plain_answers_have_no_tool_call_tokens(sim_factory) -> None:
    from client_helpers import send_batch

    sim = sim_factory(flavor="vllm", config={"load_time_s": "0.1s"})
    (rec,) = send_batch(sim_target(sim.url, "openai-chat", "vllm"), fixed_requests(20, 4), 1)
    assert rec.outcome == "ok" and rec.tool_call_tokens == 0


def test_a_tool_schema_that_is_not_json_schema_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "run.yaml"
    path.write_text('target: {url: "http://127.0.0.1:9"}\nrequests:\n  tools:\n'
                    '    - {type: function, function: {name: f, parameters: {type: 12}}}\n'
                    "shape:\n  ladder:\n    steps: [{rate: 1, duration: 2s}]\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "requests.tools" in err[0] and "not a JSON Schema" in err[0], err


@pytest.mark.slow
def test_a_session_sends_each_tool_result_back_as_its_next_turn(sim_factory) -> None:
    """`requests.sessions` with tools: a turn answered with a tool call is followed by the call and its
    result (`role: tool`), and the sim's prefix cache finds the conversation so far."""
    from llmload.client.sessions import SessionPlanner

    sim = sim_factory(flavor="vllm", config={"load_time_s": "0.1s"})
    target = sim_target(sim.url, "openai-chat", "vllm")
    requests = fixed_requests(40, 5, ignore_eos=True, tools=TOOLS, tool_choice="required",
                              sessions={"turns": {"dist": "fixed", "value": 3},
                                        "new_tokens_per_turn": {"dist": "fixed", "value": 30}})
    planner = SessionPlanner(requests, api="openai-chat", model="sim-model", server="vllm")
    transport = Transport.from_target(target, concurrency=1)
    turn, records = planner.start("sess-0", 0, seed=1), []
    try:
        while turn is not None:
            record = Record(request_id=turn.request_id, step="s0", worker="w0", scheduled_at=now())
            result = send(transport, planner.request(turn), record)
            assert record.outcome == "ok" and record.finish_reason == "tool_calls", record.error
            turn.answer, turn.tool_called = result.text, True
            records.append((record, turn))
            turn = planner.next_turn(turn, turn.answer)
    finally:
        transport.close()
    assert len(records) == 3
    for (_, prev), (_, turn) in zip(records[:-1], records[1:], strict=True):
        call, result = turn.messages[-2], turn.messages[-1]
        assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "search"
        assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == json.loads(prev.answer)
        assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    truth = {r["request_id"]: r for r in sim.ground_truth_rows()}
    rows = [truth[rec.request_id] for rec, _ in records]
    assert all(b["cached_tokens"] >= a["input_tokens"] // 16 * 16 - 16 > 0 for a, b in zip(rows[:-1], rows[1:], strict=True))
