"""Multi-turn chats: each user keeps a few conversations going and every arrival is the next turn of one.

Each planned arrival picks one of the user's conversations (from the arrival's own seeded random),
sends its whole history (earlier user turns and the server's answers) plus a new user turn, and, once
answered, appends the new turn and the answer. Prompts grow turn by turn and every turn after the
first starts with what the server saw before, so a server with prefix caching (vLLM's automatic
prefix caching, the sim's `enable_prefix_caching`) prefills only the new part: compare TTFT with
caching on and off, or read `vllm:prefix_cache_hits_total`.

The arrival times, timing, outcomes and records are the runtime's, as for the built-in users: only
the request body is built here. The first turn of a conversation has the arrival's planned prompt
length (`requests.input_tokens`, chat template included); each later turn adds the answer and a user
message of `turn_tokens` tokens; every turn asks for the arrival's planned output
(`requests.output_tokens`). A conversation starts over after `max_turns` turns. The records'
`prefix_id` names the conversation for the turns that extend one (so `prefix_share_ratio` is the
share of such turns); `planned_input_tokens` is the whole history's size.

Run it (any chat config; `target.api` must be a chat API: openai-chat or ollama-chat):

    llmload run examples/multiturn.yaml --locustfile examples/locustfiles/multiturn.py
    locust -f examples/locustfiles/multiturn.py,shapes/llm.py --headless --llmload-config examples/multiturn.yaml

(this file replaces `locustfiles/llm.py` in `-f`: it imports `LLMUser` from there.)
"""

from __future__ import annotations

import itertools
import zlib

import locust  # noqa: F401  (first: it patches the standard library with gevent)

from llmload.client.mix import CHAT_TOKENS_PER_MESSAGE
from llmload.client.spec import RequestSpec
from llmload.runtime.worker.sending import PlannedArrival
from locustfiles.llm import LLMUser

__all__ = ["MultiTurnChatUser"]

_conversation_numbers = itertools.count(1)


class MultiTurnChatUser(LLMUser):
    """An `LLMUser` whose requests continue its own conversations (one request in flight per user)."""

    #: conversations each user keeps going
    conversations: int = 4
    #: a conversation starts over after this many turns (its prompt would outgrow the context)
    max_turns: int = 8
    #: prompt tokens of every user turn after the first
    turn_tokens: int = 24

    def __init__(self, environment) -> None:
        super().__init__(environment)
        #: per conversation: [id, messages so far]
        self.chats: list[list] = [[0, []] for _ in range(self.conversations)]
        #: request id -> (conversation, the new user turn), until its answer comes
        self.pending: dict[str, tuple[int, dict]] = {}

    def build_request(self, arrival: PlannedArrival) -> RequestSpec:
        number = arrival.random.randrange(self.conversations)
        chat = self.chats[number]
        if len(chat[1]) >= 2 * self.max_turns:
            chat[1] = []
        if not chat[1]:  # a new conversation: a new id (crc32 keeps ids of different workers apart)
            chat[0] = zlib.crc32(f"{arrival.worker}/{next(_conversation_numbers)}".encode())
        history = chat[1]
        first = not history
        # a first turn is the arrival's planned prompt length, template tokens included (as the mix's)
        content_tokens = max(1, arrival.input_tokens - CHAT_TOKENS_PER_MESSAGE) if first else self.turn_tokens
        turn = {"role": "user", "content": arrival.text(content_tokens)}
        self.pending[arrival.request_id] = (number, turn)
        return RequestSpec(messages=[*history, turn], max_tokens=arrival.output_tokens,
                           prefix_id=None if first else chat[0])

    def on_result(self, arrival, request, result) -> None:
        number, turn = self.pending.pop(arrival.request_id)
        if result.record.outcome == "ok":  # a failed turn is not part of the conversation
            self.chats[number][1] += [turn, {"role": "assistant", "content": result.text}]
