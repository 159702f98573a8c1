"""The project's import graph, read from the source with `ast` (nothing is imported, so it is fast).

The rules (docs/ARCHITECTURE.md "Import rules"):

1. Modules: every `import` / `from ... import` of a project module is an edge, at module level or inside a
   function (a lazy import defers the loading, not the dependency); imports under `if TYPE_CHECKING:`
   are not. The module graph of `llmload`, `analysis`, `shapes` and `locustfiles` has no cycle.
2. Packages: module-level imports between packages (each directory is one; each module directly under
   `llmload/` counts alone) have no cycle either: a package is loaded whole before the one above it.
3. `analysis/` and the simulated server (`llmload/sim/`) never import Locust or gevent: not directly
   (at any level), and not through the project modules they import at module level (a package's
   `__init__` runs too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llmload", "analysis", "shapes", "locustfiles")
#: what analysis/ and the sim must never load
GEVENT_WORLD = ("locust", "gevent", "geventhttpclient", "zmq")
KEEP_OUT = ("analysis", "llmload.sim")


class ImportGraph:
    """The project's modules and their imports of each other (and of third-party top-level names)."""

    def __init__(self, root: Path, packages: tuple[str, ...] = PACKAGES) -> None:
        self.files: dict[str, Path] = {}
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                self.files[".".join(parts)] = path
        #: module -> project modules it imports (any level), and those it imports at module level
        self.edges: dict[str, set[str]] = {}
        self.top_edges: dict[str, set[str]] = {}
        #: module -> (imported name, at module level) of every import, project or not
        self.names: dict[str, list[tuple[str, bool]]] = {}
        for module, path in self.files.items():
            self._read(module, path)

    def _read(self, module: str, path: Path) -> None:
        names: list[tuple[str, bool]] = []

        def visit(node: ast.AST, top: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for sub in child.orelse:
                        visit(sub, top)
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    names.extend((name, top) for name in self._targets(module, child))
                inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, top and not inner)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), True)
        self.names[module] = names
        self.edges[module] = {self._known(n) for n, _ in names if self._known(n) not in (None, module)}
        self.top_edges[module] = {self._known(n) for n, top in names if top and self._known(n) not in (None, module)}

    def _targets(self, module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            package = module if self.files[module].name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        # `from pkg import sub` imports the submodule `pkg.sub` when there is one, else names of `pkg`
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.files else base for alias in node.names]

    def _known(self, name: str) -> str | None:
        """The project module an imported name lives in (`a.b.c` -> `a.b` when `c` is a name), else None."""
        while name and name not in self.files:
            if "." not in name:
                return None
            name = name.rpartition(".")[0]
        return name or None

    def package_of(self, module: str) -> str:
        if self.files[module].name == "__init__.py":
            return module
        parent = module.rpartition(".")[0]
        return module if parent in ("llmload", "") else parent  # llmload's own modules count alone


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def describe(edges: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    links = sorted(f"{a} -> {b}" for a in component for b in edges.get(a, ()) if b in members)
    return "; ".join(links)


def module_cycles(graph: ImportGraph) -> list[str]:
    return [describe(graph.edges, c) for c in cycles(graph.edges)]


def package_cycles(graph: ImportGraph) -> list[str]:
    packages: dict[str, set[str]] = {}
    via: dict[tuple[str, str], str] = {}
    for module, targets in graph.top_edges.items():
        for target in targets:
            a, b = graph.package_of(module), graph.package_of(target)
            if a != b:
                packages.setdefault(a, set()).add(b)
                via.setdefault((a, b), f"{module} -> {target}")
    return ["; ".join(via[(a, b)] for a in c for b in sorted(packages.get(a, ())) if b in c)
            for c in cycles(packages)]


def gevent_imports(graph: ImportGraph, keep_out: tuple[str, ...] = KEEP_OUT) -> list[str]:
    """`module: chain` for every module under `keep_out` that loads Locust or gevent (see rule 3)."""
    bad = []
    for start in sorted(m for m in graph.files if m.startswith(keep_out)):
        direct = [n for n, _ in graph.names[start] if n.split(".")[0] in GEVENT_WORLD]
        if direct:
            bad.append(f"{start} imports {direct[0]}")
            continue
        parent: dict[str, str] = {start: ""}
        todo = [start]
        while todo:
            module = todo.pop()
            parts = module.split(".")
            loads = graph.top_edges[module] | {".".join(parts[:i]) for i in range(1, len(parts))}
            hit = [n for n, top in graph.names[module] if top and n.split(".")[0] in GEVENT_WORLD]
            if hit:
                chain = [module]
                while parent[chain[-1]]:
                    chain.append(parent[chain[-1]])
                bad.append(f"{start} loads {hit[0]} via {' <- '.join(chain)}")
                break
            for target in sorted(loads):
                if target in graph.files and target not in parent:
                    parent[target] = module
                    todo.append(target)
    return bad


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(ROOT)


def test_the_module_graph_has_no_cycle(graph):
    assert module_cycles(graph) == []


def test_packages_do_not_import_each_other_at_module_level(graph):
    assert package_cycles(graph) == []


def test_analysis_and_the_sim_never_load_locust_or_gevent(graph):
    assert gevent_imports(graph) == []


def test_the_graph_sees_every_package(graph):
    assert {"llmload.runtime.locustglue.session", "analysis.summary", "shapes.plan", "locustfiles.llm",
            "llmload.sim.server"} <= set(graph.files)
    assert "llmload.runtime.worker.scheduler" in graph.top_edges["llmload.runtime.locustglue.session"]


# ---------------------------------------------------------------------- the checks can fail

def _tree(root: Path, files: dict[str, str]) -> ImportGraph:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return ImportGraph(root, ("llmload", "analysis", "shapes"))


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    graph = _tree(tmp_path, {
        "llmload/__init__.py": "",
        "llmload/report/__init__.py": "",
        "llmload/report/page.py": "def f():\n    from llmload.report.planning import g\n",
        "llmload/report/planning.py": "def g():\n    from .rereport import h\n",
        "llmload/report/rereport.py": "from llmload.report.page import f\n",
        "llmload/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llmload.report import page\n",
    })
    assert module_cycles(graph) == ["llmload.report.page -> llmload.report.planning; "
                                    "llmload.report.planning -> llmload.report.rereport; "
                                    "llmload.report.rereport -> llmload.report.page"]


def test_packages_that_import_each_other_are_found(tmp_path):
    graph = _tree(tmp_path, {
        "llmload/__init__.py": "",
        "llmload/runtime/__init__.py": "",
        "llmload/runtime/master/controller.py": "from shapes.steps import StepSpec\n",
        "shapes/__init__.py": "",
        "shapes/steps.py": "StepSpec = 1\n",
        "shapes/llm.py": "from llmload.runtime.master.controller import x\n",
    })
    assert module_cycles(graph) == []
    assert package_cycles(graph) == ["llmload.runtime.master.controller -> shapes.steps; shapes.llm -> llmload.runtime.master.controller"]


def test_gevent_reached_from_analysis_is_found(tmp_path):
    graph = _tree(tmp_path, {
        "llmload/__init__.py": "",
        "llmload/clock.py": "import gevent\n",
        "llmload/sim/__init__.py": "",
        "llmload/sim/server.py": "def f():\n    import locust\n",
        "analysis/__init__.py": "from analysis.run import x\n",
        "analysis/run.py": "from llmload.clock import now\n",
    })
    assert gevent_imports(graph) == ["analysis loads gevent via llmload.clock <- analysis.run <- analysis",
                                     "analysis.run loads gevent via llmload.clock <- analysis.run",
                                     "llmload.sim.server imports locust"]
