"""Write a small synthetic multi-turn trace in the `conversation` format: one row per turn with
`session_id`, `turn_idx`, `arrival_time_ns`, `input_toks` (the turn's whole prompt: the conversation so
far) and `output_toks`, the columns of the `swe_multiturn` coding-agent traces published on Hugging Face.

    python examples/traces/make_conversation.py examples/traces/conversation_small.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def conversation_rows(*, sessions: int = 8, rate: float = 2.0, turns: tuple[int, int] = (2, 4),
                      first_tokens: int = 120, new_tokens: tuple[int, int] = (20, 60), output_tokens: int = 12,
                      think_s: tuple[float, float] = (0.2, 0.6), seed: int = 1) -> list[dict]:
    """Sessions starting as a Poisson process at `rate` per second; each turn's prompt is the previous
    prompt plus the previous answer plus new user text, sent a think time after the previous turn."""
    rng = random.Random(seed)
    rows, start = [], 0.0
    for s in range(sessions):
        at, prompt = start, first_tokens
        for k in range(rng.randint(*turns)):
            if k:
                prompt += output_tokens + rng.randint(*new_tokens)
                at += rng.uniform(*think_s)
            rows.append({"session_id": f"s{s:03d}", "turn_idx": k, "arrival_time_ns": round(at * 1e9),
                         "input_toks": prompt, "output_toks": output_tokens})
        start += rng.expovariate(rate)
    return sorted(rows, key=lambda r: r["arrival_time_ns"])


def write_trace(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args()
    write_trace(args.out, conversation_rows(sessions=args.sessions))


if __name__ == "__main__":
    main()
