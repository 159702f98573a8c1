"""The finalisation (merge, telemetry, analysis, summary, worksheet, report) was made cheaper, not
different: for a fixed run directory, `finalise_run` writes exactly what the code wrote before.

The run: four ladder steps of worker record files as a run leaves them (two workers, the master's
copies of shipped records, some `not_sent` copies a later outcome must win over, keys left out, a line
with NaN that only `json` reads, a torn last line), telemetry lines and a manifest. Compared with `finalize_unchanged.json`: the exit code,
the web UI's outcome, `summary.json` and `worksheet.csv` in full, and digests of the rows of
`records.parquet` (values and types), of `report.html` with its plots cut out, and of each plot (the
plots only where matplotlib is the version the file was written with: its SVG changes between
versions).

`finalize_unchanged.json` was written by `_snapshot()` on the code before the finalisation was made
cheaper (commit 543d8dd); regenerate it only for a deliberate change of output:
`python tests/runtime/test_finalize_unchanged.py`.
"""

from __future__ import annotations

import gc
import hashlib
import html
import json
import random
import re
import shutil
from pathlib import Path

import matplotlib
import pyarrow.parquet as pq

from llmload.config import parse_config
from llmload.rundir.finalise import finalise_run

GOLDEN = Path(__file__).with_name("finalize_unchanged.json")
T0 = 1_750_000_000.0
RATES = (2.0, 4.0, 8.0, 16.0)
STEP_S = 15.0


#: the golden run's config (also finalised without a report by `test_lean_start`)
CONFIG = {"target": {"url": "http://127.0.0.1:1", "api": "openai-chat", "model": "m"},
          "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}},
          "slo": {"ttft_p95": "600ms", "tpot_p95": "60ms", "e2e_p95": "2s", "min_samples": 20},
          "telemetry": {"gpu": "off", "metrics_url": "off"}}


def _config():
    return parse_config(CONFIG)


def _record(rng: random.Random, rid: str, step: str, at: float, load: float) -> dict:
    roll = rng.random()
    outcome = "ok" if roll < 0.985 else "rejected" if roll < 0.99 else "timeout" if roll < 0.995 else "http_error"
    sent = at + rng.random() * 0.004
    row = {"request_id": rid, "step": step, "worker": f"w{int(rid[1:]) % 2}", "scheduled_at": at,
           "outcome": outcome, "sent_at": sent, "dequeued_at": at - 0.003, "input_tokens": rng.randint(100, 900),
           "planned_input_tokens": 512, "planned_output_tokens": 24, "capped": rng.random() < 0.05,
           "api": "openai-chat", "instance": "http://a" if rng.random() < 0.5 else "http://b"}
    if outcome != "ok":
        row.update(http_status=429 if outcome == "rejected" else 500 if outcome == "http_error" else None,
                   error=None if outcome == "rejected" else f"{outcome} after {rng.random():.3f} s",
                   closed_at=sent + rng.random())
        return row
    first = sent + rng.lognormvariate(-1.6, 0.4) * load
    times = [first]
    for _ in range(rng.randint(1, 30)):
        times.append(times[-1] + rng.lognormvariate(-3.5, 0.3) * load)
    row.update(first_token_at=first, last_token_at=times[-1], closed_at=times[-1] + 0.001, token_times=times,
               output_tokens=len(times), finish_reason="stop" if rng.random() < 0.8 else "length",
               http_status=200, cached_tokens=rng.choice([None, 0, 64]))
    if rng.random() < 0.3:
        row["token_counts"] = [1] * len(times)
    return row


def write_run(root: Path, seed: int = 20) -> None:
    """The run directory as the steps leave it (no records.parquet, no summary yet)."""
    rng = random.Random(seed)
    (root / "records").mkdir(parents=True)
    steps, workers, master, n, t = [], ([], []), [], 0, T0
    for index, rate in enumerate(RATES):
        label = f"r{rate:g}"
        steps.append({"label": label, "index": index, "phase": "ladder", "target_rate": rate, "arrival": "poisson",
                      "concurrency": None, "start_at": t, "window_start": t + 2.0, "window_end": t + STEP_S,
                      "drain_deadline": t + STEP_S + 30, "drained_at": t + STEP_S + 2.5,
                      "planned_arrivals": int(rate * STEP_S), "status": "run"})
        at = t
        for _ in range(int(rate * STEP_S)):
            at += rng.expovariate(rate)
            row = _record(rng, f"q{n}", label, at, 1.0 + index * index * 0.4)
            workers[n % 2].append(row)
            if rng.random() < 0.15:  # shipped to the master too: the same record, or its not_sent copy
                master.append(dict(row) if rng.random() < 0.5 else
                              {**{k: row[k] for k in ("request_id", "step", "worker", "scheduled_at")},
                               "outcome": "not_sent"})
            n += 1
        t += STEP_S + 5.0
    steps.append({"label": "r32", "index": len(RATES), "phase": "ladder", "target_rate": 32.0, "arrival": "poisson",
                  "concurrency": None, "start_at": None, "window_start": None, "window_end": None,
                  "drain_deadline": None, "drained_at": None, "planned_arrivals": None, "status": "not_run"})
    for name, rows in (("worker-0", workers[0]), ("worker-1", workers[1]), ("master", master)):
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if name == "worker-0":  # what only `json` reads: NaN (the writer refuses it; another tool may not)
            text += json.dumps({"request_id": "q-nan", "step": "r4", "scheduled_at": T0 + 30.0, "outcome": "ok",
                                "sent_at": T0 + 30.0, "first_token_at": float("nan"), "server_queue_s": float("nan"),
                                "token_times": [T0 + 30.2, float("nan")], "output_tokens": 2}) + "\n"
        if name == "worker-1":
            text += '{"request_id": "q-torn", "step": "r2", "sched'  # a killed writer's last line
        (root / "records" / f"{name}.jsonl").write_text(text, encoding="utf-8")
    (root / "plan.json").write_text(json.dumps({"kind": "ladder", "steps": steps}), encoding="utf-8")
    lines = []
    for k in range(int(t - T0)):
        step = next((s["label"] for s in steps if s["start_at"] is not None
                     and s["start_at"] <= T0 + k < s["start_at"] + STEP_S + 5), None)
        load = RATES.index(float(step[1:])) + 1 if step else 0
        for metric, value in (("running", 3.0 * load + rng.random()), ("waiting", max(0.0, load - 2.5)),
                              ("kv_usage", 0.1 * load + 0.01 * rng.random())):
            lines.append(json.dumps({"t": T0 + k + 0.5, "source": "server:http://a", "metric": metric,
                                     "value": value, "step": step, "labels": ""}))
    (root / "telemetry.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "manifest.json").write_text(json.dumps({"run_id": "golden", "started_at": T0, "gpus": 1,
                                                    "target": {"model": "m", "api": "openai-chat"}}),
                                        encoding="utf-8")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _snapshot(root: Path) -> dict:
    outcome: dict = {}
    code = finalise_run(root, _config(), outcome=outcome)
    table = pq.read_table(root / "records.parquet")
    rows = json.dumps(table.to_pylist(), sort_keys=True)
    report = (root / "report.html").read_text(encoding="utf-8")
    svgs = re.findall(r"<svg.*?</svg>", report, flags=re.S)
    return {
        "exit_code": code, "outcome": outcome,
        "summary": json.loads((root / "summary.json").read_text(encoding="utf-8")),
        "worksheet": (root / "worksheet.csv").read_text(encoding="utf-8"),
        "records": {"rows": table.num_rows, "types": [f"{f.name}: {f.type}" for f in table.schema],
                    "sha256": _sha(rows)},
        "report_without_plots_sha256": _sha(re.sub(r"<svg.*?</svg>", "<svg/>", report, flags=re.S)),
        "plots": {"matplotlib": matplotlib.__version__, "count": len(svgs), "sha256": [_sha(s) for s in svgs]},
    }


def test_finalize_run_writes_what_it_wrote_before(tmp_path):
    write_run(tmp_path)
    got = _snapshot(tmp_path)
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert got["exit_code"] == want["exit_code"]
    assert got["outcome"] == want["outcome"]
    assert got["summary"] == want["summary"]
    assert got["worksheet"] == want["worksheet"]
    assert got["records"] == want["records"]
    assert got["report_without_plots_sha256"] == want["report_without_plots_sha256"]
    assert got["plots"]["count"] == want["plots"]["count"]
    if got["plots"]["matplotlib"] == want["plots"]["matplotlib"]:
        assert got["plots"]["sha256"] == want["plots"]["sha256"]


def test_the_golden_run_covers_what_the_merge_decides(tmp_path):
    """The fixed run has duplicates the merge must settle and a torn line: without them the test
    above could not catch a changed merge."""
    write_run(tmp_path)
    ids = [json.loads(line)["request_id"] for name in ("worker-0", "worker-1", "master")
           for line in (tmp_path / "records" / f"{name}.jsonl").read_text().splitlines()
           if line.endswith("}")]
    master = [json.loads(line) for line in (tmp_path / "records" / "master.jsonl").read_text().splitlines()]
    assert len(ids) > len(set(ids)) > 400
    assert {r["outcome"] for r in master} >= {"not_sent", "ok"}
    assert not (tmp_path / "records" / "worker-1.jsonl").read_text().endswith("\n")


def test_the_answer_is_made_once_for_the_outcome_and_the_report(tmp_path, monkeypatch, unrendered_plots):
    """The web UI's outcome and the report's first section are the same sentences: made once (the page's
    text is read: its plots are built, not drawn)."""
    from llmload.report import answer, page

    calls = []
    real = answer.answer_sentences

    def counted(analysis, manifest):
        calls.append(manifest)
        return real(analysis, manifest)

    monkeypatch.setattr(answer, "answer_sentences", counted)  # where the finalisation takes it
    monkeypatch.setattr(page, "answer_sentences", counted)  # the report page's own import
    write_run(tmp_path)
    outcome: dict = {}
    finalise_run(tmp_path, _config(), outcome=outcome)
    assert len(calls) == 1
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert outcome["sentences"] and all(html.escape(s) in report for s in outcome["sentences"])


def test_the_cyclic_gc_is_paused_while_finalising_and_restored(tmp_path, monkeypatch):
    import llmload.rundir.finalise as finish

    seen = []
    real = finish.analyse_run
    monkeypatch.setattr(finish, "analyse_run", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    write_run(tmp_path)
    assert gc.isenabled()
    # no report.html: the analysis is where the gc is paused (the report's drawing was 0.5 s of CPU a call)
    finalise_run(tmp_path, _config(), report=False)
    assert seen == [False] and gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        (tmp_path / "summary.json").unlink()
        finalise_run(tmp_path, _config(), report=False)
        assert not gc.isenabled()
    finally:
        gc.enable()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_run(Path(tmp) / "run")
        snapshot = _snapshot(Path(tmp) / "run")
        shutil.rmtree(Path(tmp) / "run")
    GOLDEN.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
