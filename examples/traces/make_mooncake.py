"""Write a small synthetic trace in Mooncake's JSONL format (`timestamp` ms, `input_length`,
`output_length`, `hash_ids`: one id per 512-token prompt block), with shared prompt prefixes.

Each request starts with the `shared_blocks` blocks of one of `prefixes` shared prefixes (a system
prompt and tools, say), then blocks of its own. `--unique` gives every block of every request its own id:
the same sizes and times with no sharing, the control run of a prefix-cache comparison.

    python examples/traces/make_mooncake.py examples/traces/mooncake_small.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BLOCK_TOKENS = 512


def mooncake_rows(*, requests: int = 40, rate: float = 4.0, prefixes: int = 2, shared_blocks: int = 2,
                  own_blocks: int = 1, output_tokens: int = 8, unique: bool = False,
                  seed: int = 1) -> list[dict]:
    """The trace's rows: Poisson arrivals at `rate` per second (times in ms from 0)."""
    rng = random.Random(seed)
    rows, t, next_id = [], 0.0, 1_000_000
    for _ in range(requests):
        p = rng.randrange(prefixes)
        shared = [p * 100 + b for b in range(shared_blocks)]
        own = list(range(next_id, next_id + own_blocks))
        next_id += own_blocks
        if unique:
            shared = list(range(next_id, next_id + shared_blocks))
            next_id += shared_blocks
        blocks = shared + own
        # every block full (a chat adds 4 template tokens; the prompt's text is then whole blocks)
        rows.append({"timestamp": round(t * 1000), "input_length": len(blocks) * BLOCK_TOKENS + 4,
                     "output_length": output_tokens, "hash_ids": blocks})
        t += rng.expovariate(rate)
    return rows


def write_trace(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--unique", action="store_true", help="no shared blocks (the control trace)")
    args = parser.parse_args()
    write_trace(args.out, mooncake_rows(requests=args.requests, rate=args.rate, unique=args.unique))


if __name__ == "__main__":
    main()
