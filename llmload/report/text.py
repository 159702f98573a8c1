"""Plain-text tables for the terminal (`llmload report`, `llmload compare`): aligned, blanks for missing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from llmload.report.html import cell_text

__all__ = ["fmt_ms", "text_table", "verdict_table"]


def fmt_ms(seconds: Any) -> str:
    """Seconds as whole milliseconds for display; blank when missing."""
    text = cell_text(seconds)
    return f"{float(seconds) * 1000:.0f}" if text else ""


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[cell_text(v) if not isinstance(v, str) else v for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in cells if r[i]) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule] + [line(r) for r in cells])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _names(value: Any) -> str:
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return ", ".join(map(str, list(value)))
    return cell_text(value)


def verdict_table(steps: pd.DataFrame, summary: dict) -> str:
    """The short verdict table `llmload report` prints: one row per step, unrun steps blank."""
    rows = []
    for _, step in steps.iterrows():
        unrun = str(step.get("status")) == "not_run"
        failing = _names(step.get("failing"))
        few = _names(step.get("over_on_few_samples"))
        if few:  # over a target on too few completions to judge: said, never silent
            failing = "; ".join(filter(None, [failing, f"over on too few samples: {few}"]))
        undecided = _names(step.get("undecided_targets"))
        if undecided:  # inconclusive: the interval of these targets straddles the threshold
            failing = "; ".join(filter(None, [failing, f"undecided: {undecided}"]))
        rows.append([str(step.get("label", "")), cell_text(step.get("target_rate")),
                     "" if unrun else cell_text(step.get("offered_rate")),
                     "" if unrun else cell_text(step.get("goodput")),
                     "" if unrun else fmt_ms(step.get("ttft_p95_s")),
                     "" if unrun else fmt_ms(step.get("tpot_p95_s")),
                     "" if unrun else fmt_ms(step.get("e2e_p95_s")),
                     "not run" if unrun else cell_text(step.get("verdict")),
                     "" if unrun else failing])
    table = text_table(["step", "target/s", "offered/s", "goodput/s", "TTFT p95 ms", "TPOT p95 ms",
                        "E2E p95 ms", "verdict", "failing"], rows)
    from llmload.report.answer import last_passing_step, rate_of  # answer draws plots: loaded only here

    passing = last_passing_step(steps, summary)
    last = "none" if passing is None else f"{rate_of(passing):.3g} req/s offered (step {passing.get('label')})"
    return f"{table}\nverdict: {summary.get('verdict', '')}; highest passing step: {last}"
