"""`scripts/stop_path_mutations.py` (issue 28's mutation check) names handlers that exist, and its
mutation is a no-op placed after the docstring, inside the method. The check itself takes minutes; it is
run by hand (its output is in the closing note)."""

from __future__ import annotations

import ast
import importlib.util

from support import REPO

spec = importlib.util.spec_from_file_location("stop_path_mutations", REPO / "scripts" / "stop_path_mutations.py")
mutations = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutations)


def test_every_target_exists_and_its_mutation_returns_first():
    for rel, qualname in mutations.TARGETS:
        path = REPO / rel
        line, col = mutations.first_statement(path, qualname)
        tree = ast.parse(mutations.mutated(path.read_text(), line, col))
        cls, name = qualname.split(".")
        (method,) = [item for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == cls
                     for item in node.body if isinstance(item, ast.FunctionDef) and item.name == name]
        body = method.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        assert isinstance(body[0], ast.Return) and body[0].value is None, qualname
    assert all((REPO / test).is_file() for test in mutations.TESTS)
