"""The suite's own order (tests/conftest.py): the longest work units first, from tests/durations.json,
which scripts/test_durations.py writes from pytest's JUnit XML."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    """A module by its path (`conftest` alone is ambiguous: tests/report/ has one too)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = _load("suite_conftest", REPO / "tests" / "conftest.py")
DURATIONS = conftest.DURATIONS


def _script():
    return _load("test_durations_script", REPO / "scripts" / "test_durations.py")


def _defined(path: Path) -> set[str]:
    """`name` and `Class::name` of every function of a test module."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body if isinstance(f, ast.FunctionDef)}
    return names


def test_every_timed_test_exists():
    """A renamed or moved test would keep a stale entry and lose its place: rerun the script."""
    assert len(DURATIONS) > 100 and all(v >= 1.0 for v in DURATIONS.values())
    stale = []
    for nodeid in DURATIONS:
        path, _, rest = nodeid.partition("::")
        name = rest.split("[")[0]
        if not (REPO / path).is_file() or name not in _defined(REPO / path):
            stale.append(nodeid)
    assert stale == [], "tests/durations.json names tests that are gone: run scripts/test_durations.py"


def test_the_script_reads_junit_into_node_ids(tmp_path):
    junit = tmp_path / "run.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.runtime.test_demo" name="test_demo_runs_end_to_end_and_shows_the_knee" time="147.1"/>'
        '<testcase classname="tests.real_engine.test_run_real" name="test_ladder_records_every_arrival@real_engine" time="99.8"/>'
        '<testcase classname="tests.client.test_send_timing" name="test_times_match_ground_truth[vllm-openai-chat]" time="3.7"/>'
        '<testcase classname="tests.capacity.test_compare_deployments.test_compare@tests/capacity" name="deployments" time="41.8"/>'
        '<testcase classname="tests.test_config" name="test_a_quick_one" time="0.2"/>'
        '<testcase classname="tests.runtime.test_gone" name="test_x" time="9.0"/>'
        '<testcase classname="tests.runtime.test_demo" name="test_skipped" time="0"><skipped/></testcase>'
        '</testsuite></testsuites>', encoding="utf-8")
    out = tmp_path / "durations.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "test_durations.py"), str(junit), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {  # its group dropped, the quick one and the missing file left out
        "tests/runtime/test_demo.py::test_demo_runs_end_to_end_and_shows_the_knee": 147.1,
        "tests/real_engine/test_run_real.py::test_ladder_records_every_arrival": 99.8,
        "tests/capacity/test_compare_deployments.py::test_compare": 41.8,  # its group had a "::"
        "tests/client/test_send_timing.py::test_times_match_ground_truth[vllm-openai-chat]": 3.7}
    assert "4 of 5 tests took 1 s or more" in done.stdout
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "test_durations.py"), str(tmp_path / "no.xml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == f"test_durations: no such file: {tmp_path / 'no.xml'}"


def test_a_group_suffix_is_dropped_but_not_an_at_inside_a_parameter():
    script = _script()
    assert script.strip_group("test_x@real_engine") == "test_x"
    assert script.strip_group("test_x[a@b]") == "test_x[a@b]"
    assert script.strip_group("test_x[a@b]@browser") == "test_x[a@b]"
    assert script.node_id("tests.nowhere.test_y", "test_z") is None


class _Item:
    """What `pytest_collection_modifyitems` reads of a test: its id, marks and fixtures."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid, self.marks = nodeid, set(marks)
        self._fixtureinfo = type("Info", (), {"name2fixturedefs": {}})()

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None

    def add_marker(self, mark) -> None:
        self.marks.add(getattr(mark, "name", mark))


def test_a_worker_collects_the_longest_units_first(monkeypatch):
    monkeypatch.setattr(conftest, "DURATIONS", {"t.py::demo": 140.0, "e.py::ladder": 100.0, "e.py::burst": 50.0,
                                                "b.py::browser": 40.0, "q.py::soak": 30.0})
    items = [_Item("a.py::quick"), _Item("b.py::browser", "browser"), _Item("e.py::ladder", "real_engine"),
             _Item("e.py::facts", "real_engine"), _Item("q.py::soak", "slow"), _Item("s.py::new", "slow"),
             _Item("e.py::burst", "real_engine"), _Item("t.py::demo", "slow")]
    worker = type("Config", (), {"workerinput": {}})()
    conftest.pytest_collection_modifyitems(worker, items)
    # the real engine's group (150.1 s) before the demo (140), then the browser's group, the soak, a new
    # slow test (5 s by its mark), a quick one; a group's tests keep their order
    assert [i.nodeid for i in items] == ["e.py::ladder", "e.py::facts", "e.py::burst", "t.py::demo", "b.py::browser",
                                         "q.py::soak", "s.py::new", "a.py::quick"]
    assert all("quiet" in i.marks for i in items[:3])  # the real engine's tests are quiet too


def test_xdist_hands_the_units_out_in_the_collected_order():
    config = type("Config", (), {"option": type("Options", (), {"dist": "loadgroup", "loadscopereorder": True})()})()
    conftest.pytest_configure(config)
    assert config.option.loadscopereorder is False


def test_xdist_can_rename_an_item_into_its_group():
    """`--dist loadgroup` sends a group's tests to one worker by renaming each item `<node id>@<group>`
    (xdist's worker sets `item._nodeid`). pytest 9.2 reads a node's id from `_id` instead, and every group
    was silently spread over the workers: three real-engine ladders at once, each module fixture once per
    worker (pyproject.toml pins pytest under 9.2 for it)."""
    import pytest
    from _pytest.nodes import Node

    item = object.__new__(Node)
    item._nodeid = "tests/x.py::t@group"
    try:
        renamed = item.nodeid
    except AttributeError:  # a pytest that keeps the id elsewhere: the rename goes nowhere
        renamed = None
    assert renamed == "tests/x.py::t@group", f"pytest {pytest.__version__} ignores xdist's rename"



def test_property_tests_import_hypothesis_inside_and_carry_its_mark():
    """No test module imports hypothesis at its top (every xdist worker collects every module: each would pay
    its import and its plugin's scan of the local modules' constants), and a module that draws with `given`
    marks its property tests `hypothesis`, the marker that puts them on one worker (`ONE_WORKER_MARKERS`)."""
    assert "hypothesis" in conftest.ONE_WORKER_MARKERS
    top_level, unmarked = [], []
    for path in sorted((REPO / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = path.relative_to(REPO).as_posix()
        for node in tree.body:
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(module.split(".")[0] == "hypothesis" for module in modules):
                top_level.append(name)
        draws = any(isinstance(n, ast.Call) and ast.unparse(n.func) in ("given", "hypothesis.given")
                    for n in ast.walk(tree))
        marked = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                  and {ast.unparse(d) for d in n.decorator_list} & {"pytest.mark.hypothesis", "property_test"}]
        if draws and not marked:
            unmarked.append(name)
    assert not top_level, f"hypothesis imported at the top of {top_level}: import it inside the test"
    assert not unmarked, f"modules drawing with given() but no test marked @pytest.mark.hypothesis: {unmarked}"
