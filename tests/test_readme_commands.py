"""Every command the README (and docs/USAGE.md, its reference) shows exists as written: its subcommand, each flag it names, the repository files
it names. Running them all would take the better part of an hour (a demo, real servers, Docker), so this
checks what a fresh clone would trip on first, that a command or a flag is not there:

- `llmload ...` (code blocks, the commands table, inline `llmload ...` spans): the subcommand is one of the
  CLI's (`engine`: its action too), and every `--flag` is an option of that subcommand (or `--version` /
  `--help` of the group);
- `locust -f FILES ...`: every file of `-f` exists, and every flag is Locust's or one llmload's locustfile
  adds (read from Locust's own parser, with our options, in a subprocess);
- `python bench/X.py ...`: the script exists and `--help` names every flag (tests/test_bench_smoke.py
  runs each script);
- any repository path a command names (`examples/...`, `locustfiles/...`, `shapes/...`, `bench/...`,
  `scripts/...`, `.ci/...`) exists, and the `pip install -e '.[test]'` extra is declared.

What runs for real elsewhere: `llmload demo` (tests/runtime/test_demo.py), `llmload run` with every example
config's API (tests/runtime/test_examples_and_apis.py), plain Locust (tests/runtime/test_run_output.py,
test_custom_shape.py), `engine serve` (tests/real_engine/), `calibrate --quick` (its run: bench/calibration.py
--quick's in tests/test_bench_smoke.py; interrupted: tests/test_calibrate.py), `docker compose`
(tests/test_compose_live.py), and `.ci/run` runs the README's test command as written.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import typer
from support import REPO

from llmload.cli import app

#: the README (the guide) and docs/USAGE.md (the reference it points to): every command either shows
README = "\n".join((REPO / name).read_text(encoding="utf-8") for name in ("README.md", "docs/USAGE.md"))
#: placeholders the README uses for the reader's own files
OWN_FILES = {"run.yaml", "my-run.yaml", "rag.py", "sim.yaml", "FILE", "CONFIG", "RUN_DIR"}
REPO_PATH = re.compile(r"^(examples|locustfiles|shapes|bench|scripts|docs|\.ci)/\S+$")


def _code_lines() -> list[str]:
    """Command lines of the README's bash blocks (continuation lines joined, comments dropped)."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines += [part.strip() for part in re.split(r"&&|(?<!\\)&(?!&)", line) if part.strip()]
    return lines


def _inline_spans() -> list[str]:
    """Inline `...` spans (the commands table's first column among them; a span may wrap a line)."""
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    return [" ".join(span.replace("\\|", "|").split()) for span in re.findall(r"`([^`]+)`", prose)]


def commands(program: str) -> list[str]:
    """Every README command line that starts with `program` (deduplicated, in order)."""
    found = [c for c in _code_lines() + _inline_spans() if c.split(" ", 1)[0] == program and " " in c
             and not c.split()[1].endswith(":")]  # `llmload demo: knee ...` is output the README quotes
    return list(dict.fromkeys(found))


def _flags(command: str) -> list[str]:
    return sorted({m.split("=")[0] for m in re.findall(r"(?<![\w-])--[a-z][\w-]*", command)})


def _options(click_command) -> set[str]:
    names = {"--help"}
    for param in click_command.params:
        names.update(o for o in (*param.opts, *getattr(param, "secondary_opts", [])) if o.startswith("--"))
    return names


def test_the_readme_shows_commands_of_each_kind():
    assert len(commands("llmload")) >= 12 and len(commands("locust")) >= 6
    assert {c.split()[1] for c in commands("llmload")} >= {"run", "demo", "report", "compare", "plan",
                                                            "calibrate", "sim", "engine", "gpu-agent"}


@pytest.mark.parametrize("command", commands("llmload"))
def test_every_llmload_command_and_flag_exists(command: str):
    group = typer.main.get_command(app)
    words = command.split()
    sub = words[1]
    if sub.startswith("--"):  # `llmload --version`
        assert set(_flags(command)) <= _options(group), command
        return
    assert sub in group.commands, f"README: `{command}`: no command {sub!r} (have {sorted(group.commands)})"
    missing = [f for f in _flags(command) if f not in _options(group.commands[sub])]
    assert not missing, f"README: `{command}`: llmload {sub} has no {missing}"
    if sub == "engine" and len(words) > 2 and not words[2].startswith("-"):
        actions = set(re.split(r"\|", words[2]))
        assert actions <= {"build", "model", "serve", "path"}, command


def test_every_llmload_command_s_help_parses():
    """`llmload SUB --help` answers 0 for every subcommand the README names (the CLI as a user runs it)."""
    from typer.testing import CliRunner

    for sub in sorted({c.split()[1] for c in commands("llmload") if not c.split()[1].startswith("-")}):
        result = CliRunner().invoke(app, [sub, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, (sub, result.output[-500:])


LOCUST_OPTIONS = """
import json
import locust  # first: gevent
from locust.argument_parser import get_parser
from locust import events
import locustfiles.llm  # its init_command_line_parser listener adds llmload's options
parser = get_parser()
events.init_command_line_parser.fire(parser=parser)
print(json.dumps(sorted(o for a in parser._actions for o in a.option_strings)))
"""


@pytest.fixture(scope="module")
def locust_options() -> set[str]:
    done = subprocess.run([sys.executable, "-c", LOCUST_OPTIONS], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", commands("locust"))
def test_every_locust_command_s_files_and_flags_exist(command: str, locust_options: set[str]):
    words = shlex.split(command)
    if "-f" in words:
        for path in words[words.index("-f") + 1].split(","):
            assert path in OWN_FILES or (REPO / path).is_file(), f"README: `{command}`: no file {path}"
    missing = [f for f in _flags(command) if f not in locust_options]
    assert not missing, f"README: `{command}`: Locust (with llmload's locustfile) has no {missing}"


BENCH = sorted({c for c in _inline_spans() + _code_lines() if c.startswith("python bench/")})


@pytest.mark.parametrize("command", BENCH)
def test_every_bench_command_s_script_and_flags_exist(command: str):
    script = command.split()[1]
    assert (REPO / script).is_file(), f"README: `{command}`: no {script}"
    flags = _flags(command)
    if flags:
        done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=REPO,
                              timeout=120)
        missing = [f for f in flags if f not in done.stdout]
        assert done.returncode == 0 and not missing, f"README: `{command}`: --help names no {missing}"


def test_every_repository_path_a_command_names_exists():
    words = {part.rstrip(".,;:)") for line in _code_lines() + _inline_spans() for word in line.split()
             for part in word.split(",")}  # `-f a.py,b.py`: each file
    named = {w for w in words if REPO_PATH.match(w)}
    named = {w for w in named if "<" not in w and "*" not in w}
    assert named, "the README names no repository path?"
    missing = sorted(w for w in named if not (REPO / w).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"


def test_the_readme_s_test_command_is_ci_s():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (command,) = re.findall(r"^pip install -e '\.\[test\]' && python -m pytest.*$", README, flags=re.M)
    assert re.search(r"^test = \[", pyproject, flags=re.M)
    assert re.search(rf"^{re.escape(command)}$", (REPO / ".ci" / "run").read_text(encoding="utf-8"), flags=re.M)
    # its workers (pytest-xdist) come with the test extra, and its groups are the ones tests/conftest.py sets
    assert "pytest-xdist" in pyproject and "--dist loadgroup -m 'not quiet'" in command
    # what needs few neighbours comes after, on fewer workers (its groups kept: the real engine's on one)
    assert command.endswith("&& python -m pytest -n 4 --dist loadgroup -m quiet")
