"""A sim twin of a measured server: the sim engine's settings fitted to a run's records and telemetry.

`fit_run(run)` estimates each `llmload.sim.settings.SimSettings` key the run can observe, each with its
uncertainty and where it came from, and names the ones it could not observe (`Fit.unobserved`). The
engine model (`llmload.sim.engine`) says what each one costs, so each has a figure that shows it:

- **slots** (`max_num_seqs`; `num_parallel` for Ollama and llama.cpp): the server's own figure in the
  manifest's conditions, else the running plateau (`analysis.limit_evidence.infer_slots`); a run that
  never queued shows only a lower bound.
- **step time against batch size** (`step_base_s`, `decode_cost_s`): a decode step costs
  `step_base_s + decode_cost_s x batch`, and an inter-token gap is one step. Gaps of a single token
  during which no other request got its first token (no prefill in that step), nor waited for it (a
  queued or chunked prompt; all gaps when these miss the largest batch seen), are grouped by the batch
  at the gap's middle (the run's requests between first and last token); the median gap per batch is
  fitted by least squares weighted by the gaps per batch, and a bootstrap of the gaps gives the
  standard errors. Another client's traffic on the server would add to the batch unseen.
- **a step cost per batch size** (`decode_step_s`): when that line's intercept comes out below zero beyond
  its noise (llama.cpp on a CPU: 28 / 54 / 86 / 72 ms at 1-4 sequences, the 3-sequence step dearer than
  the 4-sequence one), the step is not a line in the batch size; with every batch size from 1 to the
  slots seen in `MIN_GAPS_PER_BATCH` gaps, the medians per batch size are the twin's table (each with
  its bootstrap standard error), and the sim uses it in place of the line (`step_base_s` and
  `decode_cost_s` are still written, through the origin, and not used: the table wins); with a batch
  size unseen, the run does not fit the model (`Fit.misfit`).
- **prefill cost per token** (`prefill_cost_s`): TTFT of requests sent while fewer requests than slots
  (or than the most ever running, when the slot count is not known) were in flight (admitted at once),
  and no other prompt awaited its first token (alone in its prefill step; all when too few were), against their prompt tokens computed (input less prefix-cache hits):
  the least-squares slope and its standard error. Prompts of one length cannot show it.
  For llama.cpp, a server that takes a prompt in two steps (below): the slope of the step that carried a
  prompt's first part against its tokens (`fit_chunk_cost`, at every load of the run); else, or with too
  few of those, the prompt's whole processing (from the end of the step it arrived in, the first token
  after its sending, to its first token).
- **a prompt's tail in a step of its own** (`prompt_tail_tokens`, llama.cpp only): llama.cpp's server
  stops a prompt's batch 4 tokens before its end to save a context checkpoint (with a sliding-window
  model such as Gemma 3), so the tail and the first token come a step later, and the requests decoding
  meanwhile get a token from each step. Counted on the tokens of a request decoding from before another's
  sending to the step end before its first token (`prompt_steps`): one step end in between (the step the
  prompt arrived in) for one prompt step, two for two; two or more give llama.cpp's 4 (its source's figure: four tokens cost too little to be timed),
  one gives 0. Those decode gaps that may have carried a prompt's first part are then left out of the
  step-time fit.
- **KV capacity** (`num_blocks`, `block_size`): vLLM's `cache_config_info` (the manifest's
  `kv_num_gpu_blocks`, `kv_block_size`) when given; else, for one instance, KV usage against the tokens
  the run's requests held (prompt plus tokens out so far), a fit through the origin, at 16 tokens a
  block (assumed, and said).
- **queue limit** (`max_num_queued_reqs`): with requests rejected, the most requests in the server
  (running + waiting, its gauges; else the requests in flight at each rejection); with none, unobserved.
- `max_model_len`, `enable_prefix_caching`, `max_num_batched_tokens`: the manifest's conditions (the
  server's `/v1/models` and `cache_config_info`; the last only where written as
  `conditions.extra.max_num_batched_tokens`).

Pure: reads a loaded `analysis.run.Run`, prints nothing; `llmload.report.twin` prints and writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.limit_evidence import infer_slots, server_samples
from analysis.run import Run
from analysis.telemetry_stats import TelemetryIndex

__all__ = ["BOOTSTRAP", "LLAMACPP_PROMPT_TAIL", "MAX_DRIFT", "MIN_GAPS_PER_BATCH", "Estimate", "Fit", "decode_gaps",
           "describe", "fit_chunk_cost", "fit_prefill_cost", "fit_run", "fit_step_cost", "prompt_steps", "step_drift", "twin_yaml"]

#: gaps a batch size needs before its median enters the step-time fit
MIN_GAPS_PER_BATCH = 20
#: bootstrap resamples for the step-time fit's standard errors
BOOTSTRAP = 200
#: requests sent at once needed for the prefill slope
MIN_PREFILL_REQUESTS = 10
#: block size assumed when the server does not say (vLLM's default on GPUs)
DEFAULT_BLOCK_SIZE = 16
#: the step time at one batch size may differ this much (relative) between the run's first and last
#: third before the fit says the step cost drifted (the model's costs are constant)
MAX_DRIFT = 0.2
#: the same for a prompt's first-token step against its fitted length (prompt steps are fewer and noisier
#: than the decode gaps' medians): outside 1/1.5x to 1.5x the prefill cost drifted
MAX_PREFILL_DRIFT = 1.5
#: share of the completed requests that must carry two token times or more (else: no token times)
MIN_TIMED_SHARE = 0.5
#: the prompt tokens llama.cpp's server leaves for a step of their own (`update_slots`: a prompt's batch
#: stops "4 + n_ubatch" and "4" tokens before its end, for a context checkpoint, with a sliding-window model)
LLAMACPP_PROMPT_TAIL = 4


@dataclass(frozen=True)
class Estimate:
    """One fitted setting: its value, one standard error (None: read from the server, exact), the unit
    of both, and the evidence it came from."""

    key: str
    #: a tuple for a table (`decode_step_s`), its errors a tuple of the same length
    value: float | int | bool | tuple[float, ...]
    error: float | tuple[float, ...] | None
    unit: str
    basis: str


@dataclass
class Fit:
    """The estimates, the settings not observed (key -> why) and the flavour they are for."""

    flavor: str
    estimates: list[Estimate] = field(default_factory=list)
    unobserved: dict[str, str] = field(default_factory=dict)
    #: why the run does not fit the engine's model (empty: it fits); a twin with any is not one
    misfit: list[str] = field(default_factory=list)

    def get(self, key: str) -> Estimate | None:
        return next((e for e in self.estimates if e.key == key), None)

    def settings(self) -> dict[str, Any]:
        """The fitted values as `SimSettings` keys (durations in seconds)."""
        return {e.key: e.value for e in self.estimates}


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _conditions(run: Run) -> dict[str, Any]:
    return dict((run.manifest or {}).get("conditions") or {})


def _numeric(frame: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all-NaN when the frame lacks it."""
    if name in frame.columns:
        return pd.to_numeric(frame[name], errors="coerce").astype(float)
    return pd.Series(np.nan, index=frame.index, dtype=float)


def _finished(records: pd.DataFrame) -> pd.DataFrame:
    first = _numeric(records, "first_token_at")
    last = _numeric(records, "last_token_at")
    return records[first.notna() & last.notna()]


def decode_gaps(records: pd.DataFrame, *, split: bool = False) -> pd.DataFrame:
    """One row per single-token inter-token gap with no other request's first token inside it (a pure
    decode step): `gap_s`, `batch` (requests between first and last token at the gap's middle), `t`
    (the gap's middle), `waiting` (requests sent and not yet given their first token during the gap:
    queued, or a prompt chunked over several steps). `split` (a server that takes a prompt in two steps,
    `prompt_steps`): the gaps that end at the step end just before a request's first token, that request
    sent before the gap began (the step that may have carried its prompt's first part), are left out."""
    done = _finished(records)
    if done.empty or "token_times" not in done:
        return pd.DataFrame({"gap_s": [], "batch": [], "t": [], "waiting": []})
    starts, ends, counts = [], [], []
    token_counts = done["token_counts"] if "token_counts" in done else pd.Series([None] * len(done), index=done.index)
    for times, tc in zip(done["token_times"], token_counts, strict=True):
        if times is None or len(times) < 2:
            continue
        t = np.asarray(times, dtype=float)
        single = np.ones(len(t) - 1, dtype=bool) if tc is None or len(tc) != len(t) else \
            np.asarray(tc, dtype=float)[1:] == 1
        starts.append(t[:-1][single])
        ends.append(t[1:][single])
        counts.append(int(single.sum()))
    if not starts:
        return pd.DataFrame({"gap_s": [], "batch": [], "t": [], "waiting": []})
    a, b = np.concatenate(starts), np.concatenate(ends)
    gap = b - a
    slack = 0.25 * gap  # a token written at a step end reaches each client within a fraction of a step
    firsts = np.sort(done["first_token_at"].to_numpy(dtype=float))
    lasts = np.sort(done["last_token_at"].to_numpy(dtype=float))
    prefill = np.searchsorted(firsts, b + slack, side="right") - np.searchsorted(firsts, a + slack, side="right")
    mid = (a + b) / 2
    batch = np.searchsorted(firsts, mid, side="left") - np.searchsorted(lasts, mid, side="left")
    keep = (prefill == 0) & (gap > 0) & (batch >= 1)
    if split:
        keep &= ~_before_first(done, a, b)
    sent, first = _sent_and_first(records)
    # requests sent before the gap's end whose first token (or end) came after its start: waiting or
    # prefilling meanwhile (every request with its first token by the start was sent before the end)
    waiting = np.searchsorted(sent, b, side="left") - np.searchsorted(first, a, side="right")
    return pd.DataFrame({"gap_s": gap[keep], "batch": batch[keep].astype(int), "t": mid[keep],
                         "waiting": waiting[keep].astype(int)})


def _token_events(done: pd.DataFrame) -> np.ndarray:
    """Every token time of the completed requests, sorted."""
    return np.sort(np.concatenate([np.asarray(t, dtype=float) for t in done["token_times"]
                                   if t is not None and len(t)] or [np.array([])]))


def _step_slack(done: pd.DataFrame) -> float:
    """A quarter of the median inter-token gap: how far apart one step end's tokens reach the clients."""
    steps = np.concatenate([np.diff(np.asarray(t, dtype=float)) for t in done["token_times"]
                            if t is not None and len(t) > 1] or [np.array([])])
    return 0.25 * float(np.median(steps)) if steps.size else 0.0


def _before_first(done: pd.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per gap (start `a`, end `b`): it ends at the last step end before some request's first token, and
    that request was sent before `a` (the gap's step may have carried the first part of its prompt)."""
    events, slack = _token_events(done), _step_slack(done)
    out = np.zeros(len(b), dtype=bool)
    if not len(events) or not len(b):
        return out
    order = np.argsort(b)
    b_sorted, a_sorted = b[order], a[order]
    sent = done["sent_at"].to_numpy(dtype=float)
    first = done["first_token_at"].to_numpy(dtype=float)
    idx = np.searchsorted(events, first - slack, side="left") - 1
    for j in np.nonzero(idx >= 0)[0]:
        end = events[idx[j]]
        lo, hi = np.searchsorted(b_sorted, [end - slack, end + slack], side="left")
        if hi > lo:
            out[order[lo:hi][a_sorted[lo:hi] > sent[j]]] = True
    return out


def prompt_steps(records: pd.DataFrame, slots: int | None) -> dict[str, Any] | None:
    """`{steps, requests, split_share}`: the engine steps a prompt took, read on a request decoding through
    its prefill (from before its sending to the step end before its first token, at least): that request's
    tokens after the prompt was sent and before its first token are the end of the step it arrived in,
    then one per step of the prompt's before the last (which ends with the first token); the median over
    the requests sent while a slot was free (fewer than `slots` in flight; with `slots` unknown, while no
    other prompt awaited its first token). None with fewer than `MIN_PREFILL_REQUESTS`."""
    done = _finished(records)
    if done.empty or "token_times" not in done:
        return None
    slack = _step_slack(done)
    sent = done["sent_at"].to_numpy(dtype=float)
    first = done["first_token_at"].to_numpy(dtype=float)
    last = done["last_token_at"].to_numpy(dtype=float)
    # admitted at once: a slot free (when the slots are known; else no other prompt waiting either)
    keep = _in_flight_at(records, sent) < slots if slots else _awaiting_first_at(records, sent) == 0
    times = [np.asarray(t, dtype=float) for t in done["token_times"]]
    events = _token_events(done)
    idx = np.searchsorted(events, first - slack, side="left") - 1
    before = np.where(idx >= 0, events[np.clip(idx, 0, None)], np.inf)  # the step end before the first token's
    counts = []
    for j in np.nonzero(keep)[0]:
        # decoding since before its sending, to the step end before its first token at least
        decoders = np.nonzero((first < sent[j]) & (last > sent[j]) & (last >= before[j] - slack))[0]
        if len(decoders):
            t = times[decoders[0]]
            counts.append(int(np.searchsorted(t, first[j] - slack, side="right") - np.searchsorted(t, sent[j], side="right")))
    if len(counts) < MIN_PREFILL_REQUESTS:
        return None
    c = np.asarray(counts)
    return {"steps": int(np.median(c)), "requests": len(c), "split_share": float(np.mean(c >= 2))}


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Intercept and slope of y against x by least squares weighted by w."""
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    slope = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
    return float(ym - slope * xm), slope


def fit_step_cost(gaps: pd.DataFrame, *, seed: int = 0) -> dict[str, Any] | None:
    """`{step_base_s, step_base_se, decode_cost_s, decode_cost_se, gaps, batch_min, batch_max, per_batch}`
    from the median gap per batch size (at least `MIN_GAPS_PER_BATCH` gaps each, two sizes at least;
    `per_batch`: batch -> (median s, its bootstrap standard error, gaps)); None when the run showed fewer
    than two batch sizes."""
    batch, gap = gaps["batch"].to_numpy(dtype=int), gaps["gap_s"].to_numpy(dtype=float)
    groups = [(int(b), gap[batch == b]) for b in np.unique(batch) if (batch == b).sum() >= MIN_GAPS_PER_BATCH]
    if len(groups) < 2:
        return None
    x = np.array([b for b, _ in groups], dtype=float)
    w = np.array([len(g) for _, g in groups], dtype=float)
    y = np.array([np.median(g) for _, g in groups])
    base, slope = _weighted_line(x, y, w)
    rng = np.random.default_rng(seed)
    boot = np.array([[np.median(rng.choice(g, size=len(g))) for _, g in groups] for _ in range(BOOTSTRAP)])
    fits = np.array([_weighted_line(x, row, w) for row in boot])
    line = {"step_base_s": base, "step_base_se": float(fits[:, 0].std(ddof=1)), "decode_cost_s": slope,
            "decode_cost_se": float(fits[:, 1].std(ddof=1)), "gaps": int(w.sum()),
            "batch_min": int(x.min()), "batch_max": int(x.max()), "negative_base_s": None,
            "negative_base_se": None,
            "per_batch": {int(b): (float(v), float(e), int(n))
                          for b, v, e, n in zip(x, y, boot.std(axis=0, ddof=1), w, strict=True)}}
    if base < 0:
        # a step cannot cost less than nothing (the sim refuses a negative base): the line through the
        # origin, and the intercept kept so that one clearly below zero can say the cost is not linear
        line.update(step_base_s=0.0, step_base_se=0.0, negative_base_s=base, negative_base_se=line["step_base_se"],
                    decode_cost_s=_origin_slope(x, y, w),
                    decode_cost_se=float(np.std([_origin_slope(x, row, w) for row in boot], ddof=1)))
    return line


def _origin_slope(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Slope of y against x through the origin, by least squares weighted by w."""
    return float(np.sum(w * x * y) / np.sum(w * x * x))


def step_drift(gaps: pd.DataFrame) -> dict[str, float] | None:
    """`{ratio, batches, first_s, last_s}`: the median decode gap in the run's last third over that in its
    first third, per batch size seen at least `MIN_GAPS_PER_BATCH` / 2 times in both (the median of those
    ratios), over the gaps with no request waiting for its first token (a ladder's last third is its
    heaviest load: a queued prompt being chunked into decode steps would read as drift); None when no
    batch size was seen enough in both. A server whose step cost is constant gives about 1."""
    if gaps.empty or "t" not in gaps:
        return None
    gaps = gaps[gaps["waiting"] == 0] if "waiting" in gaps else gaps  # no prompt anywhere in the engine
    if gaps.empty:
        return None
    t = gaps["t"].to_numpy(dtype=float)
    first_end, last_start = np.quantile(t, [1 / 3, 2 / 3])
    early, late = gaps[t <= first_end], gaps[t >= last_start]
    need = MIN_GAPS_PER_BATCH // 2
    ratios, firsts, lasts = [], [], []
    for batch, g in early.groupby("batch")["gap_s"]:
        other = late.loc[late["batch"] == batch, "gap_s"]
        if len(g) >= need and len(other) >= need:
            firsts.append(float(np.median(g)))
            lasts.append(float(np.median(other)))
            ratios.append(lasts[-1] / firsts[-1])
    if not ratios:
        return None
    return {"ratio": float(np.median(ratios)), "batches": len(ratios), "first_s": float(np.median(firsts)),
            "last_s": float(np.median(lasts))}


def _timed_share(records: pd.DataFrame) -> float:
    """Share of the completed requests with two token times or more."""
    done = _finished(records)
    if done.empty:
        return 0.0
    if "token_times" not in done:
        return 0.0
    return float(np.mean([t is not None and len(t) >= 2 for t in done["token_times"]]))


def _awaiting_first_at(records: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Requests sent strictly before each time and given their first token (or closed without one)
    after it: queued or in their prefill then."""
    sent, first = _sent_and_first(records)
    return np.searchsorted(sent, times, side="left") - np.searchsorted(first, times, side="right")


def _sent_and_first(records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(sent_at, first token at) of the sent requests, each sorted; a request without a first token
    counts at its close, one never closed at infinity."""
    sent = pd.to_numeric(records["sent_at"], errors="coerce").to_numpy(dtype=float)
    first = (pd.to_numeric(records["first_token_at"], errors="coerce").to_numpy(dtype=float)
             if "first_token_at" in records else np.full(len(records), np.nan))
    if "closed_at" in records:
        first = np.where(np.isnan(first), pd.to_numeric(records["closed_at"], errors="coerce").to_numpy(dtype=float),
                         first)
    ok = ~np.isnan(sent)
    return np.sort(sent[ok]), np.sort(np.where(np.isnan(first), np.inf, first)[ok])


def _in_flight_at(records: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Requests sent and not finished (last token, else closed) at each time, from the records."""
    sent = pd.to_numeric(records["sent_at"], errors="coerce").to_numpy(dtype=float)
    end = _numeric(records, "last_token_at").to_numpy(dtype=float)
    if "closed_at" in records:
        closed = pd.to_numeric(records["closed_at"], errors="coerce").to_numpy(dtype=float)
        end = np.where(np.isnan(end), closed, end)
    ok = ~np.isnan(sent) & ~np.isnan(end)
    s, e = np.sort(sent[ok]), np.sort(end[ok])
    return np.searchsorted(s, times, side="left") - np.searchsorted(e, times, side="right")


def _prefill_steps(done: pd.DataFrame, tokens: np.ndarray, *, whole: bool = False) -> pd.DataFrame:
    """Per request, the engine step that ended with its first token: `step_s` (from the latest token any
    request got before it, the previous step's end, or from its sending when the engine was idle then;
    a queued request's wait and the rest of the step it arrived in are left out), `prefill_tokens` (its
    prompt and those of the requests whose first token came at the same step end) and `decoding` (the
    requests decoding in that step). `whole`: `step_s` runs from the first token any request got after its
    sending (the end of the step it arrived in) instead: every step of a prompt taken in several."""
    events = _token_events(done)
    first = done["first_token_at"].to_numpy(dtype=float)
    last = done["last_token_at"].to_numpy(dtype=float)
    sent = done["sent_at"].to_numpy(dtype=float)
    slack = _step_slack(done)  # one step end's spread at the clients
    if whole:
        after = np.searchsorted(events, sent, side="right")
        nxt = events[np.clip(after, 0, max(len(events) - 1, 0))] if len(events) else np.full(len(sent), np.inf)
        before = np.where((after < len(events)) & (nxt < first - slack), nxt, -np.inf)
    else:
        idx = np.searchsorted(events, first - slack, side="left") - 1
        before = np.where(idx >= 0, events[np.clip(idx, 0, None)], -np.inf)
    order = np.argsort(first)
    f_sorted, cum = first[order], np.concatenate([[0.0], np.cumsum(np.nan_to_num(tokens[order]))])
    together = cum[np.searchsorted(f_sorted, first + slack, side="right")] - \
        cum[np.searchsorted(f_sorted, first - slack, side="left")]
    decoding = np.searchsorted(f_sorted, first - slack, side="left") - \
        np.searchsorted(np.sort(last), first - slack, side="left")
    return pd.DataFrame({"step_s": first - np.maximum(sent, before), "prefill_tokens": together,
                         "decoding": decoding})


def fit_prefill_cost(records: pd.DataFrame, slots: int | None, *, whole: bool = False) -> dict[str, Any] | None:
    """`{prefill_cost_s, prefill_cost_se, requests, tokens_min, tokens_max}`: the length of the step that
    computed each prompt (`_prefill_steps`) against the prompt tokens computed in it (inputs less
    prefix-cache hits) and the requests decoding in it, by least squares; over the requests sent while
    fewer than `slots` were in flight (fewer prompts sharing a step; all when unknown), and of those the
    ones sent while no other prompt awaited its first token (`whole`: and none was sent before its own first
    token) when there are enough. None with too
    few requests or prompts of one length. A prompt chunked over several steps (over the token budget)
    shows only its last chunk, unless `whole` (`_prefill_steps`)."""
    done = _finished(records)
    if done.empty or "input_tokens" not in done or "token_times" not in done:
        return None
    tokens = pd.to_numeric(done["input_tokens"], errors="coerce").to_numpy(dtype=float)
    if "cached_tokens" in done:
        tokens = tokens - np.nan_to_num(pd.to_numeric(done["cached_tokens"], errors="coerce").to_numpy(dtype=float))
    steps = _prefill_steps(done, tokens, whole=whole)
    keep = ~np.isnan(tokens) & np.isfinite(steps["step_s"].to_numpy()) & (tokens > 0)
    if slots:
        keep &= _in_flight_at(records, done["sent_at"].to_numpy(dtype=float)) < slots
    # alone in the prefill: no other prompt waiting for its first token when it was sent (two prompts in
    # one step share the token budget: the later one is chunked, and its first-token step shows only
    # its last chunk, which read as a prefill cost 20% low on long prompts)
    alone = _awaiting_first_at(records, done["sent_at"].to_numpy(dtype=float)) == 0
    if whole:  # nor sent before its first token: a prompt sent meanwhile joins the step of its tail
        sent_all, _ = _sent_and_first(records)
        sent, first = done["sent_at"].to_numpy(dtype=float), done["first_token_at"].to_numpy(dtype=float)
        alone &= np.searchsorted(sent_all, first, side="left") - np.searchsorted(sent_all, sent, side="right") == 0
    if int((keep & alone).sum()) >= MIN_PREFILL_REQUESTS and np.ptp(tokens[keep & alone]) > 0:
        keep &= alone
    own = tokens[keep]
    if len(own) < MIN_PREFILL_REQUESTS or np.ptp(own) <= 0:
        return None
    chosen = steps[keep]
    x = np.column_stack([np.ones(len(own)), chosen["prefill_tokens"], chosen["decoding"]])
    y = chosen["step_s"].to_numpy(dtype=float)
    if np.linalg.matrix_rank(x) < 3:
        x = x[:, :2]  # one batch size throughout: its cost is in the intercept
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    sigma2 = float(np.sum(resid ** 2)) / max(len(y) - x.shape[1], 1)
    se = math.sqrt(sigma2 * float(np.linalg.inv(x.T @ x)[1, 1]))
    return {"prefill_cost_s": float(coef[1]), "prefill_cost_se": se, "requests": len(own),
            "tokens_min": float(own.min()), "tokens_max": float(own.max()),
            "drift": _prefill_drift(done["sent_at"].to_numpy(dtype=float)[keep], y, x @ coef)}


def fit_chunk_cost(records: pd.DataFrame, tail: int) -> dict[str, Any] | None:
    """What `fit_prefill_cost` gives, from the steps that carried a prompt's first part on a server that
    takes a prompt in two steps (its last `tail` tokens in the second, `prompt_steps`): the step just before
    the one that ended with a request's first token, when it began after that request was sent, some
    request got a token at its end, and no other prompt's first token came at its end or with that
    request's. Its length against the prompt tokens in it (input less prefix-cache hits, less `tail`) and
    the requests decoding in it (the tokens at its end), by least squares: the steps of every load the
    run went through, not only its light minutes (prompts sent to an idle or quiet server). None with fewer
    than `MIN_PREFILL_REQUESTS` such steps or prompts of one length."""
    done = _finished(records)
    if done.empty or "input_tokens" not in done or "token_times" not in done:
        return None
    events, slack = _token_events(done), _step_slack(done)
    if len(events) < 3:
        return None
    cut = np.concatenate([[0], np.nonzero(np.diff(events) > slack)[0] + 1])  # a step end's tokens: one cluster
    ends = np.append(events[cut[1:] - 1], events[-1])
    size = np.diff(np.append(cut, len(events)))
    tokens = pd.to_numeric(done["input_tokens"], errors="coerce").to_numpy(dtype=float)
    if "cached_tokens" in done:
        tokens = tokens - np.nan_to_num(pd.to_numeric(done["cached_tokens"], errors="coerce").to_numpy(dtype=float))
    sent = done["sent_at"].to_numpy(dtype=float)
    step_of_first = np.searchsorted(ends, done["first_token_at"].to_numpy(dtype=float) - slack, side="left")
    firsts_per_step = np.bincount(step_of_first, minlength=len(ends))
    f = step_of_first
    ok = (f >= 2) & (tokens > tail) & ~np.isnan(tokens)
    f = np.where(ok, f, 2)
    ok &= (ends[f - 2] >= sent) & (firsts_per_step[f] == 1) & (firsts_per_step[f - 1] == 0)
    if int(ok.sum()) < MIN_PREFILL_REQUESTS or np.ptp(tokens[ok]) <= 0:
        return None
    y = (ends[f - 1] - ends[f - 2])[ok]
    x = np.column_stack([np.ones(int(ok.sum())), tokens[ok] - tail, size[f - 1][ok]])
    if np.linalg.matrix_rank(x) < 3:
        x = x[:, :2]
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    sigma2 = float(np.sum(resid ** 2)) / max(len(y) - x.shape[1], 1)
    se = math.sqrt(sigma2 * float(np.linalg.inv(x.T @ x)[1, 1]))
    return {"prefill_cost_s": float(coef[1]), "prefill_cost_se": se, "requests": int(ok.sum()),
            "tokens_min": float(tokens[ok].min()), "tokens_max": float(tokens[ok].max()),
            "drift": _prefill_drift(sent[ok], y, x @ coef)}


def _prefill_drift(sent: np.ndarray, step_s: np.ndarray, fitted_s: np.ndarray) -> float | None:
    """The median first-token step over its fitted length in the last third of the fitted requests (by
    sending time) over that in the first third: about 1 for a server whose prefill cost is constant; None
    with fewer than `MIN_PREFILL_REQUESTS` / 2 requests in either third."""
    ok = fitted_s > 0
    sent, ratio = sent[ok], step_s[ok] / fitted_s[ok]
    if len(sent) < 3 * (MIN_PREFILL_REQUESTS // 2):
        return None
    first_end, last_start = np.quantile(sent, [1 / 3, 2 / 3])
    early, late = ratio[sent <= first_end], ratio[sent >= last_start]
    if min(len(early), len(late)) < MIN_PREFILL_REQUESTS // 2 or np.median(early) <= 0:
        return None
    return float(np.median(late) / np.median(early))


def _tokens_held(records: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Tokens the run's requests held in the KV cache at each time: prompt plus tokens out so far, for
    requests between their first and last token."""
    done = _finished(records)
    held = np.zeros(len(times))
    for first, last, prompt, token_times in zip(done["first_token_at"], done["last_token_at"],
                                                pd.to_numeric(done["input_tokens"], errors="coerce"),
                                                done["token_times"], strict=True):
        if math.isnan(prompt):
            continue
        inside = (times >= first) & (times < last)
        if inside.any():
            out = np.searchsorted(np.asarray(token_times, dtype=float), times[inside], side="right")
            held[inside] += prompt + out
    return held


def _fit_kv(fit: Fit, conds: Mapping[str, Any], samples: pd.DataFrame, records: pd.DataFrame) -> None:
    blocks, size = _f(conds.get("kv_num_gpu_blocks")), _f(conds.get("kv_block_size"))
    if blocks > 0 and size > 0:
        fit.estimates += [Estimate("num_blocks", int(blocks), None, "blocks", "the server's cache_config_info"),
                          Estimate("block_size", int(size), None, "tokens", "the server's cache_config_info")]
        return
    known = samples[samples["kv_usage"].notna() & (samples["kv_usage"] > 0.05)] if not samples.empty else samples
    if len(known) < 10 or "input_tokens" not in records or known["source"].nunique() > 1:
        fit.unobserved["num_blocks"] = ("no cache_config_info, and too little KV usage (over 5%) to weigh "
                                        "against the tokens held, or several instances sharing the requests")
        return
    usage = known["kv_usage"].to_numpy(dtype=float)
    held = _tokens_held(records, known["t"].to_numpy(dtype=float))
    capacity = float(np.sum(held * usage) / np.sum(usage ** 2))
    resid = held - capacity * usage
    se = math.sqrt(float(np.sum(resid ** 2)) / (len(usage) - 1) / float(np.sum(usage ** 2)))
    size = DEFAULT_BLOCK_SIZE
    fit.estimates.append(Estimate("num_blocks", int(round(capacity / size)), se / size, "blocks",
                                  f"KV usage against the tokens the run's requests held ({len(usage)} samples), "
                                  f"at {size} tokens a block (assumed: the server gave no block size)"))
    fit.unobserved["block_size"] = "no cache_config_info: 16 assumed for num_blocks"


def _fit_queue_limit(fit: Fit, records: pd.DataFrame, samples: pd.DataFrame) -> None:
    rejected = records[records["outcome"].astype(str) == "rejected"] if "outcome" in records else records.iloc[0:0]
    if rejected.empty:
        seen = int(_in_flight_at(records, pd.to_numeric(records["sent_at"], errors="coerce").dropna()
                                 .to_numpy(dtype=float)).max(initial=0))
        fit.unobserved["max_num_queued_reqs"] = (f"no request was rejected: a queue limit, if any, is above the "
                                                 f"{seen} requests in flight seen")
        return
    both = samples.dropna(subset=["running", "waiting"]) if not samples.empty else samples
    if len(both):
        total = both["running"] + both["waiting"]
        fit.estimates.append(Estimate("max_num_queued_reqs", int(total.max()), 0.0, "requests",
                                      f"the most requests in the server (running + waiting) with {len(rejected)} "
                                      f"rejected; reached in {int((total == total.max()).sum())} samples"))
        return
    at = _in_flight_at(records, pd.to_numeric(rejected["sent_at"], errors="coerce").dropna().to_numpy(dtype=float))
    fit.estimates.append(Estimate("max_num_queued_reqs", int(np.median(at)), float(np.ptp(at)) / 2, "requests",
                                  f"requests in flight at the {len(at)} rejections (client view)"))


def _fit_prompt_tail(fit: Fit, records: pd.DataFrame, slots: int | None) -> bool:
    """llama.cpp's prompt tail (`prompt_tail_tokens`) from the steps its prompts took (`prompt_steps`);
    True when the server takes a prompt in two steps."""
    seen = prompt_steps(records, slots)
    if seen is None:
        fit.unobserved["prompt_tail_tokens"] = (f"needs {MIN_PREFILL_REQUESTS} prompts at least sent while another "
                                                "request was decoding and a slot was free")
        return False
    split = seen["steps"] >= 2
    fit.estimates.append(Estimate(
        "prompt_tail_tokens", LLAMACPP_PROMPT_TAIL if split else 0, 0.0, "tokens",
        f"a prompt took {seen['steps']} step{'s' if seen['steps'] != 1 else ''} (median over {seen['requests']} "
        f"prompts, {seen['split_share']:.0%} in two or more, counted on a request decoding meanwhile)"
        + (f"; {LLAMACPP_PROMPT_TAIL} tokens: llama.cpp's tail before its context checkpoint" if split else "")))
    return split


def _fit_slots(fit: Fit, conds: Mapping[str, Any], samples: pd.DataFrame, key: str) -> int | None:
    for name in ("max_num_seqs", "ollama_num_parallel"):
        if _f(conds.get(name)) > 0:
            declared = int(_f(conds[name]))
            fit.estimates.append(Estimate(key, declared, None, "sequences", f"the manifest's conditions.{name}"))
            return declared
    blocks = _f(conds.get("kv_num_gpu_blocks"))
    slots, share = infer_slots(samples, num_blocks=blocks if blocks > 0 else None)
    if slots is not None:
        fit.estimates.append(Estimate(key, slots, 0.0, "sequences",
                                      f"the running plateau while requests waited ({share:.0%} of those samples)"))
        return slots
    peak = samples["running"].max() if not samples.empty else math.nan
    fit.unobserved[key] = ("no running plateau with requests waiting" +
                           (f": at least {int(peak)} (the most running seen)" if peak == peak else
                            " (no running gauge)"))
    return None


def _decode_table(fit: Fit, step: Mapping[str, Any], slots: int | None, below: float) -> Estimate | None:
    """The step cost per batch size (`decode_step_s`) when the line's intercept is below zero beyond its
    noise and every batch size from 1 to `slots` was seen in `MIN_GAPS_PER_BATCH` gaps; else None and the
    misfit said (the run does not fit the line, and cannot give the table)."""
    line = (f"the step cost is not a line in the batch size: its intercept is {below * 1000:.3g} ms, below zero "
            "(the twin's decode step costs a base plus a cost per sequence)")
    seen = step["per_batch"]
    missing = [b for b in range(1, (slots or 0) + 1) if b not in seen]
    if not slots or missing:
        fit.misfit.append(line + "; a cost per batch size (decode_step_s) needs every batch size from 1 to the slots "
                          f"in {MIN_GAPS_PER_BATCH} decode-only gaps at least: "
                          + ("the slots are not known" if not slots else
                             f"batch size {', '.join(map(str, missing))} had fewer"))
        return None
    rows = [seen[b] for b in range(1, slots + 1)]
    return Estimate("decode_step_s", tuple(v for v, _, _ in rows), tuple(e for _, e, _ in rows), "s",
                    f"median decode-only gap at each batch size 1-{slots} ({', '.join(str(n) for _, _, n in rows)} "
                    f"gaps; a bootstrap's standard errors): the step is not a line in the batch size (the line's "
                    f"intercept {below * 1000:.3g} ms, below zero beyond its noise); the sim's step costs this "
                    "table, and past its end an extrapolation (llmload.sim.settings)")


def fit_run(run: Run, *, seed: int = 0) -> Fit:
    """The sim settings a run can show, with their errors, and the ones it cannot (module docstring)."""
    conds = _conditions(run)
    flavor = str(conds.get("server") or "vllm")
    flavor = flavor if flavor in ("vllm", "ollama", "llamacpp", "sglang") else "vllm"
    fit = Fit(flavor=flavor)
    records = run.records
    samples = server_samples(TelemetryIndex(run.telemetry))
    slots_key = "num_parallel" if flavor in ("ollama", "llamacpp") else "max_num_seqs"
    slots = _fit_slots(fit, conds, samples, slots_key)
    timed = _timed_share(records)
    if timed < MIN_TIMED_SHARE:
        fit.misfit.append(f"only {timed:.0%} of the completed requests carry per-token times (the API hides "
                          "them, or the responses were not streamed): the step costs cannot be fitted")
    peak = samples["running"].max() if not samples.empty else math.nan
    # with no slot count, fewer in flight than the most ever running is a free slot too (slots >= that)
    free_below = slots or (int(peak) if peak >= 1 else None)
    split = _fit_prompt_tail(fit, records, free_below) if flavor == "llamacpp" else False
    gaps = decode_gaps(records, split=split)
    drift = step_drift(gaps)
    if drift is not None and abs(drift["ratio"] - 1) > MAX_DRIFT:
        fit.misfit.append(f"the step cost drifted: a decode step at the same batch size took {drift['ratio']:.2f}x "
                          f"as long in the run's last third as in its first ({drift['first_s'] * 1000:.3g} -> "
                          f"{drift['last_s'] * 1000:.3g} ms, median over {drift['batches']} batch sizes); "
                          "the twin's costs are constant")
    # decode steps with no prompt waiting anywhere: a queued or chunked prompt's work and the client's
    # busiest moments stay out (live against the sim on a loaded VM: 2.14 ms per sequence, not 1.75)
    # (taken only when they still reach the largest batch: a run whose full batches always had a queue,
    # e.g. a short overload step, keeps every gap, or the slope would rest on the light steps alone)
    every = fit_step_cost(gaps, seed=seed)
    quiet = fit_step_cost(gaps[gaps["waiting"] == 0], seed=seed) if "waiting" in gaps else None
    step = quiet if quiet is not None and every is not None and quiet["batch_max"] == every["batch_max"] else every
    if step is None:
        fit.unobserved["step_base_s"] = fit.unobserved["decode_cost_s"] = (
            f"inter-token gaps at fewer than two batch sizes ({MIN_GAPS_PER_BATCH} gaps each needed)")
    else:
        basis = (f"median inter-token gap against batch size {step['batch_min']}-{step['batch_max']} "
                 f"({step['gaps']} decode-only gaps)")
        below = step["negative_base_s"]
        table = None
        if below is not None:
            basis += f"; its intercept came out below zero ({below * 1000:.3g} ms): the line through the origin"
            if below + 2 * step["negative_base_se"] < 0:  # below zero beyond its noise
                table = _decode_table(fit, step, slots, below)
        if table is not None:
            basis += "; not used by the sim: decode_step_s, below, wins"
        fit.estimates += [Estimate("step_base_s", step["step_base_s"], step["step_base_se"], "s",
                                   "intercept of the " + basis),
                          Estimate("decode_cost_s", step["decode_cost_s"], step["decode_cost_se"], "s",
                                   "slope of the " + basis)]
        if table is not None:
            fit.estimates.append(table)
    chunks = fit_chunk_cost(records, LLAMACPP_PROMPT_TAIL) if split else None
    prefill = chunks or fit_prefill_cost(records, free_below, whole=flavor == "llamacpp")
    if prefill is None:
        fit.unobserved["prefill_cost_s"] = ("the prefill step against prompt length needs prompts of several lengths sent "
                                            f"while slots were free ({MIN_PREFILL_REQUESTS} at least)")
    else:
        drift_p = prefill["drift"]
        if drift_p is not None and not 1 / MAX_PREFILL_DRIFT <= drift_p <= MAX_PREFILL_DRIFT:
            which = ("the step that carried a prompt's first part" if chunks is not None
                     else "a prompt's first-token step")
            over = "the prompts fitted" if chunks is not None else "the prompts sent while slots were free"
            fit.misfit.append(f"the prefill cost drifted: {which} took {drift_p:.2f}x its fitted length in the run's "
                              f"last third against its first (median over {over}); the twin's costs are constant")
        if chunks is not None:
            basis = (f"slope of the step that carried a prompt's first part against its tokens (prompts of "
                     f"{prefill['tokens_min']:.0f}-{prefill['tokens_max']:.0f} less the {LLAMACPP_PROMPT_TAIL}-token "
                     f"tail, {prefill['requests']} steps, every load of the run)")
        else:
            read = ("from the end of the step it arrived in to the first token" if flavor == "llamacpp"
                    else "the step that ended with the first token")
            basis = (f"slope of the first-token step against prompt tokens {prefill['tokens_min']:.0f}-"
                     f"{prefill['tokens_max']:.0f} ({prefill['requests']} requests sent while slots were free): {read}")
        fit.estimates.append(Estimate("prefill_cost_s", prefill["prefill_cost_s"], prefill["prefill_cost_se"], "s",
                                      basis))
    if flavor in ("vllm", "sglang"):
        _fit_kv(fit, conds, samples, records)
        _fit_queue_limit(fit, records, samples)
    if _f(conds.get("context_length")) > 0:
        key = "ctx_size" if flavor in ("ollama", "llamacpp") else "max_model_len"
        fit.estimates.append(Estimate(key, int(_f(conds["context_length"])), None, "tokens",
                                      "the server's context length (manifest)"))
    if isinstance(conds.get("prefix_cache"), bool) and flavor == "vllm":
        fit.estimates.append(Estimate("enable_prefix_caching", conds["prefix_cache"], None, "",
                                      "the server's cache_config_info"))
    budget = _f(conds.get("extra.max_num_batched_tokens"))
    if budget > 0:
        fit.estimates.append(Estimate("max_num_batched_tokens", int(budget), None, "tokens",
                                      "conditions.extra.max_num_batched_tokens"))
    elif flavor in ("vllm", "sglang"):
        fit.unobserved["max_num_batched_tokens"] = ("not in the server's metrics; write "
                                                   "conditions.extra.max_num_batched_tokens")
    return fit


def _yaml_value(e: Estimate) -> str:
    if isinstance(e.value, tuple):
        return "[" + ", ".join(f"{v * 1000:.4g}ms" for v in e.value) + "]"
    if isinstance(e.value, bool):
        return "true" if e.value else "false"
    if e.unit == "s":
        return f"{e.value * 1000:.4g}ms"
    return str(int(e.value)) if float(e.value).is_integer() else f"{e.value:.6g}"


def describe(e: Estimate) -> str:
    """`value ± error unit`: durations in ms; "(read)" for a figure the server gave; a table as
    `[a, b] ms ± [ea, eb] ms` (`llmload.sim.whatif.read_twin` reads the errors back)."""
    if isinstance(e.value, tuple):
        errors = e.error if isinstance(e.error, tuple) else ()
        text = "[" + ", ".join(f"{v * 1000:.3g}" for v in e.value) + "] ms" + \
            (" ± [" + ", ".join(f"{v * 1000:.2g}" for v in errors) + "] ms" if errors else "")
        return text
    if e.unit == "s":
        text = f"{e.value * 1000:.3g} ms" + (f" ± {e.error * 1000:.2g} ms" if e.error is not None else "")
    elif isinstance(e.value, bool):
        text = str(e.value).lower()
    else:
        text = f"{_yaml_value(e)}" + (f" ± {e.error:.2g}" if e.error else "") + (f" {e.unit}" if e.unit else "")
    return text + (" (read from the server)" if e.error is None else "")


def twin_yaml(fit: Fit, *, source: str = "") -> str:
    """The sim YAML (`llmload sim --config`): each fitted key with its error and basis as a comment, the
    unobserved ones named in comments (left at the sim's defaults). A run that does not fit the model
    (`Fit.misfit`) opens with `MISFIT_MARK` and its reasons: `llmload.sim.whatif.read_twin` refuses it."""
    from llmload.sim.whatif import MISFIT_MARK

    lines = [f"{MISFIT_MARK}: {'; '.join(fit.misfit)}"] if fit.misfit else []
    lines += [f"# llmload fit{' of ' + source if source else ''}: a sim twin (llmload sim --flavor {fit.flavor} "
             "--config THIS_FILE)", "# each value: ± one standard error, and where it came from"]
    for e in fit.estimates:
        lines.append(f"{e.key}: {_yaml_value(e)}  # {describe(e)}; {e.basis}")
    for key, why in fit.unobserved.items():
        lines.append(f"# {key}: not observed ({why}); the sim's default")
    return "\n".join(lines) + "\n"
