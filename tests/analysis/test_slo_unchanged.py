"""The SLO registry (`llmload.slo`) changed where the SLO dimensions are declared, not what is judged:
for existing SLOs, the verdicts, failing dimensions (and their order), summary thresholds, checked /
not-checked lists, answer sentences and warnings are exactly those the code gave before the registry.

`slo_unchanged.json` was written by `_snapshot()` run on the code before the registry (commit 2ddd308);
regenerate it only for a deliberate change of output: `python tests/analysis/test_slo_unchanged.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis_frames import plan_step, request, run_of

from analysis import analyze, exit_code
from llmload.config import SLO
from llmload.report.answer import answer_sentences, derived_warnings

GOLDEN = Path(__file__).with_name("slo_unchanged.json")

#: SLOs as users write them today: the standard keys, a partial one, other percentiles and metrics, a
#: zero reject limit, error ratio off, OOM allowed, the list form
SLOS = {
    "standard": {"ttft_p95": "300ms", "tpot_p95": "80ms", "e2e_p95": "1s", "client_wait_p95": "200ms",
                 "server_queue_p95": "300ms", "max_reject_ratio": 0.0, "allow_oom": False,
                 "queue_growth": "forbid", "min_samples": 20},
    "partial": {"ttft_p95": "250ms", "min_samples": 20},
    "percentiles": {"ttft_p99": "400ms", "ttft_p90": "200ms", "user_ttft_p95": "350ms", "itl_p95": "50ms",
                    "user_e2e_p99.9": "2s", "e2e_p50": "600ms", "max_reject_ratio": 0.05, "min_samples": 20},
    "loose": {"e2e_p95": "30s", "max_error_ratio": None, "allow_oom": True, "min_samples": 20},
    "list_form": {"thresholds": [{"metric": "ttft", "percentile": 95, "value_s": 0.3},
                                 {"metric": "tpot", "percentile": 99, "value_s": 0.05}],
                  "max_reject_ratio": 0.0, "min_samples": 20},
    "few_samples": {"ttft_p95": "150ms", "e2e_p95": "700ms", "allow_oom": False, "min_samples": 500},
}


def _rows() -> tuple[list[dict], list[dict]]:
    """Five steps, latency rising with the rate, one with OOMs and rejections, one with errors."""
    rows: list[dict] = []
    steps = []
    for i, (label, ttft, e2e, extra) in enumerate([("r1", 0.08, 0.4, ""), ("r2", 0.15, 0.6, ""),
                                                   ("r3", 0.26, 0.9, "reject"), ("r4", 0.45, 1.4, "oom"),
                                                   ("r5", 0.9, 2.5, "error")]):
        start = i * 100.0
        steps.append(plan_step(label, i, rate=float(i + 1), start=start, length=60.0))
        for k in range(60 * (i + 1)):  # the target rate, exactly (offered = target)
            jitter = (k % 10) / 10
            rows.append(request(f"{label}-{k}", label, start + k / (i + 1), ttft=ttft * (0.6 + 0.8 * jitter),
                                e2e=e2e * (0.6 + 0.8 * jitter), wait=0.01 * jitter, out=8 + k % 5))
        if extra == "reject":
            rows += [request(f"{label}-x{k}", label, start + k + 0.5, ttft=None, e2e=None, outcome="rejected")
                     for k in range(3)]
        if extra == "oom":
            rows += [request(f"{label}-x{k}", label, start + k + 0.5, ttft=None, e2e=None, outcome="oom")
                     for k in range(2)]
            rows += [request(f"{label}-y{k}", label, start + k + 0.7, ttft=None, e2e=None, outcome="rejected")
                     for k in range(2)]
        if extra == "error":
            rows += [request(f"{label}-x{k}", label, start + k + 0.5, ttft=None, e2e=None, outcome="http_error")
                     for k in range(30)]
    return rows, steps


def _snapshot() -> dict:
    rows, steps = _rows()
    out = {}
    for name, data in SLOS.items():
        slo = SLO.model_validate(data)
        result = analyze(run_of(rows, steps), slo)
        per_step = [{k: (list(r[k]) if k in ("failing", "unmeasured", "undecided", "over_on_few_samples")
                         and r[k] is not None else r[k]) for k in ("label", "verdict", "failing", "unmeasured",
                                                                    "undecided", "over_on_few_samples")}
                    for _, r in result.steps.iterrows()]
        summary = result.summary
        verdict, sentences = answer_sentences(result, {})
        out[name] = {
            "steps": per_step, "verdict": summary["verdict"], "exit": exit_code(summary), "slo": summary["slo"],
            "decision": {k: summary["decision"][k] for k in ("thresholds", "not_checked", "failing_dimension",
                                                             "failed_first", "last_passing_rate",
                                                             "first_failing_rate")},
            "checked": slo.checked, "answer": [verdict, *sentences],
            "warnings": derived_warnings(result, {}),
        }
    return json.loads(json.dumps(out, default=str))


def test_verdicts_summary_and_answer_unchanged_for_existing_slos() -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = _snapshot()
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == expected[name], name


def test_the_snapshot_exercises_every_verdict_and_dimension() -> None:
    """The golden data must be able to catch a change: it holds fails on latency, ratio and flag
    dimensions, passes, and insufficient steps."""
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    verdicts = {s["verdict"] for v in expected.values() for s in v["steps"]}
    failing = {f for v in expected.values() for s in v["steps"] for f in s["failing"]}
    assert {"pass", "fail", "insufficient"} <= verdicts
    assert {"oom", "reject_ratio", "error_ratio", "ttft_p95", "tpot_p99", "e2e_p95"} <= failing


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(_snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
