"""What a fitted twin predicts: its knee for a request mix and an SLO, with the range its parameters' errors
allow, and the same for "what if" changes (slots, prompt length, replicas). Issue 45 items 2 and 3.

A twin is the sim YAML `llmload fit` writes (`analysis.fit.twin_yaml`): the values are `llmload sim`
settings, each fitted one's standard error in its comment (`± 1.2 ms`). `read_twin` reads both back, and
refuses a file the fit marked as not fitting its model (`analysis.fit.MISFIT_MARK`).

`predict_knee` is the twin's steady-state knee: the highest Poisson (or constant) arrival rate at which
every ttft / tpot / e2e percentile target of the SLO holds, bracketed to `tol` on the engine in virtual
time (`llmload.sim.truth.run_virtual`, the rules the live sim follows) with common random numbers across
rates, each next rate interpolated where 1 / (percentile / threshold) crosses 1 (`_bracket`); `arrivals`
per rate and seed set its noise and its cost (a tenth of a second per thousand arrivals on a slow core).
The what-ifs reuse what the fitted knee found: each change and each range end starts from the fitted knee
scaled by the change's throughput, placed by the fitted knee's slope (about 3 runs each instead of 7). `knee_with_range` adds the knee of the twin at both ends of its parameters' intervals: every
fitted cost (`step_base_s`, `decode_cost_s`, `prefill_cost_s`) `z` standard errors higher (the slow end)
and lower (the fast end), and `num_blocks` with them; a cost per batch size (`decode_step_s`) moves each
entry by its own error. What the range covers: the fit's parameter
uncertainty, and the search's tolerance; not the model's own error (a server whose costs are not
`base + decode x batch + prefill x tokens`), and not a live search's sampling noise (a live search
measures the knee within its own interval, `refine.precision`).

`what_if` answers: slots x2 (the server's `max_num_seqs` or `--parallel`), prompts x2 (every input
length doubled), and N replicas: N x the one-replica knee, exact for random routing (a Poisson stream
split at random is N Poisson streams of 1/N the rate), a lower bound for a balancer that routes to the
least loaded replica.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmload import slo as slo_dims
from llmload.config import TWIN_MISFIT_MARK
from llmload.errors import ConfigError
from llmload.sim.truth import RequestSizes, _sizes, _unit_arrivals, engine_limits, run_virtual

__all__ = ["COSTS", "EXTRAPOLATED", "MISFIT_MARK", "RANGE_NOTE", "Twin", "knee_with_range", "predict_knee", "read_twin", "sizes_from_config",
           "sizes_from_records", "twin_prior", "what_if"]

#: what a what-if range covers, as `llmload plan` says it
RANGE_NOTE = ("the twin's knee with every fitted cost 1.96 standard errors up and down (and the search's 2%); "
              "not the model's own error, nor a live search's noise (a live search measures the knee within its "
              "own interval, refine.precision)")
#: the fitted costs moved together to the ends of their intervals (slower server: all higher)
COSTS = ("step_base_s", "decode_cost_s", "prefill_cost_s")
#: the first line `analysis.fit.twin_yaml` writes for a run that does not fit the model
MISFIT_MARK = TWIN_MISFIT_MARK
_FIGURES = ("ttft", "tpot", "e2e")
#: the knee search looks no further than this factor from its first rate (1.6^16, as it always did)
WIDEST = 1.6 ** 16
_ERROR = re.compile(r"^(?P<key>\w+):[^#]*#\s*[^±;]*±\s*(?P<err>[-+0-9.eE]+)\s*(?P<unit>ms)?")
#: a table's errors (`decode_step_s: [..]  # [..] ms ± [e1, e2] ms; ...`), in ms
_TABLE_ERROR = re.compile(r"^decode_step_s:[^#]*#[^±;]*±\s*\[(?P<errs>[^\]]*)\]\s*ms")
#: what a what-if past a fitted table's end says
EXTRAPOLATED = ("decode steps of more than {n} sequences extrapolated past the fitted table (decode_step_s: the "
                "line through its last two entries, or through the origin and its last where that one is the "
                "cheaper), not measured")


@dataclass
class Twin:
    """A twin's settings (`llmload sim --config` keys), each fitted one's standard error (seconds for a
    duration), its flavour and where it came from."""

    settings: dict[str, Any]
    errors: dict[str, float] = field(default_factory=dict)
    flavor: str = "vllm"
    source: str = ""
    #: the keys the file sets (None: all of `settings`); the others are the sim's defaults
    written: frozenset[str] | None = None
    #: the standard error of each `decode_step_s` entry (seconds; empty: none given)
    table_errors: tuple[float, ...] = ()

    def unwritten(self, key: str) -> bool:
        """`key` is the sim's default, not the fit's (the run could not observe it)."""
        return self.written is not None and key not in self.written

    @property
    def slots_key(self) -> str:
        return "max_num_seqs" if self.flavor in ("vllm", "sglang") else "num_parallel"

    def slots(self) -> int:
        from llmload.sim.settings import SimSettings

        return int(getattr(SimSettings.model_validate(self.sim_settings()), self.slots_key))

    def sim_settings(self, **changes: Any) -> dict[str, Any]:
        """The settings as `SimSettings` takes them (durations in seconds), with `changes` applied."""
        from llmload.sim.settings import SimSettings

        base = SimSettings.model_validate(self.settings).model_dump(exclude={"faults"})
        base.update(changes)
        return base

    def at_end(self, z: float) -> dict[str, Any]:
        """The settings with every fitted cost `z` standard errors up (z > 0: a slower server), and the
        KV capacity `z` errors down; never below zero (nor one block)."""
        s = self.sim_settings()
        for key in COSTS:
            if key in self.errors:
                s[key] = max(0.0, float(s[key]) + z * self.errors[key])
        if "num_blocks" in self.errors:
            s["num_blocks"] = max(1, int(round(float(s["num_blocks"]) - z * self.errors["num_blocks"])))
        if self.table_errors and s.get("decode_step_s") and len(s["decode_step_s"]) == len(self.table_errors):
            s["decode_step_s"] = [max(0.0, float(v) + z * e) for v, e in zip(s["decode_step_s"], self.table_errors,
                                                                            strict=True)]
        return s


def read_twin(path: str | Path) -> Twin:
    """The twin at `path` (a sim YAML, errors from `llmload fit`'s comments; a hand-written one has none)."""
    from llmload.sim.settings import load_sim_settings

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the twin: {exc.strerror}", file=str(p)) from None
    if text.startswith(MISFIT_MARK):
        reason = text.splitlines()[0][len(MISFIT_MARK):].strip(" :")
        raise ConfigError(f"the fit said this run does not fit the twin's model ({reason}); "
                          "no prediction is made from it", file=str(p))
    settings = load_sim_settings(p).model_dump(exclude={"faults"})
    import yaml

    written = frozenset((yaml.safe_load(text) or {}).keys())
    flavor = "vllm"
    errors: dict[str, float] = {}
    table_errors: tuple[float, ...] = ()
    for line in text.splitlines():
        if (m := re.search(r"--flavor (\w+)", line)) and line.startswith("#"):
            flavor = m.group(1)
        if (m := _TABLE_ERROR.match(line)) is not None:
            table_errors = tuple(float(v) / 1000.0 for v in m.group("errs").split(","))
        elif (m := _ERROR.match(line)) is not None:
            err = float(m.group("err"))
            errors[m.group("key")] = err / 1000.0 if m.group("unit") == "ms" else err
    return Twin(settings=settings, errors=errors, flavor=flavor, source=str(p), written=written,
                table_errors=table_errors)


def sizes_from_records(records: Any, *, input_scale: float = 1.0) -> RequestSizes:
    """The run's own mix: (input, output) tokens of its completed requests, drawn with replacement
    (inputs less prefix-cache hits: the twin's cache never hits), inputs x `input_scale`."""
    import pandas as pd

    inputs = pd.to_numeric(records.get("input_tokens"), errors="coerce")
    outputs = pd.to_numeric(records.get("output_tokens"), errors="coerce")
    if "cached_tokens" in records:
        inputs = inputs - pd.to_numeric(records["cached_tokens"], errors="coerce").fillna(0)
    ok = inputs.notna() & outputs.notna() & (inputs > 0) & (outputs > 0)
    if "outcome" in records:
        ok &= records["outcome"].astype(str) == "ok"
    pairs = np.column_stack([inputs[ok].to_numpy(dtype=float), outputs[ok].to_numpy(dtype=float)])
    if not len(pairs):
        raise ConfigError("the run has no completed request with its token counts to take the mix from")
    return _pairs_sizes(pairs, input_scale)


def _pairs_sizes(pairs: np.ndarray, input_scale: float) -> RequestSizes:
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        picked = pairs[rng.integers(0, len(pairs), n)]
        return np.maximum(1, np.round(picked[:, 0] * input_scale)).astype(int), picked[:, 1].astype(int)

    return draw


def sizes_from_config(config: Any, *, base_dir: str | Path = ".", draws: int = 4096) -> RequestSizes:
    """The config's mix (`requests.input_tokens` / `output_tokens`), as `draws` pairs drawn once."""
    import random

    from llmload.client.lengths import LengthSampler

    rng = random.Random(int(config.requests.seed))
    inputs = LengthSampler.from_dist(config.requests.input_tokens, base_dir=base_dir)
    outputs = LengthSampler.from_dist(config.requests.output_tokens, base_dir=base_dir)
    pairs = np.array([(inputs.draw(rng), outputs.draw(rng)) for _ in range(draws)], dtype=float)
    return _pairs_sizes(pairs, 1.0)


def _targets(slo: Any) -> list[tuple[str, str, float, float]]:
    """(key, metric, percentile, threshold s) of each ttft / tpot / e2e percentile target."""
    return [(slo_dims.threshold_key(t.metric, t.percentile), t.metric, float(t.percentile), float(t.value_s))
            for t in slo.thresholds if t.metric in _FIGURES and t.percentile is not None]


def _guess(settings: Mapping[str, Any], sizes: RequestSizes, flavor: str) -> float:
    """A rate near capacity: the slots' decode throughput with the prompts' prefill in series."""
    limits = engine_limits(settings, flavor)
    inputs, outputs = _sizes(sizes, np.random.default_rng(0), 2000)
    slots = max(1, limits.max_num_seqs)
    per_request = float(np.mean(outputs)) * limits.decode_part_s(slots) / slots \
        + float(np.mean(inputs)) * limits.prefill_cost_s
    return 1.0 / per_request if per_request > 0 else 100.0


def predict_knee(settings: Mapping[str, Any], sizes: RequestSizes, slo: Any, *, flavor: str = "vllm",
                 arrival: str = "poisson", arrivals: int = 3000, seeds: Sequence[int] = (1,),
                 tol: float = 0.02, guess: float | None = None, step: float = 1.6,
                 slope: float | None = None) -> dict:
    """`{"rate", "binding", "evaluations", "slope"}`: the highest rate (within `tol`, relative) at which every
    percentile target holds in the twin's steady state (module docstring); rate None when no target
    is a ttft / tpot / e2e percentile, or when one fails at any rate the bracket tried. The search starts
    at `guess` (default: the slots' throughput) and widens by `step`, then `step` squared (at most 2), ... until a
    passing and a failing rate bracket the knee (a good guess: a small step); `slope` and the answer's
    `slope`: `_bracket`'s."""
    targets = _targets(slo)
    if not targets:
        return {"rate": None, "binding": None, "evaluations": 0, "slope": None}
    limits = engine_limits(settings, flavor)
    arrival = "poisson" if arrival in ("poisson_exact", "gamma") else arrival
    draws = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        unit = _unit_arrivals(arrival, arrivals, rng)
        draws.append((unit, *_sizes(sizes, rng, arrivals)))
    count = [0]

    def worst(rate: float) -> tuple[float, str]:
        """The highest (percentile / threshold) over the targets, mean over the seeds, and its target."""
        count[0] += 1
        per_key: dict[str, list[float]] = {k: [] for k, *_ in targets}
        for unit, inputs, outputs in draws:
            frame = run_virtual(limits, unit / rate, inputs, outputs)
            steady = frame.iloc[int(len(frame) * 0.05):]
            for key, metric, q, _ in targets:
                values = steady[f"{metric}_s"].to_numpy(dtype=float)
                values = values[~np.isnan(values)]
                per_key[key].append(float(np.percentile(values, q)) if len(values) else math.inf)
        return max((float(np.mean(per_key[key])) / threshold, key) for key, _, _, threshold in targets)

    found = _bracket(worst, guess or _guess(settings, sizes, flavor), step, tol, slope)
    return {**found, "evaluations": count[0]}


def _bracket(worst: Any, rate: float, step: float, tol: float, slope: float | None = None) -> dict:
    """The knee of `worst(rate) -> (over, key)` (a rate fails where over > 1), to `tol`: the highest
    passing and lowest failing rate within a factor 1 + `tol`, the answer their geometric mean.

    Each next rate is where 1 / over, interpolated linearly in the rate between the closest passing and
    failing rates (extrapolated from two on one side before the knee is bracketed), crosses 1: a queue's
    waiting time grows as 1 / (capacity - rate), so 1 / over is nearly a straight line near the knee.
    The rate tried is just beyond that crossing on the side whose end is farther, so that a right
    interpolation closes the bracket; a bracket end that moved twice running, a slope of the wrong sign
    or no second point fall back to bisecting (or to widening by `step`, squared at each widening up to
    2x, within a factor `WIDEST` of the first rate).
    `slope`: d(1 / over) / d(log rate) near a similar server's knee (`slope` of its answer), which places
    the second rate from the first alone (within a factor `step`)."""
    passed: list[tuple[float, float]] = []  # (rate, over)
    failed: list[tuple[float, float, str]] = []  # (rate, over, key)
    start = rate
    lean = math.log1p(tol) * 0.4  # how far past the crossing (log rate): two right guesses close the bracket
    moved = ""
    for _ in range(40):
        over, key = worst(rate)
        if over > 1:
            failed.append((rate, over, key))
            moved += "h"
        else:
            passed.append((rate, over))
            moved += "l"
        low = max(passed, default=None)
        high = min(failed, default=None)
        if low is not None and high is not None:
            if high[0] / low[0] - 1 <= tol:
                a, b = math.log(low[0]), math.log(high[0])
                fall = (1.0 / high[1] - 1.0 / max(low[1], 1e-12)) / (b - a) if math.isfinite(high[1]) else None
                return {"rate": math.sqrt(low[0] * high[0]), "binding": high[2],
                        "slope": fall if fall is not None and fall < 0 else None}
            cross = _crossing(low[:2], high[:2])
            a, b = math.log(low[0]), math.log(high[0])
            if cross is None or moved[-2:] in ("ll", "hh"):
                rate = math.exp((a + b) / 2)
                moved += "-"
                continue
            x = math.log(cross)
            x = x - lean if x - a > b - x else x + lean
            rate = math.exp(min(max(x, a + 0.1 * (b - a)), b - 0.1 * (b - a)))
        elif len(passed) + len(failed) >= 16 or not start / WIDEST < rate < start * WIDEST:
            break  # no knee within a factor WIDEST of the start (and virtual times stay exact)
        elif len(passed) + len(failed) == 1 and slope is not None and slope < 0:  # placed by the slope
            x = math.log(rate) + (1.0 - 1.0 / max(over, 1e-12)) / slope
            x += lean if over <= 1 else -lean
            rate = math.exp(min(max(x, math.log(rate / step)), math.log(rate * step)))
        elif high is not None:  # every rate failed: lower
            cross = _crossing(*sorted(f[:2] for f in failed)[:2]) if len(failed) > 1 else None
            floor = high[0] / step
            rate = floor if cross is None else min(max(cross * math.exp(-lean), floor), high[0] * math.exp(-lean))
            step = min(step * step, 2.0)
        elif low is not None:  # every rate passed: higher
            cross = _crossing(*sorted(passed)[-2:]) if len(passed) > 1 else None
            ceiling = low[0] * step
            rate = ceiling if cross is None else max(min(cross * math.exp(lean), ceiling), low[0] * math.exp(lean))
            step = min(step * step, 2.0)
    return {"rate": None, "binding": min(failed)[2] if failed else None, "slope": None}


def _crossing(p: tuple[float, float], q: tuple[float, float]) -> float | None:
    """The rate where 1 / over, linear in the rate through points `p` and `q` ((rate, over)), is 1;
    None without a falling line (1 / over must fall as the rate grows) or a positive crossing."""
    (r1, o1), (r2, o2) = sorted((p, q))
    y1, y2 = 1.0 / max(o1, 1e-12), (1.0 / o2 if math.isfinite(o2) and o2 > 0 else 0.0)
    if not r2 > r1 or not y2 < y1:
        return None
    cross = r1 + (y1 - 1.0) * (r2 - r1) / (y1 - y2)
    return cross if cross > 0 else None


def knee_with_range(twin: Twin, sizes: RequestSizes, slo: Any, *, z: float = 1.96, changes: Mapping | None = None,
                    guess: float | None = None, slope: float | None = None, **options: Any) -> dict:
    """`{"rate", "low", "high", "binding"}`: the knee of the twin (with `changes` to its settings) and of
    the twin at its parameters' slow and fast ends (`Twin.at_end(±z)`; module docstring). `guess`: a
    rate near the knee (searched from with a small step, and `slope`: `predict_knee`'s); each end is
    searched from the knee scaled by the end's throughput against the knee's (`_guess`), with a smaller
    step still and the knee's slope. The answer's `slope` is the knee's."""
    changes = dict(changes or {})
    settings = twin.sim_settings(**changes)
    near: dict[str, Any] = {"guess": guess, "step": 1.25, "slope": slope} if guess else {}
    centre = predict_knee(settings, sizes, slo, flavor=twin.flavor, **near, **options)
    out = {"rate": centre["rate"], "binding": centre["binding"], "low": None, "high": None, "slope": centre["slope"]}
    if centre["rate"] is None:
        return out
    ends = []
    capacity = _guess(settings, sizes, twin.flavor)
    for sign in (1.0, -1.0):
        if not any(k in twin.errors for k in (*COSTS, "num_blocks")) and not twin.table_errors:
            ends.append(centre["rate"])
            continue
        s = twin.at_end(sign * z)
        s.update(changes)
        scaled = centre["rate"] * _guess(s, sizes, twin.flavor) / capacity
        got = predict_knee(s, sizes, slo, flavor=twin.flavor, guess=scaled, step=1.1, slope=centre["slope"], **options)
        ends.append(got["rate"])
    tol = float(options.get("tol", 0.02))
    known = [e for e in ends if e is not None]
    out["low"] = min([centre["rate"], *known]) * (1 - tol) if ends[0] is not None else None
    out["high"] = max([centre["rate"], *known]) * (1 + tol) if ends[1] is not None else None
    return out


def what_if(twin: Twin, sizes_of: Any, slo: Any, *, slots: int | None = None, prompt_scale: float = 2.0,
            replicas: int = 2, **options: Any) -> list[dict]:
    """The twin's knee as fitted, then with `slots` (default twice the twin's), with prompts x
    `prompt_scale`, and with `replicas` replicas: one dict each (`what`, `rate`, `low`, `high`,
    `binding`, `note`). `sizes_of(input_scale)` gives the request sizes."""
    base_sizes = sizes_of(1.0)
    base = knee_with_range(twin, base_sizes, slo, **options)
    now = twin.slots()
    slots = slots or 2 * now
    unseen = [k for k in (twin.slots_key, *COSTS) if twin.unwritten(k)]
    caveat = (f"; NOT OBSERVED, the sim's defaults: {', '.join(unseen)} (each knee here assumes them)"
              if unseen else "")
    rows = [{"what": "as fitted", **base, "note": f"{now} slots, the run's mix{caveat}"}]

    def near(sizes: RequestSizes, changes: Mapping) -> float | None:
        """The knee as fitted scaled by the change's throughput against the fitted one's: where to start."""
        if base["rate"] is None:
            return None
        fitted = _guess(twin.sim_settings(), base_sizes, twin.flavor)
        return base["rate"] * _guess(twin.sim_settings(**changes), sizes, twin.flavor) / fitted

    more = {twin.slots_key: slots}
    rows.append({"what": f"slots {slots}", **knee_with_range(twin, base_sizes, slo, changes=more,
                                                             guess=near(base_sizes, more), slope=base["slope"],
                                                             **options),
                 "note": f"{twin.slots_key} {now} -> {slots}; KV capacity and step costs as fitted"
                 + (f"; {EXTRAPOLATED.format(n=len(table))}" if (table := twin.sim_settings().get("decode_step_s"))
                    and slots > len(table) else "")})
    longer = sizes_of(prompt_scale)
    rows.append({"what": f"prompts x{prompt_scale:g}", **knee_with_range(twin, longer, slo, guess=near(longer, {}),
                                                                         slope=base["slope"], **options),
                 "note": "every prompt's length scaled; outputs as in the run"})
    scaled = {k: (None if base[k] is None else base[k] * replicas) for k in ("rate", "low", "high")}
    rows.append({"what": f"replicas {replicas}", **scaled, "binding": base["binding"],
                 "note": f"{replicas} x one replica: exact for random routing, a lower bound for least-loaded routing"})
    return rows


_PRIORS: dict[str, float | None] = {}


def twin_prior(path: str | Path, config: Any, *, arrivals: int = 2000) -> float | None:
    """The knee the twin at `path` predicts for `config`'s mix (`sizes_from_config`), SLO and ladder
    arrivals: the knee search's prior (`refine.prior`); remembered per twin file and config."""
    key = f"{Path(path).resolve()}|{config.model_dump_json()}"
    if key not in _PRIORS:
        twin = read_twin(path)
        ladder = config.shape.ladder
        arrival = ladder.arrival if ladder is not None else "poisson"
        _PRIORS[key] = predict_knee(twin.sim_settings(), sizes_from_config(config), config.slo, flavor=twin.flavor,
                                    arrival=arrival, arrivals=arrivals)["rate"]
    return _PRIORS[key]
