"""The shapes as LoadTestShape classes (checks in loadshape_checks.py, run in a fresh process that imports
Locust first, as a locustfile does: one process for all of them, each check's own result reported)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHECKS = [line.split("(")[0][4:] for line in (HERE / "loadshape_checks.py").read_text().splitlines()
          if line.startswith("def test_")]

#: runs each check (argv) after importing Locust; prints {check: None, or its traceback} as the last line
_RUNNER = """
import locust, json, sys, traceback
sys.path.insert(0, {here!r})
import loadshape_checks
failed = {{}}
for name in sys.argv[1:]:
    try:
        getattr(loadshape_checks, name)()
        failed[name] = None
    except BaseException:
        failed[name] = traceback.format_exc()
print(json.dumps(failed))
"""


@pytest.fixture(scope="module")
def results() -> dict:
    """Every check's result from one process (a Locust import costs ~2 s of CPU: once, not per check)."""
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", _RUNNER.format(here=str(HERE)), *CHECKS],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_checks_are_found():
    assert len(CHECKS) == 8


@pytest.mark.parametrize("check", CHECKS)
def test_loadshapes(results, check):
    assert check in results, results
    assert results[check] is None, results[check]
