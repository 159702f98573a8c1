"""Datasets of real prompts or chats (`requests.dataset`): JSONL, one request per line.

Accepted line shapes:
- `{"prompt": "..."}`;
- `{"messages": [{"role": "user", "content": "..."}, ...]}` (OpenAI chat);
- ShareGPT `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}`: the turns
  up to and including the first human turn become the messages (system turns kept), as the usual
  benchmark practice does; the rest of the conversation is not sent.
Any line may also give `output_tokens` (an integer from 1 to `MAX_TOKENS`) to fix that request's output
length. Blank lines are skipped. A line that is not UTF-8 or not JSON, has none of these shapes, or gives
an `output_tokens` out of bounds (`true`, `1e20`) is a ConfigError naming the file and line. `load_config`
loads the dataset once to check it, before the pre-flight; the copy is kept for the run's own use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmload.errors import ConfigError

__all__ = ["DatasetEntry", "MAX_TOKENS", "load_dataset"]

#: the largest `output_tokens` a line may give: `llmload.config.MAX_TOKENS` (not imported: the config
#: loader imports this module to check the dataset)
MAX_TOKENS = 1_000_000

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
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or not 1 <= out <= MAX_TOKENS):
        shown = repr(out) if len(repr(out)) <= 40 else repr(out)[:37] + "..."
        raise ConfigError(f"output_tokens must be an integer from 1 to {MAX_TOKENS:,}, got {shown}", **where)
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


#: the last dataset read: (path, mtime_ns, size) -> entries, so the config check and the run read it once
_last: dict[tuple, list[DatasetEntry]] = {}


def load_dataset(path: str | Path) -> list[DatasetEntry]:
    """All entries of a JSONL dataset, in file order."""
    p = Path(path)
    try:
        stat = p.stat()
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read dataset: {exc.strerror}", file=str(p), key="requests.dataset") from None
    stamp = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
    if stamp in _last:
        return _last[stamp]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); a dataset is JSONL", file=str(p),
                          line=line) from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = {"file": str(p), "line": number}
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"not valid JSON: {getattr(exc, 'msg', 'nested too deeply')}", **where) from None
        entries.append(_entry(obj, where))
    if not entries:
        raise ConfigError("dataset has no entries", file=str(p), key="requests.dataset")
    _last.clear()
    _last[stamp] = entries
    return entries
