"""Sim YAML validation: one-line errors with file:line and key, exit code 2 from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.cli import main
from llmload.errors import ConfigError
from llmload.sim.faults import draw_request
from llmload.sim.settings import Faults, SimSettings, load_sim_settings
from llmload.sim.text import AnswerText, chat_prompt_tokens, prompt_tokens
from llmload.tokens import count_tokens

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


@pytest.mark.parametrize(("text", "message"), [
    ("max_num_seqs: 4\nfaults:\n  disconect: 0.1\n", "{f}:3 faults.disconect: unknown key"),
    ("num_blocks: 8\nstep_base_s: fast\n", '{f}:2 step_base_s: expected a duration like 800ms, got "fast"'),
    ("max_num_seqs: [1]\n", "{f}:1 max_num_seqs: input should be a valid integer, got [1]"),
    ("faults:\n  oom: 2\n", "{f}:2 faults.oom: input should be less than or equal to 1"),
    ("max_num_seq: 4\n", "{f}:1 max_num_seq: unknown key"),
    ("- 1\n", "{f}:1: expected a mapping of sim settings"),
    ("faults:\n  windows:\n    - {fault: http_503, start_s: 5s, end_s: 1s}\n",
     "{f}:3 faults.windows[0]: end_s must be after start_s"),
    ("faults:\n  windows:\n    - {fault: boom, start_s: 0, end_s: 1s}\n",
     "{f}:3 faults.windows[0].fault: input should be 'disconnect', 'stall', 'malformed', 'http_429', "
     "'http_503', 'http_500' or 'oom', got \"boom\""),
])
def test_bad_sim_yaml_names_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_sim_settings(path)
    assert str(info.value) == message.format(f=path)


def test_missing_file_and_cli_exit_code_2(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="file not found"):
        load_sim_settings(missing)
    assert main(["sim", "--config", str(missing), "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == f"llmload: error: {missing}: file not found"
    assert main(["sim", "--flavor", "tgi", "--port", "0"]) == 2
    assert "unknown flavor" in capsys.readouterr().err


def test_durations_and_defaults():
    s = SimSettings.model_validate({"step_base_s": "30ms", "faults": {"stall_s": "2s", "exit_after_s": "1m"}})
    assert s.step_base_s == pytest.approx(0.03) and s.faults.stall_s == 2 and s.faults.exit_after_s == 60
    assert load_sim_settings(EXAMPLES / "default.yaml") == SimSettings()
    for path in EXAMPLES.glob("*.yaml"):
        load_sim_settings(path)


def test_draws_are_deterministic_per_seed_and_index():
    faults = Faults(disconnect=0.3, stall=0.3, malformed=0.3, http_429=0.1, oom=0.1)
    kw = dict(max_tokens=50, eos_probability=0.05, ignore_eos=False)
    a = [draw_request(7, i, faults, **kw) for i in range(200)]
    assert a == [draw_request(7, i, faults, **kw) for i in range(200)]
    assert a != [draw_request(8, i, faults, **kw) for i in range(200)]
    lengths = [d.output_tokens for d in a]
    assert min(lengths) >= 1 and max(lengths) <= 50 and any(d.eos for d in a)
    assert all(d.output_tokens == 50 for d in (draw_request(7, i, faults, **{**kw, "ignore_eos": True})
                                               for i in range(50)))
    for d in a:
        for at in (d.disconnect_at, d.stall_at, d.malformed_at):
            assert at is None or 0 <= at < d.output_tokens
    share = sum(d.disconnect_at is not None for d in a) / len(a)
    assert 0.15 < share < 0.45


def test_token_rule_prompt_counts_and_sum_answers():
    assert prompt_tokens("What is 2+2? Answer with a number.") == 11
    assert prompt_tokens([1, 2, 3]) == 3
    assert chat_prompt_tokens([{"role": "user", "content": "hi there"},
                               {"role": "system", "content": [{"type": "text", "text": "be brief"}]}]) == 12
    answer = AnswerText("What is 2+2? Answer with a number.")
    assert answer.delta(0) == "4"
    for n in range(1, 60):
        assert count_tokens(AnswerText("What is -5+3", n).text(n)) == n


def test_port_in_use_is_one_line_exit_2(capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["sim", "--flavor", "llamacpp", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"llmload: error: cannot listen on 127.0.0.1:{port}:") and "\n" not in err


def test_banner_says_loopback_or_all_interfaces():
    from llmload.sim.server import _banner

    assert _banner("vllm", "127.0.0.1", 8000) == "llmload sim (vllm) listening on http://127.0.0.1:8000 (loopback only)"
    assert _banner("ollama", "0.0.0.0", 11434).endswith("http://0.0.0.0:11434 (all interfaces)")


def test_public_surface():
    import llmload.sim as sim

    assert sorted(sim.__all__) == ["Engine", "EngineLimits", "FLAVORS", "Faults", "Sequence", "SimServer",
                                   "SimSettings", "StepResult", "load_sim_settings", "serve"]
    assert all(hasattr(sim, name) for name in sim.__all__)
