"""Token-length distributions of the request mix (`requests.input_tokens` / `output_tokens`).

`LengthSampler.from_dist(dist, base_dir=...)` validates once; `draw(rng)` returns an int >= 1 from an
injected `random.Random` (never a global seed):
- fixed: `value`;  uniform: integers in [min, max];
- normal: `mean`, `std`, clamped to [min, max];  lognormal: `median`, `sigma` (the long tail), clamped;
- empirical: one of `values`, or of a file: one integer per line (`#` comments and blank lines
  skipped), or a CSV with a header and `column`. A bad file gives a ConfigError naming file and line.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from llmload.configbase import EmpiricalDist, FixedDist, LognormalDist, NormalDist, UniformDist
from llmload.errors import ConfigError

__all__ = ["LengthSampler", "read_lengths"]


def read_lengths(path: str | Path, column: str | None = None) -> list[int]:
    """Positive integers from a file (one per line, or a CSV `column`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read lengths file: {exc.strerror}", file=str(p)) from None
    values: list[int] = []
    if column is not None:
        rows = csv.DictReader(text.splitlines())
        if rows.fieldnames is None or column not in rows.fieldnames:
            raise ConfigError(f"no column {column!r} (columns: {rows.fieldnames})", file=str(p), line=1)
        for i, row in enumerate(rows, start=2):
            values.append(_positive(row[column], p, i))
    else:
        for i, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if line and not line.startswith("#"):
                values.append(_positive(line, p, i))
    if not values:
        raise ConfigError("no lengths in file", file=str(p))
    return values


def _positive(text: str | None, path: Path, line: int) -> int:
    try:
        value = int(float((text or "").strip()))
    except ValueError:
        raise ConfigError(f"expected a positive integer, got {text!r}", file=str(path), line=line) from None
    if value < 1:
        raise ConfigError(f"expected a positive integer, got {value}", file=str(path), line=line)
    return value


class LengthSampler:
    """Draws token lengths from one validated distribution."""

    __slots__ = ("_draw", "description")

    def __init__(self, draw, description: str) -> None:
        self._draw = draw
        self.description = description

    def draw(self, rng: random.Random) -> int:
        return self._draw(rng)

    @classmethod
    def from_dist(cls, dist: object, *, base_dir: str | Path = ".") -> LengthSampler:
        if isinstance(dist, FixedDist):
            value = dist.value
            return cls(lambda rng: value, f"fixed {value}")
        if isinstance(dist, UniformDist):
            lo, hi = sorted((dist.min, dist.max))
            return cls(lambda rng: rng.randint(lo, hi), f"uniform [{lo}, {hi}]")
        if isinstance(dist, NormalDist):
            mean, std, floor, cap = dist.mean, dist.std, dist.min, dist.max
            return cls(lambda rng: _clamp(rng.gauss(mean, std), floor, cap), f"normal {mean:g}±{std:g}")
        if isinstance(dist, LognormalDist):
            mu, sigma, low, top = math.log(dist.median), dist.sigma, dist.min, dist.max
            return cls(lambda rng: _clamp(math.exp(rng.gauss(mu, sigma)), low, top),
                       f"lognormal median {dist.median:g} sigma {sigma:g}")
        if isinstance(dist, EmpiricalDist):
            if dist.values:
                if min(dist.values) < 1:
                    raise ConfigError("empirical values must be positive integers", key="requests")
                values = list(dist.values)
            else:
                values = read_lengths(Path(base_dir) / str(dist.file), dist.column)
            return cls(lambda rng: rng.choice(values), f"empirical ({len(values)} values)")
        raise TypeError(f"not a length distribution: {dist!r}")


def _clamp(x: float, lo: int, hi: int | None) -> int:
    n = max(lo, int(round(x)))
    return min(n, hi) if hi is not None else n
