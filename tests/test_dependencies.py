"""Every third-party package the code imports is declared in pyproject.toml: the product's in
`dependencies`, the tests' and bench scripts' in the `test` / `bench` extras (issue 16)."""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("llmload", "locustfiles", "shapes", "analysis")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = {k: {_name(r) for r in v} for k, v in project.get("optional-dependencies", {}).items()}
    return {_name(r) for r in project["dependencies"]}, extras


def _imported(folders: list[Path]) -> dict[str, str]:
    """Top-level module -> the first file importing it."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    """`packages_distributions()`, read once a process: it lists every installed distribution's files (~0.1-0.2
    s of CPU a call; `_undeclared` runs three times)."""
    return packages_distributions()


def _undeclared(folders: list[Path], allowed: set[str]) -> list[str]:
    dists = _distributions()
    missing = []
    for module, where in _imported(folders).items():
        if module in sys.stdlib_module_names or module in PRODUCT:
            continue
        owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        if owners and not owners & allowed:  # not installed (a local helper module): nothing to check
            missing.append(f"{module} ({sorted(owners)[0]}, imported by {where})")
    return sorted(missing)


def test_product_imports_are_runtime_dependencies() -> None:
    runtime, _ = _declared()
    assert _undeclared([REPO / p for p in PRODUCT], runtime | {"llmload"}) == []


def test_test_and_bench_imports_are_declared_in_their_extras() -> None:
    runtime, extras = _declared()
    assert "aiohttp" in extras["bench"] and "aiohttp" not in runtime  # bench only
    assert "sseclient-py" in extras["test"] and "sseclient-py" not in runtime  # tests only
    assert "llmload[bench]" in {r.lower() for r in tomllib.loads((REPO / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["test"]}  # the bench smoke test runs the bench scripts
    assert _undeclared([REPO / "bench"], runtime | extras["bench"]) == []
    assert _undeclared([REPO / "tests"], runtime | extras["test"] | extras["bench"]) == []
