"""docs/ARCHITECTURE.md stays true to the code: what it cites exists.

- every repository path it names (`llmload/runtime/virtual/run.py`, `shapes/`, `docs/METRICS.md`, ...) exists;
- every file it names by a short path, within a folder it named (`gated_child.py`, `master/preflight.py`), is
  some project file;
- every dotted name in backticks that starts with a project package (`llmload.clocks.VirtualClock`,
  `analysis.verdict.judge_step`) resolves: the longest importable module, then `getattr` for the rest;
- every section the code cites as `ARCHITECTURE.md "Name"` is a heading of the page (a moved section
  would leave the code pointing at nothing).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "ARCHITECTURE.md"
TOP = ("llmload", "analysis", "shapes", "locustfiles", "tests", "docs", "examples", "bench", "scripts")
PATH = re.compile(r"(?<![\w./-])(?:" + "|".join(TOP) + r")/[\w./<>-]*")
NAME = re.compile(r"(?:llmload|analysis|shapes|locustfiles)(?:\.\w+)+")
#: a file named within a folder the text gives (`run.py` in "llmload/runtime/launcher/ run.py", `master/step.py`)
SHORT = re.compile(r"(?<![\w./-])(?!(?:" + "|".join(TOP) + r")/)[\w/]+\.(?:py|js)\b")
SECTION = re.compile(r'ARCHITECTURE\.md "([^"]+)"')


def cited_paths(text: str) -> list[str]:
    """Repository paths the text names; a placeholder (`records/worker-<id>.jsonl`) stops at its `<`."""
    return sorted({match.split("<")[0].rstrip(".,;:)") for match in PATH.findall(text)})


def short_paths_missing(text: str, root: Path = ROOT) -> list[str]:
    """Files named by a short path (`gated_child.py`, `master/preflight.py`) that no project file's path ends with."""
    files = {p.relative_to(root).as_posix() for top in TOP if (root / top).is_dir() for p in (root / top).rglob("*")}
    return sorted({short for short in SHORT.findall(text) if not any(f.endswith("/" + short) for f in files)})


def cited_names(text: str) -> list[str]:
    """Dotted names of project modules and their attributes, each a whole backticked span."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return sorted({span for span in spans if NAME.fullmatch(span)})


#: run in a child process: the names of the Locust room import Locust, which patches the standard library with
#: gevent and must come first (as `llmload run` boots it), never inside this test process
_RESOLVE = """
import importlib, json, sys
import locust  # first, as BOOT imports it

def resolves(name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False

print(json.dumps([name for name in json.loads(sys.stdin.read()) if not resolves(name)]))
"""


def unresolved(names: list[str]) -> list[str]:
    """The names of `names` that do not resolve: `a.b.c.D.e` imports the longest module prefix, then
    `getattr`s the rest in turn."""
    done = subprocess.run([sys.executable, "-c", _RESOLVE], input=json.dumps(names), capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def headings(text: str) -> list[str]:
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def cited_sections(root: Path = ROOT) -> dict[str, list[str]]:
    """Section name -> files that cite it as `ARCHITECTURE.md "Name"` (code, tests and other docs)."""
    found: dict[str, list[str]] = {}
    files = [p for top in ("llmload", "analysis", "shapes", "locustfiles", "tests", "docs")
             for p in (root / top).rglob("*") if p.suffix in (".py", ".md")]
    for path in files:
        if path == Path(__file__).resolve():
            continue
        for section in SECTION.findall(path.read_text(encoding="utf-8")):
            found.setdefault(section, []).append(str(path.relative_to(root)))
    return found


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


# the missing names are put together at run time: tests/test_imports.py rule 6 reads whole strings naming
# project modules, and these are meant not to exist
_STEP, _GONE, _NOWHERE = "llmload.runtime.master.step", "Gone", "nowhere.Thing"
#: a page of moved paths and names (`test_a_moved_path_or_name_is_found`)
MOVED = ("The step runs in `llmload/runtime/master/steps_run.py` (was `llmload/runtime/master/step_run.py`),\n"
         f"its events are `{_STEP}.StepEvents` and `{_STEP}.{_GONE}`;\n"
         f"`llmload.runtime.master.{_NOWHERE}` and `records/worker-<id>.jsonl` and `analysis.pipeline`.\n")


@pytest.fixture(scope="module")
def unresolved_names(page) -> set[str]:
    """Which of the names the page and `MOVED` cite do not resolve: one child process for both (each name
    is resolved on its own: importing one module leaves another's answer as it was; the child imports Locust
    first, ~1.3 s of CPU a process)."""
    return set(unresolved(sorted(set(cited_names(page)) | set(cited_names(MOVED)))))


def test_the_page_is_one_page(page):
    assert len(page.splitlines()) <= 170  # one page (it was 542 lines, most of them stale)


def test_every_path_it_cites_exists(page):
    paths = cited_paths(page)
    assert len(paths) > 20  # the page cites its modules by path; an empty find would pass anything
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_every_file_it_names_by_a_short_path_exists(page):
    assert len(SHORT.findall(page)) > 10
    assert short_paths_missing(page) == []


def test_every_name_it_cites_resolves(page, unresolved_names):
    names = cited_names(page)
    assert len(names) > 20
    assert [name for name in names if name in unresolved_names] == []


def test_every_section_the_code_cites_is_a_heading(page):
    titles = headings(page)
    missing = {section: files for section, files in cited_sections().items()
               if not any(title.startswith(section) for title in titles)}
    assert missing == {}


# ---------------------------------------------------------------------- the checks can fail

def test_a_moved_path_or_name_is_found(unresolved_names):
    assert [p for p in cited_paths(MOVED) if not (ROOT / p).exists()] == ["llmload/runtime/master/steps_run.py"]
    assert short_paths_missing("in llmload/runtime/master/: step_run.py, tally.py, wire/messages.py, lost/x.js") == [
        "lost/x.js", "tally.py"]
    names = cited_names(MOVED)
    missing = [f"llmload.runtime.master.{_NOWHERE}", f"{_STEP}.{_GONE}"]
    assert names == ["analysis.pipeline", *missing, f"{_STEP}.StepEvents"]
    assert [name for name in names if name in unresolved_names] == missing


def test_a_cited_section_that_is_gone_is_found(tmp_path):
    (tmp_path / "llmload").mkdir()
    (tmp_path / "llmload" / "x.py").write_text('"""See docs/ARCHITECTURE.md "Plan" and ARCHITECTURE.md "Gone"."""\n')
    cited = cited_sections(tmp_path)
    assert cited == {"Plan": ["llmload/x.py"], "Gone": ["llmload/x.py"]}
    titles = headings("# Page\n## Plan (`plan.json`)\n")
    assert [s for s in cited if not any(t.startswith(s) for t in titles)] == ["Gone"]
