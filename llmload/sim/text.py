"""Prompt counting and answer text by the sim's tokenizer rule (`llmload.tokens`).

Prompt tokens: a plain prompt counts `count_tokens(prompt)` (a list of token ids counts its length); a chat
counts, per message, `count_tokens(content) + 4` (the 4 stand for a chat template's role markers; text
parts of a multi-part content are summed). Answers: token `k` of a request is a word (or, every
ninth token, a comma) chosen so that the concatenated text has exactly `output_tokens` tokens by the same
rule, and each streamed delta is exactly one token. If the prompt asks `What is A+B` with integers, the
answer starts with the sum, so quality checks like "What is 2+2? Answer with a number." pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from llmload.tokens import count_tokens, split_tokens

__all__ = ["CHAT_TOKENS_PER_MESSAGE", "AnswerText", "chat_prompt_tokens", "prompt_text", "prompt_token_list",
           "prompt_tokens"]

CHAT_TOKENS_PER_MESSAGE = 4
_SUM = re.compile(r"What is\s*(-?\d+)\s*\+\s*(-?\d+)", re.IGNORECASE)
_WORDS = ("the", "model", "answers", "with", "simulated", "tokens", "for", "load", "testing", "and",
          "each", "word", "is", "one", "token", "in", "this", "stream", "of", "text")


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def prompt_tokens(prompt: object) -> int:
    """Tokens of a completion prompt: a string, a list of strings, or a list of token ids."""
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list):
        if all(isinstance(x, int) for x in prompt):
            return len(prompt)
        return sum(prompt_tokens(x) for x in prompt)
    return 0


def chat_prompt_tokens(messages: Iterable[dict]) -> int:
    """Tokens of a chat: per message, its content's tokens plus 4."""
    return sum(count_tokens(_content_text(m.get("content"))) + CHAT_TOKENS_PER_MESSAGE for m in messages)


def prompt_token_list(prompt: object, messages: list | None = None) -> list:
    """The prompt's tokens by the same rule (what the prefix cache hashes): a chat renders each message
    as `<|im_start|>`, its role, a newline, its content's tokens and `<|im_end|>` (the 4 template tokens);
    a prompt of token ids is its ids."""
    if messages is not None:
        out: list = []
        for m in messages:
            out += ["<|im_start|>", str(m.get("role", "")), "\n"]
            out += split_tokens(_content_text(m.get("content")))
            out.append("<|im_end|>")
        return out
    if isinstance(prompt, str):
        return split_tokens(prompt)
    if isinstance(prompt, list):
        if all(isinstance(x, int) for x in prompt):
            return list(prompt)
        return [tok for x in prompt for tok in prompt_token_list(x)]
    return []


def prompt_text(prompt: object, messages: Iterable[dict] | None = None) -> str:
    """The text the sum rule looks in: the prompt, or the last user message."""
    if messages:
        users = [m for m in messages if m.get("role") == "user"] or list(messages)
        return _content_text(users[-1].get("content")) if users else ""
    return prompt if isinstance(prompt, str) else ""


class AnswerText:
    """The deltas of one answer; `delta(k)` is token k (0-based) with the spacing that keeps tokens apart."""

    __slots__ = ("_head", "_offset")

    def __init__(self, prompt: str, offset: int = 0) -> None:
        match = _SUM.search(prompt or "")
        self._head = split_tokens(str(int(match.group(1)) + int(match.group(2)))) if match else []
        self._offset = offset

    def delta(self, k: int) -> str:
        """Token k of the answer as streamed (a word gets a leading space except the first token)."""
        if k < len(self._head):
            return self._head[k]
        j = k - len(self._head) + self._offset
        if j % 9 == 8:
            return ","
        word = _WORDS[j % len(_WORDS)]
        return word if k == 0 else " " + word

    def stop_at(self, stops: list[str], limit: int) -> tuple[int, str] | None:
        """Where a stop string ends the answer within `limit` tokens: (tokens sent before the token that
        completes it, at least 1; the stop string), or None."""
        text = ""
        longest = max(len(s) for s in stops)
        for k in range(limit):
            piece = self.delta(k)
            text += piece
            tail = text[-(longest + len(piece)):]
            for s in stops:
                if s in tail:
                    return max(1, k), s
        return None

    def text(self, n: int) -> str:
        """The first n tokens as one string."""
        return "".join(self.delta(k) for k in range(n))
