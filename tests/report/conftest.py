"""Fixtures for the report tests: a hand-made analysis and manifest (see report_fakes)."""

from __future__ import annotations

import pytest
from report_fakes import FakeAnalysis, make_analysis, make_manifest


@pytest.fixture
def analysis() -> FakeAnalysis:
    return make_analysis()


@pytest.fixture
def manifest() -> dict:
    return make_manifest()
