"""Trace replay options as pure functions over a trace frame (`llmload.traces.TRACE_COLUMNS`).

Order applied by `prepare_replay`: time window on the original offsets, drop (and count) requests that
failed in the source, speed-up, rate scaling, then the uniform twin is derived from the result.

- window `[start, end)`: the arrivals in it, offsets measured from `start`.
- speed-up `f`: time compressed by `f` (offsets and span divided by `f`; the rate times `f`).
- rate scaling by thinning: each arrival kept with probability `scale` (seeded), only `scale <= 1`.
- rate scaling by superposition: `ceil(scale)` copies of the trace overlaid, copy j shifted cyclically
  by `j * span / copies` (the last copy thinned to the fractional part), so bursts keep their shape.
- uniform twin: the same requests in the same order, evenly spaced over the same span (same mean rate).
- time-scaling to a mean rate (`shape.trace.scales`): the prepared trace compressed or stretched in time
  so that its mean rate is the one asked; the same requests, the bursts keep their shape.

A trace's span is the window length when one is given, else `last offset * n / (n - 1)` (so that the
mean rate is the usual `(n - 1) / last offset`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from llmload.config import TraceShape
from llmload.errors import ConfigError
from llmload.traces import load_trace
from shapes.steps import TraceArrivals

__all__ = [
    "Replay",
    "loop_trace",
    "prepare_replay",
    "resolve_trace_path",
    "scale_to_rate",
    "slice_trace",
    "speed_up",
    "superpose",
    "thin",
    "to_trace_arrivals",
    "trace_span_s",
    "uniform_twin",
    "window_trace",
]


@dataclass(frozen=True)
class Replay:
    """A trace ready to replay: `frame` (offsets from 0) over `span_s` seconds.

    `failed_in_source` counts requests in the window that failed in the source and are not replayed;
    `source_rows` is the number of rows in the file.
    """

    frame: pd.DataFrame
    span_s: float
    failed_in_source: int
    source_rows: int

    @property
    def mean_rate(self) -> float:
        return len(self.frame) / self.span_s if self.span_s > 0 else 0.0


def trace_span_s(offsets: np.ndarray | pd.Series) -> float:
    """The span of arrivals measured from 0: `last * n / (n - 1)`; 1 s for a single arrival."""
    values = np.asarray(offsets, dtype=np.float64)
    if len(values) == 0:
        return 0.0
    last = float(values.max())
    if len(values) == 1 or last <= 0:
        return 1.0
    return last * len(values) / (len(values) - 1)


def window_trace(frame: pd.DataFrame, start_s: float, end_s: float) -> pd.DataFrame:
    """Arrivals with `start_s <= offset < end_s`, offsets shifted to start at 0."""
    keep = (frame["offset_s"] >= start_s) & (frame["offset_s"] < end_s)
    picked = frame[keep].reset_index(drop=True)
    return picked.assign(offset_s=picked["offset_s"] - start_s)


def speed_up(frame: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Time compressed `factor` times (`factor` < 1 slows the trace down)."""
    if not factor > 0:
        raise ValueError(f"speed-up must be > 0, got {factor}")
    return frame.assign(offset_s=frame["offset_s"] / factor)


def thin(frame: pd.DataFrame, keep: float, rng: np.random.Generator) -> pd.DataFrame:
    """Each arrival kept independently with probability `keep` (Bernoulli thinning, seeded)."""
    if not 0 < keep <= 1:
        raise ValueError(f"thinning keeps a fraction in (0, 1], got {keep}")
    mask = rng.random(len(frame)) < keep
    return frame[mask].reset_index(drop=True)


def superpose(frame: pd.DataFrame, span_s: float, factor: float, rng: np.random.Generator) -> pd.DataFrame:
    """`factor` times the rate by overlaying cyclically shifted copies over the same span."""
    if not factor > 0:
        raise ValueError(f"superposition factor must be > 0, got {factor}")
    copies = max(1, math.ceil(factor - 1e-9))
    whole = math.floor(factor + 1e-9)
    parts = []
    for j in range(copies):
        copy = frame if j < whole else thin(frame, factor - whole, rng)
        shifted = (copy["offset_s"] + j * span_s / copies) % span_s if span_s > 0 else copy["offset_s"]
        parts.append(copy.assign(offset_s=shifted))
    merged = pd.concat(parts, ignore_index=True)
    return merged.sort_values("offset_s", kind="stable").reset_index(drop=True)


def scale_to_rate(frame: pd.DataFrame, span_s: float, rate: float) -> tuple[pd.DataFrame, float]:
    """The same arrivals time-scaled so that their mean rate (count / span) is `rate`: (frame, span)."""
    if not rate > 0 or span_s <= 0 or frame.empty:
        raise ValueError(f"cannot scale {len(frame)} arrivals over {span_s:g}s to {rate:g} req/s")
    factor = rate * span_s / len(frame)
    return speed_up(frame, factor), span_s / factor


def uniform_twin(frame: pd.DataFrame, span_s: float) -> pd.DataFrame:
    """The same requests in the same order, evenly spaced over `span_s` (same count, same mean rate)."""
    return frame.assign(offset_s=np.arange(len(frame), dtype=np.float64) * (span_s / max(1, len(frame))))


def loop_trace(frame: pd.DataFrame, span_s: float, duration_s: float) -> pd.DataFrame:
    """The trace repeated back to back (period `span_s`) to cover `[0, duration_s)`."""
    if span_s <= 0 or frame.empty:
        return frame.iloc[0:0]
    laps = math.ceil(duration_s / span_s)
    looped = pd.concat([frame.assign(offset_s=frame["offset_s"] + lap * span_s) for lap in range(laps)],
                       ignore_index=True)
    return looped[looped["offset_s"] < duration_s].reset_index(drop=True)


def slice_trace(frame: pd.DataFrame, start_s: float, end_s: float) -> pd.DataFrame:
    """The arrivals of `[start_s, end_s)`, offsets from `start_s` (same as `window_trace`)."""
    return window_trace(frame, start_s, end_s)


def resolve_trace_path(file: str, base_dir: str | Path | None = None) -> Path:
    """A trace path as written in a config: relative to the config's folder if it exists there, else as is."""
    p = Path(file).expanduser()
    if not p.is_absolute() and base_dir is not None and (Path(base_dir) / p).exists():
        return Path(base_dir) / p
    return p


def prepare_replay(shape: TraceShape, *, seed: int, base_dir: str | Path | None = None,
                   key: str = "shape.trace") -> Replay:
    """Load `shape.file` and apply the window, speed-up and rate scaling of `shape` (seeded)."""
    path = resolve_trace_path(shape.file, base_dir)
    frame = load_trace(path, shape.format)
    source_rows = len(frame)
    span = trace_span_s(frame["offset_s"])
    if shape.window is not None:
        start, end = shape.window
        if end <= start:
            raise ConfigError(f"window end {end:g}s must be after its start {start:g}s", key=f"{key}.window")
        frame = window_trace(frame, start, end)
        span = min(end, span) - start
        if frame.empty or span <= 0:
            raise ConfigError(f"no arrivals in the window [{start:g}s, {end:g}s) of {path}",
                              key=f"{key}.window")
    failed = int(frame["failed_in_source"].sum())
    frame = frame[~frame["failed_in_source"]].reset_index(drop=True)
    if frame.empty:
        raise ConfigError(f"every request in {path} failed in the source: nothing to replay", key=f"{key}.file")
    frame, span = speed_up(frame, shape.speedup), span / shape.speedup
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x7ACE]))
    if shape.rate_scale > 1 and shape.scale_method == "thin":
        raise ConfigError("thinning can only lower the rate; use scale_method: superpose for rate_scale > 1",
                          key=f"{key}.rate_scale")
    if shape.rate_scale != 1:
        frame = (thin(frame, shape.rate_scale, rng) if shape.rate_scale < 1
                 else superpose(frame, span, shape.rate_scale, rng))
    if frame.empty:
        raise ConfigError("rate scaling left no arrivals", key=f"{key}.rate_scale")
    return Replay(frame=frame, span_s=span, failed_in_source=failed, source_rows=source_rows)


def _ints(column: pd.Series) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in column]


def to_trace_arrivals(frame: pd.DataFrame, *, use_sizes: bool = True) -> TraceArrivals:
    """A trace frame as a step carries it (plain lists). Without `use_sizes` the request mix sizes it."""
    n = len(frame)
    none: list[int | None] = [None] * n
    prompts = frame["prompt"].tolist() if "prompt" in frame.columns else []
    return TraceArrivals(
        offsets_s=[float(v) for v in frame["offset_s"]],
        input_tokens=_ints(frame["input_tokens"]) if use_sizes else none,
        output_tokens=_ints(frame["output_tokens"]) if use_sizes else list(none),
        prefix_id=_ints(frame["prefix_id"]),
        prefix_tokens=_ints(frame["prefix_tokens"]),
        prompt=[p if isinstance(p, str) else None for p in prompts] if any(isinstance(p, str) for p in prompts)
        else None,
        hash_ids=_hash_ids(frame),
        session_turns=_session_turns(frame),
    )


def _session_turns(frame: pd.DataFrame) -> list[list[dict] | None] | None:
    """A conversation trace's later turns per session (None when the trace has no sessions)."""
    if "session_turns" not in frame.columns:
        return None
    out = [list(v) if isinstance(v, list) else None for v in frame["session_turns"]]
    return out if any(v is not None for v in out) else None


def _hash_ids(frame: pd.DataFrame) -> list[list[int] | None] | None:
    """Mooncake's `hash_ids` per row as plain lists (None when the trace has none)."""
    if "hash_ids" not in frame.columns:
        return None
    out = [[int(h) for h in v] if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else None
           for v in frame["hash_ids"]]
    return out if any(v is not None for v in out) else None
