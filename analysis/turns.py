"""Per-turn metrics of multi-turn sessions (METRICS.md "Sessions"): `turn_table(requests)`.

One row per turn index (0 for a session's first turn) over the finished session turns: how many, their
TTFT and TTFA p50 / p95, and their mean input and cached prompt tokens. Later turns carry the whole
conversation, so a server with a prefix cache shows it here: TTFT by turn stays flat while the prompt
grows. None when the run had no sessions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["turn_table"]


def _pct(values: pd.Series, q: float) -> float:
    v = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=float)
    return float(np.percentile(v, q)) if v.size else float("nan")


def _mean(frame: pd.DataFrame, column: str) -> float:
    if column not in frame:
        return float("nan")
    v = pd.to_numeric(frame[column], errors="coerce").dropna()
    return float(v.mean()) if len(v) else float("nan")


def turn_table(requests: pd.DataFrame) -> pd.DataFrame | None:
    """Per-turn figures of the derived requests (`analysis.requests.derive_requests`); None without sessions."""
    if "turn" not in requests or requests["turn"].isna().all():
        return None
    done = requests[requests["turn"].notna() & requests["finished"].astype(bool)]
    rows = []
    for turn, group in done.groupby(done["turn"].astype(int), sort=True):
        rows.append({"turn": int(turn), "requests": len(group),
                     "ttft_p50_s": _pct(group["ttft_s"], 50), "ttft_p95_s": _pct(group["ttft_s"], 95),
                     "ttfa_p95_s": _pct(group["ttfa_s"], 95) if "ttfa_s" in group else float("nan"),
                     "input_tokens_mean": _mean(group, "input_tokens"),
                     "cached_tokens_mean": _mean(group, "cached_tokens")})
    return pd.DataFrame(rows, columns=["turn", "requests", "ttft_p50_s", "ttft_p95_s", "ttfa_p95_s",
                                       "input_tokens_mean", "cached_tokens_mean"])
