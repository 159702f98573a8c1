"""A relative `target.api_key_file` is read from the config file's folder by every reader: the pre-flight,
telemetry probes and the load (issue 33 item 16; they once read two different files)."""

from __future__ import annotations

from llmload.client.auth import Credentials
from llmload.client.transport import Transport
from llmload.config import load_config
from llmload.telemetry.credentials import request_headers

CONFIG = ("target:\n  url: http://127.0.0.1:9\n  api_key_file: key.txt\n"
          "shape:\n  ladder:\n    steps:\n      - {rate: 1, duration: 10s}\n")


def test_every_reader_uses_the_config_folder(tmp_path, monkeypatch):
    folder, elsewhere = tmp_path / "conf", tmp_path / "cwd"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "run.yaml").write_text(CONFIG, encoding="utf-8")
    (folder / "key.txt").write_text("key-next-to-the-config\n", encoding="utf-8")
    (elsewhere / "key.txt").write_text("key-in-the-current-folder\n", encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    config = load_config(folder / "run.yaml")
    want = "Bearer key-next-to-the-config"
    assert Credentials.from_target(config.target).headers()["Authorization"] == want  # pre-flight
    assert request_headers(config)["Authorization"] == want  # telemetry probes and scrapes
    transport = Transport.from_target(config.target, concurrency=1, base_dir=str(folder))  # the load
    assert transport.credentials.headers()["Authorization"] == want


def test_a_missing_key_file_is_found_when_the_config_loads(tmp_path):
    import pytest

    from llmload.errors import ConfigError

    (tmp_path / "run.yaml").write_text(CONFIG, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"run\.yaml:3 target\.api_key_file: file \"/.*key\.txt\" not found"):
        load_config(tmp_path / "run.yaml")
