"""Multi-turn sessions (CONFIG.md `requests.sessions`): the conversation each turn sends.

`SessionPlanner(requests, mix).start(request_id, index, seed)` begins the session of one arrival and
returns its first `SessionTurn`; `request(turn)` is that turn's `PreparedRequest` (the whole
conversation so far, as chat messages); once its answer is in, `next_turn(turn, answer)` returns the
next turn (the conversation plus the answer and `new_tokens_per_turn` of new user text, and the think
time to wait before sending it), or None after the session's last turn.

Everything a session draws (its number of turns, each turn's new text, output length and think time)
comes from generators seeded by `requests.seed`, the step's seed, the arrival index and the turn, so a
session is the same in every process and every run. With `requests.tools`, a turn answered with a tool
call (finish_reason `tool_calls`, OpenAI chat) is followed by its result: the next turn sends the call
as an assistant `tool_calls` message and `new_tokens_per_turn` of text as the `tool` message, closing
the agent's loop, instead of a new user message. The system prompt (`system_prompt_tokens`) is one
text shared by every session of the run, as an application's is; each session's user text is its own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from llmload.apis import get_api
from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.lengths import LengthSampler
from llmload.client.mix import CHAT_TOKENS_PER_MESSAGE
from llmload.client.prompts import synthesize_words, words_for_tokens
from llmload.config import ExponentialTime, FixedDist, FixedTime, Requests, Sessions, UniformTime
from llmload.tokens import count_tokens

__all__ = ["SessionPlanner", "SessionTurn", "draw_seconds"]


def draw_seconds(dist: FixedTime | UniformTime | ExponentialTime, rng: random.Random) -> float:
    """One think time in seconds from its distribution."""
    if isinstance(dist, FixedTime):
        return float(dist.value)
    if isinstance(dist, UniformTime):
        return rng.uniform(dist.min, dist.max)
    return -dist.mean * math.log(1.0 - rng.random())


@dataclass(slots=True)
class SessionTurn:
    """One turn of a session: what it sends and where it stands."""

    session_id: str
    #: 0 for the session's first turn (an arrival of the plan), then 1, 2, ...
    turn: int
    turns: int
    #: the arrival that started the session and its step's seed (the draws' seeds)
    index: int
    seed: int
    #: the conversation this turn sends, ending with its new user message
    messages: list[dict] = field(default_factory=list)
    output_tokens: int = 0
    #: the wait after the previous answer before this turn is sent (0 for the first turn)
    think_s: float = 0.0
    #: this turn's answer text once received (the next turn's assistant message)
    answer: str = ""
    #: a trace's session: its later turns as recorded (`new_tokens`, `output_tokens`, `think_s`),
    #: replacing the draws; None: drawn from `requests.sessions`
    script: list[dict] | None = None
    #: this turn's answer was a tool call (finish_reason `tool_calls`): the next turn sends its result
    tool_called: bool = False

    @property
    def request_id(self) -> str:
        return self.session_id if self.turn == 0 else f"{self.session_id}-t{self.turn}"


class SessionPlanner:
    """Builds the turns of every session of a run (see the module docstring)."""

    def __init__(self, requests: Requests, *, api: str, model: str, server: str | None,
                 tokens_per_word: float = 1.0, base_dir: str = ".") -> None:
        self.requests: Requests = requests
        #: without `requests.sessions` only recorded (trace) sessions are planned: one turn each otherwise
        self.sessions: Sessions = requests.sessions or Sessions(turns=FixedDist(dist="fixed", value=1))
        self.api, self.model, self.server = api, model, server
        self.tokens_per_word = tokens_per_word
        #: OpenAI chat carries tool calls and `tool` results in its messages (Ollama's differ: not sent)
        self.chat_tools = get_api(api).chat and get_api(api).framing == "sse"
        self.turns = LengthSampler.from_dist(self.sessions.turns, base_dir=base_dir)
        self.new_tokens = LengthSampler.from_dist(self.sessions.new_tokens_per_turn, base_dir=base_dir)
        self.first_tokens = LengthSampler.from_dist(requests.input_tokens, base_dir=base_dir)
        self.output = LengthSampler.from_dist(requests.output_tokens, base_dir=base_dir)
        n_system = self.sessions.system_prompt_tokens
        self.system = None if n_system == 0 else synthesize_words(
            words_for_tokens(n_system, tokens_per_word), random.Random(f"llmload-system/{requests.seed}"))

    def _rng(self, index: int, seed: int, turn: int) -> random.Random:
        return random.Random(f"llmload-session/{self.requests.seed}/{seed}/{index}/{turn}")

    def start(self, request_id: str, index: int, seed: int) -> SessionTurn:
        """The first turn of the session that arrival `index` of the step seeded `seed` starts."""
        rng = self._rng(index, seed, 0)
        turns = self.turns.draw(rng)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": self._text(self.first_tokens.draw(rng), rng)})
        return SessionTurn(session_id=request_id, turn=0, turns=turns, index=index, seed=seed,
                           messages=messages, output_tokens=self.output.draw(rng))

    def start_recorded(self, request_id: str, index: int, seed: int, *, input_tokens: int | None,
                       output_tokens: int | None, later: list[dict]) -> SessionTurn:
        """The first turn of a trace's session: its recorded sizes, then `later` turns as recorded."""
        rng = self._rng(index, seed, 0)
        n_in = max(1, (input_tokens or self.first_tokens.draw(rng)) - CHAT_TOKENS_PER_MESSAGE)
        return SessionTurn(session_id=request_id, turn=0, turns=1 + len(later), index=index, seed=seed,
                           messages=[{"role": "user", "content": self._text(n_in, rng)}],
                           output_tokens=output_tokens or self.output.draw(rng), script=list(later))

    def next_turn(self, turn: SessionTurn, answer: str) -> SessionTurn | None:
        """The turn after `turn`, whose answer was `answer`; None after the last one."""
        if turn.turn + 1 >= turn.turns:
            return None
        rng = self._rng(turn.index, turn.seed, turn.turn + 1)
        if turn.script is not None:
            step = turn.script[turn.turn]
            new, out, think = int(step["new_tokens"]), int(step["output_tokens"]), float(step["think_s"])
        else:
            new, out = self.new_tokens.draw(rng), self.output.draw(rng)
            think = draw_seconds(self.sessions.think_time, rng)
        if turn.tool_called and self.requests.tools and self.chat_tools:  # close the loop: the tool's result
            call_id = f"call_{turn.session_id}_{turn.turn}"
            call = {"id": call_id, "type": "function",
                    "function": {"name": self._tool_name(self.requests.tools), "arguments": answer or "{}"}}
            messages = [*turn.messages, {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call_id, "content": self._text(new, rng)}]
        else:
            messages = [*turn.messages, {"role": "assistant", "content": answer},
                        {"role": "user", "content": self._text(new, rng)}]
        return SessionTurn(session_id=turn.session_id, turn=turn.turn + 1, turns=turn.turns, index=turn.index,
                           seed=turn.seed, messages=messages, output_tokens=max(1, out), think_s=think,
                           script=turn.script)

    def request(self, turn: SessionTurn) -> PreparedRequest:
        """The request of `turn`: its whole conversation, `X-Request-Id` its `request_id`."""
        body = build_body(self.api, model=self.model, max_tokens=turn.output_tokens, messages=turn.messages,
                          temperature=self.requests.temperature, ignore_eos=self.requests.ignore_eos,
                          server=self.server, reasoning_effort=self.requests.reasoning_effort,
                          tools=self.requests.tools, tool_choice=self.requests.tool_choice)
        planned = sum(count_tokens(m["content"] or "") + CHAT_TOKENS_PER_MESSAGE for m in turn.messages)
        return PreparedRequest(turn.request_id, self.api, body, planned_input_tokens=planned,
                               planned_output_tokens=turn.output_tokens)

    def _tool_name(self, tools: list[dict]) -> str:
        """The function the model was asked to call: `tool_choice`'s, else the first of `tools`'."""
        choice = self.requests.tool_choice
        if isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
            return choice["function"]["name"]
        return str(tools[0]["function"]["name"])

    def _text(self, n_tokens: int, rng: random.Random) -> str:
        return synthesize_words(words_for_tokens(n_tokens, self.tokens_per_word), rng)
