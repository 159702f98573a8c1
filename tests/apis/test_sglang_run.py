"""End to end on SGLang's native `/generate`: a short `llmload run` against the sim's sglang flavour,
analysed, checked against the sim's ground-truth log (as tests/analysis/test_sim_ground_truth.py does for
vLLM's chat API). Bounded: one 5 s step at 4 req/s on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest
from support import ended_whole, run_said, truth_step_config, write_config

from analysis import analyze, load_run
from llmload.cli import main
from llmload.config import SLO

pytestmark = pytest.mark.slow


def test_sglang_generate_step_matches_the_sims_ground_truth(sim_factory, tmp_path) -> None:
    sim = sim_factory(flavor="sglang", config={"load_time_s": "0.1s"})
    config = truth_step_config(sim.url)
    config["target"].update(api="sglang-generate", server="sglang")
    config["requests"]["ignore_eos"] = True
    run_dir = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir), "--no-report"])
    assert ended_whole(code, run_dir), run_said(run_dir)  # 3 only for a step a busy machine left unjudged

    result = analyze(load_run(run_dir), SLO.model_validate({"ttft_p95": "1s", "min_samples": 5}))
    step = result.steps.iloc[0]
    req = result.requests
    in_window = set(req.loc[req["in_window"], "request_id"])
    truth = {row["request_id"]: row for row in sim.ground_truth_rows() if row["request_id"] in in_window}
    assert all(row["endpoint"] == "/generate" for row in truth.values())
    assert step["arrivals"] == len(in_window) and step["completed"] == len(truth) > 0
    assert step["verdict"] == "pass" and step["outcomes"] == {"ok": len(truth)}, run_said(run_dir)

    # counts from meta_info, not estimated; one output event per token (cumulative text made incremental)
    own = req[req["request_id"].isin(list(truth))]
    assert set(own["output_tokens"]) == {8} and not own["tokens_estimated"].any()
    assert all(own["input_tokens"] == [truth[r]["input_tokens"] for r in own["request_id"]])
    # the truth the client can see: from its own send to the server writing the first token (a machine
    # loaded by other tests delays the request on its way in by as much as the answer on its way out)
    sent = dict(zip(own["request_id"], own["sent_at"], strict=True))
    true_ttft = np.array([r["first_token_at"] - sent[rid] for rid, r in truth.items()])
    server_itl = np.concatenate([np.diff(r["token_times"]) for r in truth.values()])
    # the client sees each time a little after the server wrote it: a few ms on a busy 2-core machine
    assert step["ttft_p50_s"] == pytest.approx(np.percentile(true_ttft, 50), abs=0.01)
    assert step["itl_p50_s"] == pytest.approx(np.percentile(server_itl, 50), abs=0.005)
    assert step["tpot_excluded"] == 0
