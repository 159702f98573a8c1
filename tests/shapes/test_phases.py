"""Phase traits are declared once (shapes/phases.py) and read everywhere else; no Locust needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.summary import ladder_result
from shapes.phases import PHASES, Phase, is_closed_loop, phases_where
from shapes.steps import PHASES as STEP_PHASES
from shapes.steps import StepSpec

REPO = Path(__file__).resolve().parents[2]
NAMES = "|".join(PHASES)
#: a phase compared with a name, or a tuple of phase names kept as a module constant
_PHASE_LIST = re.compile(rf'(phase\S*\s*(==|!=)\s*"({NAMES})")|(isin\(\(\s*"({NAMES})")'
                         rf'|(^[A-Z_]+\s*=\s*\(\s*"({NAMES})"\s*,)')


def test_the_traits_of_each_phase():
    assert phases_where(sustained=True) == ("ladder", "refine", "soak")
    assert phases_where(rate_axis=True) == ("ladder", "refine")
    assert phases_where(closed_loop=True) == ("concurrency", "probe")
    assert phases_where(drained=False) == ("refine", "soak") and not PHASES["soak"].judged_live
    assert PHASES["refine"].judged_live  # chained refine steps: the knee search needs their verdicts
    assert (phases_where(burst_pair="burst"), phases_where(burst_pair="uniform")) == (("burst",), ("uniform",))
    assert phases_where(slices=True) == ("soak",)
    assert is_closed_loop("concurrency") and not is_closed_loop("ladder") and not is_closed_loop("bogus")
    with pytest.raises(TypeError, match="no such phase trait: colour"):
        phases_where(colour="red")
    assert tuple(PHASES) == STEP_PHASES and all(isinstance(p, Phase) for p in PHASES.values())
    with pytest.raises(ValueError, match="phase must be one of"):
        StepSpec(label="x", index=0, phase="sawtooth", arrival="constant", target_rate=1.0, duration_s=1.0)


def test_no_module_keeps_a_list_of_phase_names():
    """analysis/, the report and the runtime read the traits, never phase names of their own."""
    found = []
    for folder in ("analysis", "llmload/report", "llmload/runtime", "llmload/telemetry"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _PHASE_LIST.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []
    assert _PHASE_LIST.search('_SUSTAINED = ("ladder", "refine", "soak")')  # the test can fail
    assert _PHASE_LIST.search('if r["phase"] == "concurrency" and r["verdict"] != "not_run":')


def _steps(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([{"label": label, "index": i, "phase": phase, "target_rate": rate, "concurrency": conc,
                          "verdict": verdict, "failing": [] if verdict == "pass" else ["ttft_p95"]}
                         for i, (label, phase, rate, conc, verdict) in enumerate(rows)])


def test_the_ladder_result_reads_the_traits():
    steps = _steps([("r1.00", "ladder", 1.0, None, "pass"), ("soak-000", "soak", 3.0, None, "pass"),
                    ("burst", "burst", 9.0, None, "pass"), ("r5.00", "ladder", 5.0, None, "fail"),
                    ("c4", "concurrency", None, 4, "pass"), ("c8", "concurrency", None, 8, "fail")])
    result = ladder_result(steps)
    # sustained phases (ladder, soak) give the rates; the burst replay is no sustained rate
    assert (result["last_passing_rate"], result["first_failing_rate"]) == (3.0, 5.0)
    assert (result["last_passing_concurrency"], result["first_failing_concurrency"]) == (4, 8)


def test_analysis_imports_neither_locust_nor_gevent():
    code = ("import sys, shapes.phases, analysis, analysis.pipeline, analysis.summary, analysis.planning, "
            "analysis.metrics; print(sorted(m for m in ('locust', 'gevent') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
