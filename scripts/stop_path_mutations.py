"""The stop paths' mutation check (issue 28): a one-line no-op (`return`) as the first statement of each
stop-path handler, one at a time; the fast tests of the run's life must then fail. Prints which test
caught each mutation, or NOT CAUGHT, and exits 1 when any was not caught. Every file is restored.

    python scripts/stop_path_mutations.py            # about 3 minutes on 2 cores

Run it on a clean tree (it rewrites the files it mutates, then puts them back).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the tests that own the stop paths' decisions (virtual time, no Locust process: seconds each)
TESTS = ["tests/runtime/test_run_lifecycle.py", "tests/runtime/test_controller_virtual_time.py",
         "tests/runtime/test_stop_signals.py", "tests/runtime/test_linked_greenlets.py",
         "tests/runtime/test_messages.py", "tests/runtime/test_cancel_in_place.py"]
#: (file, Class.method): each handler a stop goes through, from Locust's events and the signals to the steps
TARGETS = [
    ("llmload/runtime/locustglue/session.py", "Session._on_test_start"),
    ("llmload/runtime/locustglue/session.py", "Session._on_test_stopping"),
    ("llmload/runtime/locustglue/session.py", "Session._on_test_stop"),
    ("llmload/runtime/locustglue/session.py", "Session._on_quitting"),
    ("llmload/runtime/locustglue/session.py", "Session._on_stop_signal"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle.stop"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._stop_controller_first"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._users_stopped"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._quit"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._on_signal"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._quit_after_the_run"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle._stop_and_quit"),
    ("llmload/runtime/master/lifecycle.py", "RunLifecycle.finalise"),
    ("llmload/runtime/master/controller.py", "StepController.stop"),
    ("llmload/runtime/master/controller.py", "StepController.mark_stopping"),
    ("llmload/runtime/master/controller.py", "StepController.fail"),
    ("llmload/runtime/launcher/stop_signals.py", "StopSignals._on_signal"),
    ("llmload/runtime/launcher/stop_signals.py", "StopSignals.forward"),
    ("llmload/runtime/worker/scheduler.py", "WorkerRuntime.on_cancel"),  # a drain timeout's cancel, on each worker
]


def first_statement(path: Path, qualname: str) -> tuple[int, int]:
    """(line, column) of the first statement of `Class.method` in `path`, after its docstring."""
    cls, name = qualname.split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    body = item.body
                    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    first = body[1] if docstring and len(body) > 1 else body[0]
                    return first.lineno, first.col_offset
    raise LookupError(f"{qualname} is not in {path}")


def mutated(source: str, line: int, col: int) -> str:
    lines = source.splitlines(keepends=True)
    lines.insert(line - 1, " " * col + "return  # mutation\n")
    return "".join(lines)


def main() -> int:
    missed = 0
    for rel, qualname in TARGETS:
        path = REPO / rel
        original = path.read_text()
        path.write_text(mutated(original, *first_statement(path, qualname)))
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly",
                                   "-p", "no:cacheprovider", *TESTS], cwd=REPO, capture_output=True, text=True,
                                  timeout=600)
        finally:
            path.write_text(original)
        failed = [line.split(" - ")[0].removeprefix("FAILED ") for line in done.stdout.splitlines()
                  if line.startswith("FAILED")]
        missed += not done.returncode
        print(f"{qualname}: " + (f"caught by {failed[0] if failed else '(an error)'}" if done.returncode
                                 else "NOT CAUGHT"), flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
