"""The project's import graph, read from the source with `ast` (nothing is imported, so it is fast).

The rules (docs/ARCHITECTURE.md "Import rules"):

1. Modules: every `import` / `from ... import` of a project module is an edge, at module level or inside a
   function (a lazy import defers the loading, not the dependency); imports under `if TYPE_CHECKING:`
   are not. The module graph of `llmload`, `analysis`, `shapes` and `locustfiles` has no cycle.
2. Packages: module-level imports between packages (each directory is one; each module directly under
   `llmload/` counts alone) have no cycle either: a package is loaded whole before the one above it.
3. `analysis/` and the simulated server (`llmload/sim/`) never import Locust or gevent: not directly
   (at any level), and not through the project modules they import at module level (a package's
   `__init__` runs too). Nor do the launcher room (the parent process of `llmload run`) and the run
   directory (`llmload report` recovers and re-reports without Locust).
4. Rooms: a module of one room of the runtime imports (at any level) only modules of the rooms that
   `ROOMS` allows it, besides its own and the rest of the project (docs/ARCHITECTURE.md draws them).
5. Only the Locust room imports `locust` (at any level) in `llmload/`; `shapes/` and `locustfiles/` are the
   files Locust itself loads (`-f`).
6. Every import of a project module names one that exists, and every string that names a project module
   (a mock.patch target, an `importlib.import_module` argument, code run in a subprocess) does too: a
   moved module's old path is never left behind. And `llmload` is this tree's, not another checkout's.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llmload", "analysis", "shapes", "locustfiles")
#: what analysis/ and the sim must never load
GEVENT_WORLD = ("locust", "gevent", "geventhttpclient", "zmq")
KEEP_OUT = ("analysis", "llmload.sim", "llmload.runtime.launcher.", "llmload.rundir")
#: the rooms of the runtime (folders) and the rooms each may import (besides itself and the project outside them)
RUNTIME = "llmload/runtime/"
ROOMS: dict[str, set[str]] = {
    "llmload/runtime/launcher": {"llmload/rundir"},
    "llmload/runtime/wire": set(),
    "llmload/runtime/worker": {"llmload/runtime/wire"},
    "llmload/runtime/master": {"llmload/runtime/worker", "llmload/runtime/wire", "llmload/rundir"},
    "llmload/runtime/locustglue": {"llmload/runtime/launcher", "llmload/runtime/master", "llmload/runtime/worker",
                                   "llmload/runtime/wire", "llmload/rundir"},
    "llmload/runtime/virtual": {"llmload/runtime/master", "llmload/runtime/worker", "llmload/runtime/wire",
                                "llmload/runtime/launcher", "llmload/rundir"},
    "llmload/rundir": set(),
}
#: the one edge against the rooms, and why: the launcher probes the target (`check_reachable`, and
#: `check_model_served` on what it read) before it starts Locust; the module loads no gevent (rule 3
#: checks what the launcher loads)
EXCEPTIONS = {("llmload/runtime/launcher/run.py", "llmload/runtime/master/preflight.py"),
              ("llmload/runtime/launcher/find.py", "llmload/runtime/master/preflight.py")}  # the served model
#: the room that imports Locust, and the folders Locust loads by itself
LOCUST_ROOMS = ("llmload/runtime/locustglue/", "shapes/", "locustfiles/")
#: where strings naming project modules are looked for (rule 6)
STRING_DIRS = ("llmload", "analysis", "shapes", "locustfiles", "tests", "bench", "scripts", "examples")


class ImportGraph:
    """The project's modules and their imports of each other (and of third-party top-level names)."""

    def __init__(self, root: Path, packages: tuple[str, ...] = PACKAGES) -> None:
        self.root = root
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


def room_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    return next((room for room in ROOMS if rel.startswith(room + "/")), None)


def room_breaches(graph: ImportGraph, rooms: dict[str, set[str]] = ROOMS,
                  exceptions: set[tuple[str, str]] = EXCEPTIONS) -> list[str]:
    """`a -> b` for every import (any level) from a room to a room it may not import (rule 4)."""
    root = graph.root
    bad = []
    for module, targets in sorted(graph.edges.items()):
        path = graph.files[module].relative_to(root)
        here = next((r for r in rooms if path.as_posix().startswith(r + "/")), None)
        for target in sorted(targets):
            there_path = graph.files[target].relative_to(root)
            there = next((r for r in rooms if there_path.as_posix().startswith(r + "/")), None)
            if here and there and here != there and there not in rooms[here] \
                    and (path.as_posix(), there_path.as_posix()) not in exceptions:
                bad.append(f"{module} -> {target}")
    return bad


def locust_importers(graph: ImportGraph, allowed: tuple[str, ...] = LOCUST_ROOMS) -> list[str]:
    """Modules outside `allowed` that import `locust` at any level (rule 5)."""
    bad = []
    for module, names in sorted(graph.names.items()):
        rel = module.replace(".", "/") + ("/" if graph.files[module].name == "__init__.py" else ".py")
        if any(n.split(".")[0] == "locust" for n, _ in names) and not rel.startswith(allowed):
            bad.append(module)
    return bad


def unknown_imports(graph: ImportGraph) -> list[str]:
    """`module: name` for each import of a project package's module that does not exist (rule 6)."""
    roots = {m.split(".")[0] for m in graph.files}
    return [f"{module}: {name}" for module, names in sorted(graph.names.items()) for name, _ in names
            if name.split(".")[0] in roots and not _resolves(graph, name)]


def _resolves(graph: ImportGraph, name: str) -> bool:
    """`name` is a project module, or a name defined in the module it starts with (a package's name must be
    one it defines or imports: `llmload.runtime.gone` where runtime/gone.py is not there is not)."""
    module = graph._known(name)
    if module is None:
        return False
    rest = name[len(module) + 1:].split(".")[0] if name != module else ""
    return not rest or rest in defined_names(graph.files[module])


@functools.lru_cache(maxsize=1024)
def defined_names(path: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level (TYPE_CHECKING imports and `__all__` too);
    read once per file (each import and module string naming a module asks again)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node in tree.body:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List):
                    names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return frozenset(names)


#: a string ending in one of these is a file's name, not a module's
FILE_SUFFIXES = {"json", "jsonl", "log", "yaml", "yml", "csv", "html", "txt", "parquet", "py"}
MODULE_STRING = re.compile(r"(?:llmload|analysis|shapes|locustfiles)(?:\.\w+)+")


def _imports_in(code: str) -> list[str]:
    """The project names a string of code imports: `import a.b` -> a.b; `from a.b import c, d` -> a.b.c, a.b.d."""
    names = re.findall(r"(?:^|\n|;)\s*import\s+(" + MODULE_STRING.pattern + ")", code)
    for module, imported in re.findall(r"(?:^|\n|;)\s*from\s+(" + MODULE_STRING.pattern + r")\s+import\s+"
                                       r"(\w+(?:\s*,\s*\w+)*)", code):
        names += [f"{module}.{name.strip()}" for name in imported.split(",")]
    return names


def _callee_name(func: ast.expr) -> str:
    """How a call's callee ends, as `ast.unparse` would write it (`logging.getLogger` -> its last name):
    an attribute's or a name's name; anything else ends in a bracket or the like."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ast.unparse(func)


def stale_module_strings(graph: ImportGraph, dirs: tuple[str, ...] = STRING_DIRS) -> list[str]:
    """`file:line: string` for each string constant naming a project module path that does not resolve: a
    whole string (`"llmload.x.y"`, a mock.patch target) or an import inside a string (code for `python -c`)."""
    root, bad = graph.root, []
    for folder in dirs:
        for path in sorted((root / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():  # this file: its examples of what is found
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            calls, strings = [], []  # one walk of the tree for both
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    calls.append(node)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    strings.append(node)
            # logger names (`getLogger("llmload.worker")`, `caplog.at_level(..., logger=...)`) are not modules
            loggers = {id(arg) for call in calls if _callee_name(call.func).endswith("getLogger") for arg in call.args}
            loggers |= {id(kw.value) for call in calls for kw in call.keywords if kw.arg == "logger"}
            for node in strings:
                if id(node) in loggers:
                    continue
                if node.value.rpartition(".")[2] in FILE_SUFFIXES:  # a file name: llmload.log, analysis.json
                    continue
                text = node.value
                found = [text] if MODULE_STRING.fullmatch(text) else _imports_in(text)
                bad.extend(f"{path.relative_to(root)}:{node.lineno}: {name}" for name in found
                           if not _resolves(graph, name))
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


def test_each_room_imports_only_the_rooms_it_may(graph):
    assert room_breaches(graph) == []


def test_only_the_locust_room_imports_locust(graph):
    assert locust_importers(graph) == []


def test_every_import_and_module_string_names_a_module_that_exists(graph):
    assert unknown_imports(graph) == []
    assert stale_module_strings(graph) == []


def test_llmload_is_this_trees():
    """Run from a worktree with PYTHONPATH at it: the editable install's checkout must not answer instead
    (an old module path would then silently import that checkout's file)."""
    import importlib.util

    import llmload

    assert Path(llmload.__file__).resolve().parent == ROOT / "llmload"
    for module in ("llmload.runtime.locustglue.seams", "llmload.rundir.layout", "shapes.plan", "analysis"):
        assert Path(importlib.util.find_spec(module).origin).resolve().is_relative_to(ROOT), module


def test_every_runtime_module_is_in_a_room(graph):
    homeless = [m for m, p in graph.files.items()
                if p.relative_to(ROOT).as_posix().startswith(RUNTIME) and room_of(p) is None
                and m != "llmload.runtime"]
    assert homeless == []


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
        "llmload/report/planning.py": "def g():\n    from .reanalyse import h\n",
        "llmload/report/reanalyse.py": "from llmload.report.page import f\n",
        "llmload/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llmload.report import page\n",
    })
    assert module_cycles(graph) == ["llmload.report.page -> llmload.report.planning; "
                                    "llmload.report.planning -> llmload.report.reanalyse; "
                                    "llmload.report.reanalyse -> llmload.report.page"]


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


def test_a_room_that_imports_a_room_it_may_not_is_found(tmp_path):
    graph = _tree(tmp_path, {
        "llmload/__init__.py": "",
        "llmload/runtime/__init__.py": "",
        "llmload/runtime/launcher/__init__.py": "",
        "llmload/runtime/launcher/run.py": "def f():\n    from llmload.runtime.master.controller import x\n",
        "llmload/runtime/master/__init__.py": "",
        "llmload/runtime/master/controller.py": "from llmload.runtime.wire.messages import STEP\n",
        "llmload/runtime/wire/__init__.py": "",
        "llmload/runtime/wire/messages.py": "from llmload.runtime.worker.scheduler import y\n",
        "llmload/runtime/worker/__init__.py": "",
        "llmload/runtime/worker/scheduler.py": "import locust\n",
    })
    assert room_breaches(graph, exceptions=set()) == [
        "llmload.runtime.launcher.run -> llmload.runtime.master.controller",
        "llmload.runtime.wire.messages -> llmload.runtime.worker.scheduler"]
    assert locust_importers(graph) == ["llmload.runtime.worker.scheduler"]


def test_an_old_module_path_left_behind_is_found(tmp_path):
    graph = _tree(tmp_path, {
        "llmload/__init__.py": "",
        "llmload/runtime/__init__.py": "__all__ = ['run_config']\n",
        "llmload/runtime/master/__init__.py": "",
        "llmload/runtime/master/controller.py": "import logging\nlog = logging.getLogger('llmload.controller')\n",
        "llmload/rundir/__init__.py": "",
        "llmload/rundir/finalise.py": "def finalise_run():\n    pass\n",
        "analysis/__init__.py": "",
        "analysis/x.py": (
            "from llmload.runtime import run_config\n"
            "from llmload.runtime.gone import finalise_run\n"
            "PATCH = 'llmload.runtime.gone.finalise_run'\n"
            "GOOD = 'llmload.rundir.finalise.finalise_run'\n"
            "CODE = 'import sys; from llmload.runtime.gone_too import StepController'\n"
            "CODE2 = 'import x\\nfrom llmload.runtime import run_config, gone_three\\n'\n"
            "FILE = 'analysis.json'\n"),
    })
    assert unknown_imports(graph) == ["analysis.x: llmload.runtime.gone"]
    assert stale_module_strings(graph, dirs=("analysis", "llmload")) == [
        "analysis/x.py:3: llmload.runtime.gone.finalise_run", "analysis/x.py:5: llmload.runtime.gone_too.StepController",
        "analysis/x.py:6: llmload.runtime.gone_three"]
