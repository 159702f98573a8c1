"""Finalisation never loses records, and its closing line names only files that exist (issue 33, items
3 and 4): one badly typed field in one record (a count sent as a string, 2**70 tokens, a finish reason
of 7) used to fail the whole pyarrow conversion, leaving no records.parquet and no summary.json while
the last line still said "summary …/summary.json"; a full disk gave tracebacks and lost what fitted."""

from __future__ import annotations

import errno
import json

import pyarrow.parquet as pq
from test_finalize_unchanged import T0, _config, write_run
from virtual_time import FakeHost

import analysis
import llmload.rundir.finalise as finish
from llmload.diskfull import DISK_FULL_EXIT
from llmload.rundir.finalise import finalise_run
from llmload.runtime.master.lifecycle import RunLifecycle, RunOptions
from llmload.runtime.master.states import RunState

BAD = {"request_id": "q-bad", "step": "r2", "worker": "0", "scheduled_at": T0 + 5.0, "sent_at": T0 + 5.0,
       "first_token_at": T0 + 5.1, "last_token_at": T0 + 5.3, "outcome": "ok", "input_tokens": 2**70,
       "output_tokens": "12", "finish_reason": 7, "token_times": [T0 + 5.1, T0 + 5.3]}


def _ids_on_disk(root) -> set[str]:
    ids = set()
    for path in (root / "records").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                ids.add(json.loads(line)["request_id"])
            except ValueError:
                continue  # the torn line write_run leaves
    return ids


def test_a_badly_typed_field_loses_no_record(tmp_path):
    write_run(tmp_path)
    with open(tmp_path / "records" / "worker-0.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(BAD) + "\n")
    code = finalise_run(tmp_path, _config(), report=False)
    assert code in (0, 1, 3) and (tmp_path / "summary.json").exists()
    table = pq.read_table(tmp_path / "records.parquet").to_pylist()
    assert {r["request_id"] for r in table} == _ids_on_disk(tmp_path)
    bad = next(r for r in table if r["request_id"] == "q-bad")
    assert bad["input_tokens"] is None and bad["output_tokens"] is None and bad["finish_reason"] is None
    assert "input_tokens" in bad["error"] and "output_tokens" in bad["error"]


def _session(tmp_path) -> RunLifecycle:
    """A lifecycle whose run is under way, finalised by the test (no Locust)."""
    life = RunLifecycle(FakeHost(web=False))
    life.config, life.run_dir, life.options = object(), tmp_path, RunOptions(report=True)
    life._to(RunState.PREFLIGHT)
    life._to(RunState.RUNNING)
    return life


def test_the_closing_line_names_no_missing_file(tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise RuntimeError("conversion failed")

    monkeypatch.setattr(finish, "finalise_run", fails)
    session = _session(tmp_path)
    session.finalise()
    out = capsys.readouterr()
    assert "summary.json" not in out.out + out.err and "report.html" not in out.out + out.err
    assert session.exit_code == 3 and session.state is RunState.DONE


def test_a_full_disk_at_finalisation_keeps_what_fits_and_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    write_run(tmp_path)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(analysis, "write_outputs", no_space)
    code = finalise_run(tmp_path, _config())
    assert code == DISK_FULL_EXIT
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("llmload:")]
    assert len(lines) == 1 and lines[0].startswith("llmload: error: the disk holding"), err
    assert "not written: summary.json" in lines[0] and "the verdict was fail" in lines[0]
    assert f"llmload report {tmp_path}" in lines[0] and "Traceback" not in err
    assert (tmp_path / "records.parquet").exists() and (tmp_path / "telemetry.parquet").exists()
    assert not list(tmp_path.glob("*.tmp"))
    assert pq.read_table(tmp_path / "records.parquet").num_rows == len(_ids_on_disk(tmp_path))


def test_a_summary_that_fitted_keeps_the_verdicts_exit_code(tmp_path, monkeypatch, capsys):
    write_run(tmp_path)
    import llmload.report.page as page

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(page, "write_report", no_space)
    code = finalise_run(tmp_path, _config())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == analysis.exit_code(summary) != DISK_FULL_EXIT
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("llmload: error"))
    assert "not written: report.html" in line and f"(exit code {code})" in line


def test_finished_records_missing_from_disk_are_counted_in_the_one_line(tmp_path, monkeypatch, capsys):
    """The master's count of shipped records against what the disk kept: the difference is said in the
    error line, and not handed to the run's closing line to say again."""
    write_run(tmp_path)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(analysis, "write_outputs", no_space)
    closing: list[str] = []
    kept = len(_ids_on_disk(tmp_path))
    assert finalise_run(tmp_path, _config(), finished=kept + 3, closing=closing) == DISK_FULL_EXIT
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("llmload: error"))
    assert "; 3 finished record(s) lost;" in line and closing == []


def test_a_run_that_dropped_nothing_says_nothing_of_it(tmp_path, capsys):
    write_run(tmp_path)
    closing: list[str] = []
    finalise_run(tmp_path, _config(), report=False, finished=len(_ids_on_disk(tmp_path)), closing=closing)
    assert closing == [] and "lost" not in capsys.readouterr().out
    finalise_run(tmp_path, _config(), report=False, finished=len(_ids_on_disk(tmp_path)) + 2, closing=closing)
    assert closing == ["2 finished record(s) lost"]
