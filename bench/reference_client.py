"""A reference client written the way `vllm bench serve` measures, to compare our generator against.

asyncio + aiohttp, `time.perf_counter()`, TTFT at the first chunk with non-empty content, ITL as the
gaps between later content chunks; arrivals at a fixed rate (constant or Poisson) and never delayed by
responses. Each request carries `X-Request-Id`, so its timestamps can be joined with the simulated
server's ground-truth log. Used by `bench/` and `llmload calibrate`; not part of the tool's own path.

    python bench/reference_client.py --url http://127.0.0.1:8000 --rate 20 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sys
import time
from dataclasses import asdict, dataclass, field

import aiohttp

from llmload.clock import wall_base

__all__ = ["RefResult", "run_reference"]


@dataclass(slots=True)
class RefResult:
    """One request as the reference client saw it (wall-clock seconds, same base as llmload)."""

    request_id: str
    scheduled_at: float
    sent_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    ok: bool = False
    error: str = ""


async def _one(session: aiohttp.ClientSession, url: str, body: dict, result: RefResult) -> None:
    base = wall_base()
    try:
        async with session.post(url, json=body, headers={"X-Request-Id": result.request_id}) as resp:
            if resp.status != 200:
                result.error = f"HTTP {resp.status}"
                return
            async for raw in resp.content:  # aiohttp yields line by line
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                t = base + time.perf_counter()
                chunk = json.loads(data)
                choices = chunk.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    if result.first_token_at is None:
                        result.first_token_at = t
                    result.token_times.append(t)
                    result.last_token_at = t
            result.ok = result.first_token_at is not None
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        result.error = type(exc).__name__


async def run_reference(url: str, *, rate: float, requests: int, max_tokens: int = 32,
                        prompt_tokens: int = 32, poisson: bool = False, seed: int = 0,
                        model: str = "sim-model", prefix: str = "ref") -> list[RefResult]:
    """Send `requests` streaming chat requests at `rate` per second; return what was measured."""
    rng = random.Random(seed)
    endpoint = url.rstrip("/") + "/v1/chat/completions"
    prompt = " ".join(f"w{i % 97}" for i in range(prompt_tokens))
    results: list[RefResult] = []
    tasks: list[asyncio.Task] = []
    base = wall_base()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter() + 0.2
        offset = 0.0
        for i in range(requests):
            scheduled = start + offset
            offset += rng.expovariate(rate) if poisson else 1.0 / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = {"model": model, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
                    "messages": [{"role": "user", "content": f"{i} {prompt}"}]}
            result = RefResult(request_id=f"{prefix}-{i:06d}", scheduled_at=base + scheduled,
                               sent_at=base + time.perf_counter())
            results.append(result)
            tasks.append(asyncio.create_task(_one(session, endpoint, body, result)))
        await asyncio.gather(*tasks)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--poisson", action="store_true")
    parser.add_argument("--out", help="write per-request results as JSON lines")
    args = parser.parse_args(argv)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    results = asyncio.run(run_reference(args.url, rate=args.rate, requests=args.requests,
                                        max_tokens=args.max_tokens, poisson=args.poisson))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    ok = sum(r.ok for r in results)
    events = sum(len(r.token_times) for r in results)
    print(json.dumps({"requests": len(results), "ok": ok, "events": events, "cpu_s": round(cpu_s, 3),
                      "cpu_per_request_ms": round(1000 * cpu_s / max(1, len(results)), 3),
                      "cpu_per_event_us": round(1e6 * cpu_s / max(1, events), 2)}))
    if args.out:
        with open(args.out, "w") as f:
            for r in results:
                f.write(json.dumps(asdict(r)) + "\n")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
