"""The shapes as LoadTestShape classes (checks in loadshape_checks.py, each run in a fresh process that
imports Locust first, as a locustfile does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHECKS = [line.split("(")[0][4:] for line in (HERE / "loadshape_checks.py").read_text().splitlines()
          if line.startswith("def test_")]


def test_the_checks_are_found():
    assert len(CHECKS) == 8


@pytest.mark.parametrize("check", CHECKS)
def test_loadshapes(check):
    code = f"import locust, sys; sys.path.insert(0, {str(HERE)!r}); import loadshape_checks; loadshape_checks.{check}()"
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
