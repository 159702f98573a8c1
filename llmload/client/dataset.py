"""Datasets of real prompts or chats (`requests.dataset`): JSONL, one request per line.

Accepted line shapes:
- `{"prompt": "..."}`;
- `{"messages": [{"role": "user", "content": "..."}, ...]}` (OpenAI chat);
- ShareGPT `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}`: the turns
  up to and including the first human turn become the messages (system turns kept), as the usual
  benchmark practice does; the rest of the conversation is not sent.
Any line may also give `output_tokens` (an integer from 1 to `MAX_TOKENS`) to fix that request's output
length. Blank lines are skipped. A line that is not UTF-8 or not JSON, has none of these shapes, or gives
an `output_tokens` out of bounds (`true`, `1e20`) is a ConfigError naming the file and line, and so is a
line over `MAX_LINE_BYTES` (read no further than that: a 1 GB line costs 8 MiB, not gigabytes) and a
string that is not valid Unicode (a lone surrogate, `"\ud800"`, which JSON allows and no server can be
sent as UTF-8). A dataset over `MAX_DATASET_BYTES` is refused before it is read (it is held in memory
for the run). `load_config` loads the dataset once to check it, before the pre-flight; the copy is kept
for the run's own use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmload.errors import ConfigError

__all__ = ["DatasetEntry", "MAX_DATASET_BYTES", "MAX_LINE_BYTES", "MAX_TOKENS", "load_dataset", "size_text",
           "unicode_problem"]

#: the largest `output_tokens` a line may give: `llmload.config.MAX_TOKENS` (not imported: the config
#: loader imports this module to check the dataset)
MAX_TOKENS = 1_000_000
#: the longest dataset line: a prompt of a million tokens is about 4 MiB of text
MAX_LINE_BYTES = 8 * 2**20
#: the largest dataset file (read whole and held for the run: its entries cost a few times its size)
MAX_DATASET_BYTES = 256 * 2**20

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
    except OSError as exc:
        raise ConfigError(f"cannot read dataset: {exc.strerror}", file=str(p), key="requests.dataset") from None
    stamp = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
    if stamp in _last:
        return _last[stamp]
    if stat.st_size > MAX_DATASET_BYTES:
        raise ConfigError(f"the dataset is {size_text(stat.st_size)}; a dataset may be at most "
                          f"{size_text(MAX_DATASET_BYTES)} (it is held in memory for the run)", file=str(p),
                          key="requests.dataset")
    entries = []
    try:
        with p.open("rb") as fh:  # first the text (a binary file is "not UTF-8", not a JSON error)
            for number, raw in enumerate(_lines(fh, str(p)), start=1):
                _text(raw, {"file": str(p), "line": number})
        with p.open("rb") as fh:
            for number, raw in enumerate(_lines(fh, str(p)), start=1):
                entry = _read_line(raw, {"file": str(p), "line": number})
                if entry is not None:
                    entries.append(entry)
    except OSError as exc:
        raise ConfigError(f"cannot read dataset: {exc.strerror}", file=str(p), key="requests.dataset") from None
    if not entries:
        raise ConfigError("dataset has no entries", file=str(p), key="requests.dataset")
    _last.clear()
    _last[stamp] = entries
    return entries


def _lines(fh, file: str):  # noqa: ANN001, ANN202 (a binary file; yields bytes)
    """The file's lines, each read no further than `MAX_LINE_BYTES` (a longer one is a ConfigError)."""
    number = 0
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise ConfigError(f"the line is more than {size_text(MAX_LINE_BYTES)} (a dataset line holds one "
                              "request)", file=file, line=number)
        yield raw


def _text(raw: bytes, where: dict) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); a dataset is JSONL", **where) from None


def _read_line(raw: bytes, where: dict) -> DatasetEntry | None:
    """One line's entry (None for a blank line)."""
    line = _text(raw, where)
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"not valid JSON: {getattr(exc, 'msg', 'nested too deeply')}", **where) from None
    problem = unicode_problem(obj)
    if problem:
        raise ConfigError(f"not valid UTF-8: {problem} (a JSON escape no server can be sent)", **where)
    return _entry(obj, where)


def unicode_problem(value: object) -> str | None:
    """What makes a parsed JSON or YAML value not encodable as UTF-8 (a lone surrogate), or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"a lone surrogate \\u{ord(item[exc.start]):04x}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def size_text(size: int) -> str:
    """`16.6 KiB`, `8 MiB`: a byte count for a one-line error."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"
