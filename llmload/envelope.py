"""The generator envelope that `llmload calibrate` measures: where it is saved, and the plan checked against it.

`llmload run` (`llmload.runtime.launcher.run`) calls `check_plan_against_envelope` before Locust starts;
`llmload.calibrate` measures the envelope and writes it. Keeping these here, apart from the calibration
runner, keeps the launcher and the calibrator from importing each other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ENVELOPE_PATH", "ENVELOPE_VERSION", "RULE", "UNCALIBRATED", "UNMEASURED_RATE_PER_PROCESS",
           "UNMEASURED_STREAMS_PER_PROCESS", "check_plan_against_envelope", "load_envelope"]

#: where the envelope is saved and read by default
ENVELOPE_PATH = Path.home() / ".cache" / "llmload" / "envelope.json"
ENVELOPE_VERSION = 2

#: how a step is judged, in words (printed and saved with the envelope)
RULE = ("valid by the step rule: send lag p99 under the mean gap between arrivals, achieved rate within 2%, "
        "worker CPU under 90%, no failed request")


def load_envelope(path: Path | None = None) -> dict | None:
    """The saved envelope, or None when there is none (or it cannot be read)."""
    path = Path(path) if path is not None else ENVELOPE_PATH
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != ENVELOPE_VERSION:
        return None
    return data


def _peak_rate(step: Any) -> float:
    """A step's highest arrival rate: its target rate, or a trace's busiest one-second window."""
    rate = float(step.target_rate or 0.0)
    trace = getattr(step, "trace", None)
    if trace is not None and len(trace):
        import numpy as np

        offsets = np.sort(np.asarray(trace.offsets_s, dtype=float))
        in_one_s = np.searchsorted(offsets, offsets + 1.0, side="left") - np.arange(len(offsets))
        rate = max(rate, float(in_one_s.max()))
    return rate


UNCALIBRATED = ("llmload: note: this machine's generator envelope is not measured (`llmload calibrate`, "
                "under 30 s); each step's own send lag, rate and CPU are judged as it runs")
#: without an envelope, what a plan may ask of one process before the note matters: half the lowest envelope
#: measured (100 req/s per process on a shared 2-vCPU VM at load average ~5, docs/SCALING.md), and the most
#: streams in flight that held there (33 per process)
UNMEASURED_RATE_PER_PROCESS = 50.0
UNMEASURED_STREAMS_PER_PROCESS = 33


def check_plan_against_envelope(config: Any, processes: int, *, envelope: dict | None = None,
                                base_dir: str | Path | None = None) -> str | None:
    """One line about the plan and this machine's measured envelope, else None.

    Compares the plan's peak arrival rate (a trace's busiest second) and its closed-loop concurrency,
    divided by the worker processes, with the envelope's measured maxima: a warning only beyond a
    measured figure. No envelope, or one in which no step held: one informational line (`UNCALIBRATED`),
    only for a plan that asks one process more than every machine we measured held
    (`UNMEASURED_RATE_PER_PROCESS`, `UNMEASURED_STREAMS_PER_PROCESS`): a light plan needs no envelope.
    """
    envelope = envelope if envelope is not None else load_envelope()
    from shapes.plan import build_plan

    try:
        steps = build_plan(config, base_dir=base_dir)
    except Exception:  # noqa: BLE001 - the launcher reports plan errors itself
        return None
    workers = max(1, processes)
    rate = max((_peak_rate(s) for s in steps), default=0.0) / workers
    streams = max((s.concurrency or 0 for s in steps), default=0) / workers
    if not envelope or envelope.get("max_rate_per_process") is None:
        heavy = rate > UNMEASURED_RATE_PER_PROCESS or streams > UNMEASURED_STREAMS_PER_PROCESS
        return UNCALIBRATED if heavy else None
    over = []
    max_rate, max_streams = envelope.get("max_rate_per_process"), envelope.get("max_streams_per_process")
    if rate and max_rate is not None and rate > max_rate:
        over.append(f"{rate:g} req/s per process (calibrated: {max_rate:g})")
    if streams and max_streams is not None and streams > max_streams:
        over.append(f"{streams:g} streams per process (calibrated: {max_streams:.0f})")
    if not over:
        return None
    if envelope.get("lower_bound"):  # every calibrated step held: only known to hold up to there
        return (f"llmload: note: the plan asks {' and '.join(over)}, beyond the highest rate `llmload calibrate` "
                f"tried on this machine (every step held there: a lower bound, {RULE}); each step is judged "
                "as it runs")
    return (f"llmload: warning: the plan asks {' and '.join(over)}, beyond this machine's calibrated envelope "
            f"({RULE}): add --processes or expect invalid steps")
