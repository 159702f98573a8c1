"""Trace loaders: recorded arrivals with their request sizes, in one DataFrame whatever the source.

Formats (`format: auto` sniffs the file's header or first record):

    llmload    CSV or JSONL: `timestamp` (seconds, or an ISO date-time), `input_tokens`, `output_tokens`,
               optional `prompt`, `prefix_id`
    azure      Azure LLM inference trace CSV: `TIMESTAMP` (date-time, 7 fractional digits),
               `ContextTokens`, `GeneratedTokens`
    burstgpt   BurstGPT CSV: `Timestamp` (s), `Request tokens`, `Response tokens`, ...; 0 response
               tokens marks a request that failed in the source (kept, flagged, not replayed)
    conversation  multi-turn sessions, one row per turn (CSV or JSONL), the columns published with the
               `swe_multiturn` coding-agent traces on Hugging Face: `session_id`, `turn_idx` (0, 1, ...),
               `arrival_time_ns`, `input_toks` (the turn's whole prompt), `output_toks`. Each session
               is one arrival (its first turn); its later turns are replayed as dependent turns
               (`session_turns`: new prompt tokens = this prompt - the previous prompt - the previous
               answer, at least 1; think time = the gap between the two turns' arrivals, waited after
               the previous answer, so a slow server stretches a session and never overlaps its turns)
    mooncake   Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (one id
               per 512-token prompt block; required on every row: the request mix builds each prompt
               from them, block `h` the same text wherever it appears, so equal leading hash ids are
               an equal prompt prefix for the server's cache)

Every loader returns the columns of `TRACE_COLUMNS`, sorted by `offset_s` (seconds from the first
arrival). `prefix_id` / `prefix_tokens` name a shared prompt prefix and its length where the trace
says (Mooncake: the deepest run of leading blocks another request also has). A wrong file is a one-line
`ConfigError` naming the file and line, never a traceback; so is a value past the bounds a run can
replay: a timestamp that is not finite, a trace spanning more than `MAX_TRACE_SPAN_S` (31 days), a token
count over `MAX_TOKENS` (the config's bound) or a prefix id over `MAX_PREFIX_ID`; so is a file over
`MAX_TRACE_BYTES` (refused before it is read), a JSONL line over the dataset's `MAX_LINE_BYTES` (read no
further) and a string that is not valid Unicode (a lone surrogate in a prompt).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmload.client.dataset import MAX_LINE_BYTES, size_text, unicode_problem
from llmload.config import MAX_TOKENS
from llmload.errors import ConfigError

__all__ = ["MAX_TRACE_BYTES", "MAX_TRACE_SPAN_S", "MOONCAKE_BLOCK_TOKENS", "TRACE_COLUMNS", "TRACE_FORMATS", "load_trace",
           "sniff_format"]

TRACE_FORMATS = ("llmload", "azure", "burstgpt", "mooncake", "conversation")
TRACE_COLUMNS = ("offset_s", "input_tokens", "output_tokens", "prefix_ids", "prefix_id", "prefix_tokens",
                 "prompt", "failed_in_source", "hash_ids", "session_turns")
#: tokens per `hash_ids` block in the Mooncake traces
MOONCAKE_BLOCK_TOKENS = 512
#: the longest time from the first to the last arrival of a trace (a month)
MAX_TRACE_SPAN_S = 31 * 86_400.0
#: the largest `prefix_id` a trace may give
MAX_PREFIX_ID = 2**31 - 1
#: the largest trace file (read whole into a frame: it costs a few times its size in memory)
MAX_TRACE_BYTES = 512 * 2**20


def load_trace(path: str | Path, format: str = "auto") -> pd.DataFrame:
    """Read a trace file into the common frame (`TRACE_COLUMNS`), sorted by arrival.

    Rows that failed in the source stay in, flagged `failed_in_source`, so they can be counted.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError("trace file not found", file=str(path))
    if p.is_dir():
        raise ConfigError("is a directory, expected a trace file", file=str(path))
    size = p.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ConfigError(f"the trace is {size_text(size)}; a trace file may be at most {size_text(MAX_TRACE_BYTES)} "
                          "(cut it with shape.trace.window, or split it)", file=str(path))
    kind = sniff_format(p) if format == "auto" else format
    if kind not in TRACE_FORMATS:
        raise ConfigError(f'unknown trace format "{format}" (expected auto or one of {", ".join(TRACE_FORMATS)})',
                          file=str(path))
    rows = _jsonl_rows(p) if _is_jsonl(p) else _csv_rows(p)
    if not len(rows):
        raise ConfigError("trace has no arrivals", file=str(path))
    loader = {"llmload": _llmload, "azure": _azure, "burstgpt": _burstgpt, "mooncake": _mooncake,
              "conversation": _conversation}[kind]
    return _finish(loader(rows, str(path)))


def sniff_format(path: str | Path) -> str:
    """The format of a trace file from its header (CSV) or first record (JSONL)."""
    p = Path(path)
    names: set[str] = set()
    with p.open(encoding="utf-8", errors="replace") as fh:
        for raw in iter(lambda: fh.readline(MAX_LINE_BYTES), ""):  # a first line is read no further
            line = raw.strip()
            if not line:
                continue
            if _is_jsonl(p) or line.startswith("{"):
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    raise ConfigError("not valid JSON", file=str(path), line=1) from None
                names = set(first) if isinstance(first, dict) else set()
            else:
                names = {n.strip().strip('"') for n in line.split(",")}
            break
    if {"TIMESTAMP", "ContextTokens"} <= names:
        return "azure"
    if {"Timestamp", "Request tokens"} <= names:
        return "burstgpt"
    if {"session_id", "turn_idx"} <= names:
        return "conversation"
    if {"input_length", "output_length"} <= names or "hash_ids" in names:
        return "mooncake"
    if "timestamp" in names:
        return "llmload"
    shown = ", ".join(sorted(names)) or "none"
    raise ConfigError(f"cannot tell the trace format from its columns ({shown}); set format:", file=str(path),
                      line=1)


# --------------------------------------------------------------------------- reading


class _Rows:
    """Raw rows of a file plus the file line of each row, for error messages."""

    def __init__(self, frame: pd.DataFrame, lines: np.ndarray) -> None:
        self.frame, self.lines = frame, lines

    def __len__(self) -> int:
        return len(self.frame)


def _is_jsonl(p: Path) -> bool:
    return p.suffix.lower() in (".jsonl", ".json", ".ndjson")


def _csv_rows(p: Path) -> _Rows:
    try:
        frame = pd.read_csv(p, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not a readable CSV: {str(exc).splitlines()[0]}", file=str(p)) from None
    except pd.errors.EmptyDataError:
        raise ConfigError("empty file", file=str(p), line=1) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    lines = np.arange(len(frame)) + 2  # header is line 1
    blank = (frame == "").all(axis=1).to_numpy()
    return _Rows(frame[~blank].reset_index(drop=True), lines[~blank])


def _json_int(text: str) -> int | float:
    """A JSON integer; one too long for int64 becomes a float (inf past 1e308), which the bounds refuse."""
    return int(text) if len(text) < 19 else float(text)


def _jsonl_rows(p: Path) -> _Rows:
    records, lines = [], []
    with p.open(encoding="utf-8") as fh:
        for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), ""), start=1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith("\n"):
                raise ConfigError(f"the line is more than {size_text(MAX_LINE_BYTES)} (a trace line holds one "
                                  "arrival)", file=str(p), line=number)
            if not raw.strip():
                continue
            try:
                item = json.loads(raw, parse_int=_json_int)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"not valid JSON: {exc.msg}", file=str(p), line=number) from None
            if not isinstance(item, dict):
                raise ConfigError("expected a JSON object per line", file=str(p), line=number)
            problem = unicode_problem(item)
            if problem:
                raise ConfigError(f"not valid UTF-8: {problem}", file=str(p), line=number)
            records.append(item)
            lines.append(number)
    return _Rows(pd.DataFrame.from_records(records), np.asarray(lines, dtype=np.int64))


# --------------------------------------------------------------------------- columns


def _need(rows: _Rows, column: str, file: str) -> pd.Series:
    if column not in rows.frame.columns:
        shown = ", ".join(map(str, rows.frame.columns))
        raise ConfigError(f'missing column "{column}" (columns: {shown})', file=file, line=1)
    return rows.frame[column]


def _numbers(rows: _Rows, column: str, file: str, *, integer: bool, optional: bool = False,
             maximum: float | None = None) -> np.ndarray:
    """A numeric column as float64 (NaN where empty and `optional`); a bad cell (not a finite
    non-negative number, or over `maximum`) names its line."""
    if column not in rows.frame.columns and optional:
        return np.full(len(rows), np.nan)
    raw = _need(rows, column, file)
    blank = raw.isna() | (raw.astype(str).str.strip() == "")
    values = pd.to_numeric(raw.where(~blank), errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values) & ~blank.to_numpy() if optional else np.isnan(values)
    bad |= ~np.isnan(values) & ((values < 0) | np.isinf(values))
    if integer:
        bad |= ~np.isnan(values) & (values != np.round(values))
    if bad.any():
        i = int(np.argmax(bad))
        kind = "a non-negative integer" if integer else "a non-negative number"
        raise ConfigError(f'{column}: expected {kind}, got "{raw.iloc[i]}"', file=file, line=int(rows.lines[i]))
    if maximum is not None and (values > maximum).any():
        i = int(np.argmax(values > maximum))
        raise ConfigError(f'{column}: {raw.iloc[i]} is more than {maximum:,.0f}', file=file,
                          line=int(rows.lines[i]))
    return values


def _tokens(rows: _Rows, column: str, file: str, *, optional: bool = False) -> np.ndarray:
    return _numbers(rows, column, file, integer=True, optional=optional, maximum=MAX_TOKENS)


def _bounded_times(offsets: np.ndarray, rows: _Rows, column: str, file: str) -> np.ndarray:
    """`offsets` (seconds) when every one is finite and the trace spans at most `MAX_TRACE_SPAN_S`."""
    bad = ~np.isfinite(offsets)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f'{column}: expected a finite time, got "{rows.frame[column].iloc[i]}"', file=file,
                          line=int(rows.lines[i]))
    span = offsets - offsets.min()
    if (span > MAX_TRACE_SPAN_S).any():
        i = int(np.argmax(span > MAX_TRACE_SPAN_S))
        raise ConfigError(f"{column}: {span[i]:.3g} s after the first arrival; a trace may span at most "
                          f"{MAX_TRACE_SPAN_S / 86_400:.0f} days", file=file, line=int(rows.lines[i]))
    return offsets


def _datetimes(rows: _Rows, column: str, file: str) -> np.ndarray:
    """Seconds since the epoch from date-time strings (any ISO 8601 form, up to 9 fractional digits)."""
    raw = _need(rows, column, file).astype(str).str.strip()
    parsed = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f'{column}: unparsable timestamp "{raw.iloc[i]}"', file=file, line=int(rows.lines[i]))
    return (parsed - parsed.min()).dt.total_seconds().to_numpy(dtype=np.float64)


def _seconds_or_datetimes(rows: _Rows, column: str, file: str) -> np.ndarray:
    raw = _need(rows, column, file)
    numeric = pd.to_numeric(raw, errors="coerce")
    if numeric.notna().all():
        return numeric.to_numpy(dtype=np.float64)
    if numeric.notna().any():  # mixed: the first non-number is the bad line
        i = int(np.argmax(numeric.isna().to_numpy()))
        raise ConfigError(f'{column}: unparsable timestamp "{raw.iloc[i]}"', file=file, line=int(rows.lines[i]))
    return _datetimes(rows, column, file)


def _frame(offsets: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, **extra: Any) -> pd.DataFrame:
    n = len(offsets)
    none = [None] * n
    return pd.DataFrame({
        "offset_s": offsets.astype(np.float64),
        "input_tokens": pd.array(np.asarray(inputs, dtype=np.float64), dtype="Int64"),  # NaN: <NA>
        "output_tokens": pd.array(np.asarray(outputs, dtype=np.float64), dtype="Int64"),
        "prefix_ids": extra.get("prefix_ids", none),
        "prefix_id": pd.array(extra.get("prefix_id", none), dtype="Int64"),
        "prefix_tokens": pd.array(extra.get("prefix_tokens", none), dtype="Int64"),
        "prompt": pd.Series(extra.get("prompt", none), dtype=object),
        "failed_in_source": np.asarray(extra.get("failed", np.zeros(n, dtype=bool)), dtype=bool),
        "hash_ids": pd.Series(extra.get("hash_ids", none), dtype=object),  # Mooncake's, for the prompts
        "session_turns": pd.Series(extra.get("session_turns", none), dtype=object),  # conversation traces
    })


def _finish(frame: pd.DataFrame) -> pd.DataFrame:
    """Sort by time (stable: ties keep file order) and measure offsets from the first arrival."""
    frame = frame.sort_values("offset_s", kind="stable").reset_index(drop=True)
    return frame.assign(offset_s=frame["offset_s"] - frame["offset_s"].iloc[0])


# --------------------------------------------------------------------------- formats


def _llmload(rows: _Rows, file: str) -> pd.DataFrame:
    offsets = _bounded_times(_seconds_or_datetimes(rows, "timestamp", file), rows, "timestamp", file)
    extra: dict[str, object] = {}
    if "prefix_id" in rows.frame.columns:
        pid = _numbers(rows, "prefix_id", file, integer=True, optional=True, maximum=MAX_PREFIX_ID)
        extra["prefix_id"] = [None if np.isnan(v) else int(v) for v in pid]
        extra["prefix_ids"] = [None if np.isnan(v) else [int(v)] for v in pid]
    if "prompt" in rows.frame.columns:
        extra["prompt"] = [p if isinstance(p, str) and p != "" else None for p in rows.frame["prompt"]]
    return _frame(offsets,
                  _tokens(rows, "input_tokens", file, optional=True),
                  _tokens(rows, "output_tokens", file, optional=True), **extra)


def _azure(rows: _Rows, file: str) -> pd.DataFrame:
    return _frame(_bounded_times(_datetimes(rows, "TIMESTAMP", file), rows, "TIMESTAMP", file),
                  _tokens(rows, "ContextTokens", file),
                  _tokens(rows, "GeneratedTokens", file))


def _burstgpt(rows: _Rows, file: str) -> pd.DataFrame:
    outputs = _tokens(rows, "Response tokens", file)
    times = _bounded_times(_numbers(rows, "Timestamp", file, integer=False), rows, "Timestamp", file)
    return _frame(times, _tokens(rows, "Request tokens", file), outputs, failed=outputs == 0)


def _mooncake(rows: _Rows, file: str) -> pd.DataFrame:
    offsets = _bounded_times(_numbers(rows, "timestamp", file, integer=False) / 1000.0, rows, "timestamp", file)
    hashes: list[list[int] | None] = []
    raw = rows.frame["hash_ids"] if "hash_ids" in rows.frame.columns else [None] * len(rows)
    for i, value in enumerate(raw):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            raise ConfigError("hash_ids: missing (a Mooncake request's prompt is built from its hash_ids)",
                              file=file, line=int(rows.lines[i]))
        elif isinstance(value, list) and all(isinstance(h, int) and not isinstance(h, bool) for h in value):
            hashes.append(list(value))
        else:
            raise ConfigError(f"hash_ids: expected a list of integers, got {value!r}", file=file,
                              line=int(rows.lines[i]))
    prefix_id, prefix_tokens = _shared_prefixes(hashes)
    return _frame(offsets,
                  _tokens(rows, "input_length", file),
                  _tokens(rows, "output_length", file),
                  prefix_ids=hashes, prefix_id=prefix_id, prefix_tokens=prefix_tokens, hash_ids=hashes)


def _conversation(rows: _Rows, file: str) -> pd.DataFrame:
    """One arrival per session (its first turn) with its later turns in `session_turns`."""
    sessions = _need(rows, "session_id", file).astype(str).to_numpy()
    turns = _numbers(rows, "turn_idx", file, integer=True)
    arrivals = _bounded_times(_numbers(rows, "arrival_time_ns", file, integer=True) / 1e9, rows,
                              "arrival_time_ns", file)
    inputs = _tokens(rows, "input_toks", file)
    outputs = _tokens(rows, "output_toks", file)
    order = sorted(range(len(rows)), key=lambda i: (sessions[i], turns[i]))
    firsts: list[int] = []
    scripts: list[list[dict]] = []
    for i in order:
        if not firsts or sessions[firsts[-1]] != sessions[i]:
            if turns[i] != 0:
                raise ConfigError(f'session "{sessions[i]}" starts at turn_idx {int(turns[i])}, expected 0',
                                  file=file, line=int(rows.lines[i]))
            firsts.append(i)
            scripts.append([])
            prev = i
            continue
        script = scripts[-1]
        if turns[i] != len(script) + 1:
            raise ConfigError(f'session "{sessions[i]}": turn_idx {int(turns[i])} after {len(script)}, '
                              "expected turns in order without gaps", file=file, line=int(rows.lines[i]))
        script.append({"new_tokens": int(max(1, inputs[i] - inputs[prev] - outputs[prev])),
                       "output_tokens": int(outputs[i]), "think_s": float(max(0.0, arrivals[i] - arrivals[prev]))})
        prev = i
    pick = np.asarray(firsts, dtype=np.int64)
    return _frame(arrivals[pick], inputs[pick], outputs[pick], session_turns=scripts)


def _shared_prefixes(hashes: list[list[int] | None]) -> tuple[list[int | None], list[int | None]]:
    """For each request, the deepest run of leading blocks that some other request also starts with.

    The blocks form a trie; a node reached by two or more requests is a shared prefix. Its node number
    becomes the `prefix_id` (requests with the same id share exactly that prefix) and its depth times
    512 the `prefix_tokens`. A request that shares nothing gets None.
    """
    nodes: dict[tuple[int, int], int] = {}
    counts: list[int] = []
    paths: list[list[int]] = []
    for blocks in hashes:
        path, parent = [], -1
        for h in blocks or ():
            key = (parent, h)
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = len(counts)
                counts.append(0)
            counts[node] += 1
            path.append(node)
            parent = node
        paths.append(path)
    ids: list[int | None] = []
    tokens: list[int | None] = []
    dense: dict[int, int] = {}
    for path in paths:
        depth = 0
        while depth < len(path) and counts[path[depth]] >= 2:
            depth += 1
        if depth == 0:
            ids.append(None)
            tokens.append(None)
        else:
            ids.append(dense.setdefault(path[depth - 1], len(dense)))
            tokens.append(depth * MOONCAKE_BLOCK_TOKENS)
    return ids, tokens
