"""`llmload compare`'s energy column (METRICS.md "Energy"): shown beside the costs only when some run
measured GPU energy, blank for an invalid run, and its definition printed only then."""

from __future__ import annotations

from llmload.report.compare import RunFigures, _definitions, _run_rows


def _figures(name: str, *, energy: dict | None, verdict: str = "pass") -> RunFigures:
    return RunFigures(name=name, verdict=verdict, last_passing_rate=4.0, goodput_at_slo=4.0, good_tokens_per_s=800.0,
                      gpus=1.0, cost_per_hour=2.5, energy_at_knee=energy)


def test_the_energy_column_is_beside_the_costs_only_where_measured() -> None:
    plain = [_figures("a", energy=None), _figures("b", energy=None)]
    headers, _ = _run_rows(plain, 0)
    assert "J per good tok @knee" not in headers
    assert not [d for d in _definitions(plain) if d[0].startswith("J per")]

    runs = [_figures("a", energy={"joules_per_good_output_token": 0.42}), _figures("b", energy=None),
            _figures("c", energy={"joules_per_good_output_token": 0.3}, verdict="invalid")]
    headers, rows = _run_rows(runs, 0)
    at = headers.index("J per good tok @knee")
    assert headers[at - 1] == "cost per 1k good req" and headers[-2:] == ["last passing ÷ a", "goodput/GPU ÷ a"]
    assert [row[at] for row in rows] == [0.42, None, None]  # an invalid run gets no figure
    assert [d for d in _definitions(runs) if d[0].startswith("J per")]
