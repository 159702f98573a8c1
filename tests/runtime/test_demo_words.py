"""What `llmload demo` says around its runs: the README's SLO is the demo's, the envelope note comes once,
and a run's last line inside the demo says its verdict in words (the demo exits 0 when it ran)."""

from __future__ import annotations

import os
import re

from support import REPO

from llmload.runtime.launcher import child_env
from llmload.runtime.launcher import run as launcher
from llmload.runtime.launcher.demo import demo_configs
from llmload.runtime.locustglue import console

#: the README's words for each SLO key
README_WORDS = {"ttft_p95": "P95 TTFT", "tpot_p95": "P95 TPOT", "e2e_p95": "P95 E2E",
                "client_wait_p95": "P95 client wait", "server_queue_p95": "P95 server queue",
                "max_reject_ratio": "no rejections", "queue_growth": "no queue growth"}


def test_the_readme_names_the_demo_s_slo_and_no_other():
    text = (REPO / "README.md").read_text()
    sentence = re.search(r"a (?:Poisson )?ladder [^:]* with SLOs\s+(.*?):", text, flags=re.S).group(1)
    sentence = " ".join(sentence.split())
    slo = demo_configs("http://127.0.0.1:9")["ladder"]["slo"]
    named = {key for key, words in README_WORDS.items() if words in sentence}
    assert named == {key for key in slo if key in README_WORDS}, (sentence, slo)


def test_a_note_said_by_one_run_is_not_said_again_by_the_next(capsys):
    line = "llmload: note: a note for this test only"
    launcher.say_once(line)
    launcher.say_once(line)
    assert capsys.readouterr().err.splitlines() == [line]


def test_inside_the_demo_the_last_line_says_the_verdict_in_words(monkeypatch):
    monkeypatch.delenv(child_env.DEMO_ENV, raising=False)
    assert console.exit_note(1) == " (exit code 1)"
    note = child_env.run_in_demo(lambda: console.exit_note(1))
    assert "exit code" not in note and "SLO" in note
    assert child_env.run_in_demo(lambda: console.exit_note(0)) == " (every step passed)"
    assert child_env.DEMO_ENV not in os.environ and console.exit_note(1) == " (exit code 1)"  # restored after it
