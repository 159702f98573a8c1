"""Multi-turn sessions: each turn carries the whole conversation so far, draws are seeded per session
and turn, and a session config with zero turns is one line, exit 2."""

from __future__ import annotations

import json

from llmload.cli import main
from llmload.client.sessions import SessionPlanner, draw_seconds
from llmload.config import ExponentialTime, Requests
from llmload.sim.text import chat_prompt_tokens

SESSIONS = {"turns": {"dist": "uniform", "min": 2, "max": 4}, "think_time": {"dist": "fixed", "value": "2s"},
            "new_tokens_per_turn": {"dist": "fixed", "value": 12}, "system_prompt_tokens": 30}


def _planner() -> SessionPlanner:
    requests = Requests(input_tokens={"dist": "fixed", "value": 40}, output_tokens={"dist": "fixed", "value": 5},
                        sessions=SESSIONS)
    return SessionPlanner(requests, api="openai-chat", model="m", server="vllm")


def test_each_turn_carries_the_whole_conversation() -> None:
    planner = _planner()
    turn = planner.start("s-1", index=3, seed=9)
    assert turn.turn == 0 and 2 <= turn.turns <= 4 and turn.think_s == 0.0
    assert [m["role"] for m in turn.messages] == ["system", "user"]
    seen = []
    while turn is not None:
        request = planner.request(turn)
        body = json.loads(request.body)
        assert body["messages"] == turn.messages and body["max_tokens"] == 5
        assert request.request_id == turn.request_id == ("s-1" if turn.turn == 0 else f"s-1-t{turn.turn}")
        assert request.planned_input_tokens == chat_prompt_tokens(turn.messages)  # what the sim counts
        seen.append(turn)
        turn = planner.next_turn(turn, f"answer {turn.turn}")
    assert len(seen) == seen[0].turns
    for prev, turn in zip(seen[:-1], seen[1:], strict=True):
        assert turn.messages[:len(prev.messages)] == prev.messages  # the conversation so far, unchanged
        assert turn.messages[len(prev.messages)] == {"role": "assistant", "content": f"answer {prev.turn}"}
        assert turn.messages[-1]["role"] == "user" and turn.think_s == 2.0


def test_draws_are_seeded_per_session_and_the_system_prompt_is_shared() -> None:
    a, b = _planner().start("x", 3, 9), _planner().start("y", 3, 9)
    assert a.messages == b.messages and a.turns == b.turns  # the same arrival: the same session
    other = _planner().start("z", 4, 9)
    assert other.messages[0] == a.messages[0] and other.messages[1] != a.messages[1]


def test_exponential_think_time_has_its_mean() -> None:
    import random

    rng = random.Random(1)
    draws = [draw_seconds(ExponentialTime(dist="exponential", mean=2.0), rng) for _ in range(4000)]
    assert 1.8 < sum(draws) / len(draws) < 2.2 and min(draws) >= 0


def test_zero_turns_is_one_line_exit_2(tmp_path, capsys) -> None:
    path = tmp_path / "run.yaml"
    path.write_text('target: {url: "http://127.0.0.1:9"}\nrequests:\n  sessions:\n'
                    "    turns: {dist: fixed, value: 0}\nshape:\n  ladder:\n    steps: [{rate: 1, duration: 2s}]\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.yaml:4 requests.sessions.turns" in err[0], err
