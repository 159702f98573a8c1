"""A server that echoes the Authorization header (model list, /metrics labels, stream fields) must not get
the API key into any output of a real `llmload run`: console, run files, parquet cells."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from echo_server import EchoServer
from support import base_config, write_config

KEY = "sk-test-S3CRET-a1b2c3d4e5"


@pytest.fixture
def echo_server():
    server = EchoServer()
    yield server
    server.close()


def _leaks(path: Path) -> bool:
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return bool(frame.astype(str).apply(lambda col: col.str.contains(KEY, regex=False)).any().any())
    return KEY.encode() in path.read_bytes()


@pytest.mark.slow
def test_echoed_key_is_in_no_output(tmp_path, echo_server, capfd, monkeypatch):
    """The command's entry in this process (its console read with capfd: this process's and the Locust
    child's), with a secrets registry of its own, as below."""
    from llmload import redaction
    from llmload.cli import main

    monkeypatch.setattr(redaction, "_secrets", [])
    config = base_config(echo_server.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                                      "steps": [{"rate": 4, "duration": "3s"}]}})
    config["target"].update(api_key_env="LLMLOAD_ECHO_TEST_KEY", model="my-model")  # listed beside the key
    config["telemetry"].update(interval="200ms")
    path = write_config(tmp_path, config)
    run_dir = tmp_path / "run"
    monkeypatch.setenv("LLMLOAD_ECHO_TEST_KEY", KEY)
    capfd.readouterr()
    main(["run", str(path), "--out", str(run_dir)])
    done = capfd.readouterr()
    assert (run_dir / "report.html").exists(), done.out[-2000:] + done.err[-2000:]
    assert KEY not in done.out and KEY not in done.err
    written = sorted(p for p in run_dir.rglob("*") if p.is_file())
    names = {p.name for p in written}
    assert {"manifest.json", "preflight.json", "report.html", "telemetry.jsonl", "telemetry.parquet",
            "records.parquet", "summary.json"} <= names
    assert [p.name for p in written if _leaks(p)] == []
    # the echoed values are still there, redacted: the data is kept, only the secret is gone
    assert "<redacted>" in (run_dir / "preflight.json").read_text()
    assert "<redacted>" in (run_dir / "telemetry.jsonl").read_text()


def test_a_model_refused_against_a_list_that_echoes_the_key_quotes_it_redacted(tmp_path, echo_server, capfd,
                                                                              monkeypatch):
    """The command's entry in this process (its pre-flight refuses the model before any load), with a
    secrets registry of its own: only what this run registers redacts, and nothing stays registered after."""
    from llmload import redaction
    from llmload.cli import main

    monkeypatch.setattr(redaction, "_secrets", [])

    config = base_config(echo_server.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                                      "steps": [{"rate": 1, "duration": "1s"}]}})
    config["target"].update(api_key_env="LLMLOAD_ECHO_TEST_KEY", model="not-listed")
    monkeypatch.setenv("LLMLOAD_ECHO_TEST_KEY", KEY)
    capfd.readouterr()
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(tmp_path / "run")])
    done = capfd.readouterr()
    assert code == 2, done.out + done.err
    assert "does not serve model 'not-listed'" in done.err and "<redacted>" in done.err
    assert KEY not in done.out + done.err
    assert not (tmp_path / "run").exists()
