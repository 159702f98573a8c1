"""The ground-truth log: one JSON line per generation request (not /metrics, /health or info pages),
written and flushed the moment the request ends.

Rows are written just before the request's last write, so a client that has seen the end of its answer
finds the row on disk. Keys: `request_id` (the `X-Request-Id` header, else one the sim made up), `flavor`, `endpoint`,
`received_at`, `admitted_at` (first scheduled by the engine; null if never), `queue_s`
(`admitted_at - received_at`), `first_token_at`, `token_times` (wall time just after each output-bearing
event was written to the socket), `finished_at`, `input_tokens`, `output_tokens` (tokens written),
`preemptions`, `reasoning_tokens` (the first that many of `token_times` are reasoning tokens, the rest
answer tokens), `first_answer_at` (the first answer token's time; null when none was written), `cached_tokens` (vLLM flavour: prompt tokens found in the prefix cache), `outcome` (`ok`, `rejected`, `http_error`, `oom`, `disconnect`, `stall`, `malformed`,
`client_gone`), `http_status`, `load_s` (Ollama: time waiting for a model load), `planned_times`
(the engine's planned end of the step that produced each streamed token, for the timing benchmark). Times are
`llmload.clock.now()` seconds, the client records' wall base.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO

__all__ = ["GroundTruthRow", "GroundTruthWriter", "read_ground_truth"]


@dataclass(slots=True)
class GroundTruthRow:
    """Server-side facts about one request."""

    request_id: str
    flavor: str
    endpoint: str
    received_at: float
    admitted_at: float | None = None
    first_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    finished_at: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    preemptions: int = 0
    cached_tokens: int = 0
    outcome: str = "ok"
    http_status: int = 200
    load_s: float = 0.0
    planned_times: list[float] = field(default_factory=list)
    reasoning_tokens: int = 0
    first_answer_at: float | None = None

    def to_json(self) -> str:
        row = {name: getattr(self, name) for name in _FIELDS}  # not asdict(): it deep-copies the lists
        row["queue_s"] = None if self.admitted_at is None else self.admitted_at - self.received_at
        return json.dumps(row, separators=(",", ":"))


_FIELDS = tuple(f.name for f in fields(GroundTruthRow))


class GroundTruthWriter:
    """Appends rows to a JSONL file (or nowhere), flushing each one."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, row: GroundTruthRow) -> None:
        if self._file is not None:
            self._file.write(row.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_ground_truth(path: str | Path | None) -> dict[str, dict]:
    """The rows of a ground-truth log by request_id ({} when there is no log; a torn line is skipped)."""
    rows: dict[str, dict] = {}
    if path is None or not Path(path).exists():
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows[row["request_id"]] = row
    return rows
