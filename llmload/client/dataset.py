"""Datasets of real prompts or chats (`requests.dataset`): JSONL, one request per line.

Accepted line shapes:
- `{"prompt": "..."}`;
- `{"messages": [{"role": "user", "content": "..."}, ...]}` (OpenAI chat);
- ShareGPT `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}`: the turns
  up to and including the first human turn become the messages (system turns kept), as the usual
  benchmark practice does; the rest of the conversation is not sent.
Any line may also give `output_tokens` (an int) to fix that request's output length.
Blank lines are skipped. A line that is not JSON or has none of these shapes is a ConfigError naming
the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmload.errors import ConfigError

__all__ = ["DatasetEntry", "load_dataset"]

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
          "bing": "assistant", "bard": "assistant", "system": "system"}


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One request's content: a prompt or chat messages, and an optional fixed output length."""

    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    output_tokens: int | None = None


def _entry(obj: object, where: dict) -> DatasetEntry:
    if not isinstance(obj, dict):
        raise ConfigError("expected a JSON object per line", **where)
    out = obj.get("output_tokens")
    if out is not None and (type(out) is not int or out < 1):  # not a bool: `true` is no length
        raise ConfigError(f"output_tokens must be a positive integer, got {out!r}", **where)
    if isinstance(obj.get("prompt"), str):
        return DatasetEntry(prompt=obj["prompt"], output_tokens=out)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            raise ConfigError("messages must be a non-empty list of {role, content} strings", **where)
        return DatasetEntry(messages=tuple({"role": m["role"], "content": m["content"]} for m in msgs),
                            output_tokens=out)
    if "conversations" in obj:
        turns = obj["conversations"]
        if not isinstance(turns, list):
            raise ConfigError("conversations must be a list of {from, value}", **where)
        msgs = []
        for turn in turns:
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise ConfigError("each conversation turn needs from and value", **where)
            role = _ROLES.get(str(turn.get("from", "")).lower())
            if role is None:
                raise ConfigError(f"unknown conversation role {turn.get('from')!r}", **where)
            msgs.append({"role": role, "content": turn["value"]})
            if role == "user":
                break
        if not msgs or msgs[-1]["role"] != "user":
            raise ConfigError("conversation has no human turn", **where)
        return DatasetEntry(messages=tuple(msgs), output_tokens=out)
    raise ConfigError('expected "prompt", "messages" or "conversations"', **where)


def load_dataset(path: str | Path) -> list[DatasetEntry]:
    """All entries of a JSONL dataset, in file order."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read dataset: {exc.strerror}", file=str(p), key="requests.dataset") from None
    except UnicodeDecodeError:
        raise ConfigError("dataset is not UTF-8 text", file=str(p), key="requests.dataset") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = {"file": str(p), "line": number}
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"not valid JSON: {exc.msg}", **where) from None
        entries.append(_entry(obj, where))
    if not entries:
        raise ConfigError("dataset has no entries", file=str(p), key="requests.dataset")
    return entries
