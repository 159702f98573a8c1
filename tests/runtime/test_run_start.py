"""`llmload run` refuses what cannot work before anything starts (issue 19 item 8): a run directory that
cannot be written (`--out` or `output:`), and `--master` with `--worker`. One line, exit 2, no traceback,
within seconds (the old code hung). Those refusals run the command's entry in this process, with the
Locust child's start patched to fail; an unreachable target and Locust's own command line run as processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from runtime_helpers import base_config, write_config
from support import free_port

from llmload.runtime.launcher.run import locust_command

pytestmark = pytest.mark.timeout(120)


def _config(tmp_path: Path, **sections) -> Path:
    dead = f"http://127.0.0.1:{free_port()}"  # never reached: the checks come first
    shape = {"ladder": {"arrival": "constant", "warmup": "0s", "steps": [{"rate": 1, "duration": "2s"}]}}
    return write_config(tmp_path, base_config(dead, shape, **sections))


def _llmload(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmload.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s)


def _refused_in_process(monkeypatch, capsys, *args: str) -> subprocess.CompletedProcess:
    """`llmload run ...` through its entry (`llmload.cli.main`) in this process, for a mistake refused
    before anything starts: starting the Locust child fails the test (a refusal after it had started
    would have thrown its ~1 s of imports away)."""
    from llmload.cli import main

    monkeypatch.setattr("llmload.runtime.launcher.run._start_gated", lambda: pytest.fail("Locust was started"))
    capsys.readouterr()
    code = main(["run", *args])
    said = capsys.readouterr()
    return subprocess.CompletedProcess(["llmload", "run", *args], code, said.out, said.err)


def _one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("llmload: error")]
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("out", ["/proc/llmload-x", "file"])
def test_an_out_that_cannot_be_written_is_one_line_before_anything_starts(tmp_path, out, monkeypatch, capsys):
    if out == "file":
        out = str(tmp_path / "a-file")
        Path(out).write_text("not a directory")
    done = _refused_in_process(monkeypatch, capsys, str(_config(tmp_path)), "--out", out)
    _one_line_error(done, "--out", "cannot write the run directory")


def test_an_output_key_naming_a_file_is_one_line_naming_the_key(tmp_path, monkeypatch, capsys):
    (tmp_path / "runs").write_text("a file, not a folder")
    config = _config(tmp_path, output=str(tmp_path / "runs"))
    done = _refused_in_process(monkeypatch, capsys, str(config))
    _one_line_error(done, str(config), "output", "cannot write the run directory")


@pytest.mark.parametrize("flags", [["--master", "--worker"], ["--processes", "2", "--master"],
                                   ["--processes", "2", "--worker"]])
def test_roles_that_exclude_each_other_are_one_line(tmp_path, flags, monkeypatch, capsys):
    done = _refused_in_process(monkeypatch, capsys, str(_config(tmp_path)), *flags)
    _one_line_error(done, "--")


@pytest.mark.slow
def test_plain_locust_with_a_run_dir_it_cannot_write_ends_with_one_line(tmp_path):
    """The same mistake through Locust's own command line: the master fails the run (exit 2), no hang."""
    cmd = locust_command(_config(tmp_path), Path("/proc/llmload-x"))
    done = subprocess.run(cmd + ["--llmload-skip-preflight"], capture_output=True, text=True, timeout=90)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "cannot write the run directory" in output, output[-3000:]


def test_an_unreachable_target_leaves_no_run_directory_behind(tmp_path):
    """The run directory is made (and checked) before the target is contacted: a run that never
    started removes it again."""
    done = _llmload("run", str(_config(tmp_path)), "--out", str(tmp_path / "new"))
    assert done.returncode == 3 and "unreachable" in done.stderr, done.stderr
    assert not (tmp_path / "new").exists()
