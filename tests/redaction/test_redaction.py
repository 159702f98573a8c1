"""The process-wide redactor: registered when the key is read, applied by every writer and the console."""

from __future__ import annotations

import io
import json
import logging

import pytest

from llmload.client.auth import Credentials
from llmload.records import Record, RecordWriter
from llmload.redaction import (
    REDACTED,
    clear_secrets,
    install_console_redaction,
    redact,
    redact_text,
    register_secret,
    secrets_registered,
)
from llmload.telemetry.sink import Point, TelemetrySink

KEY = "sk-unit-9f8e7d6c5b"


@pytest.fixture(autouse=True)
def fresh_registry():
    clear_secrets()
    yield
    clear_secrets()


def test_nothing_registered_changes_nothing():
    value = {"a": [KEY, ("x", KEY)]}
    assert redact(value) is value and redact_text(KEY) == KEY


def test_bearer_value_registers_the_bare_key_too():
    register_secret(f"Bearer {KEY}")
    assert redact_text(f"id={KEY}") == f"id={REDACTED}"
    assert redact({KEY: [f"Bearer {KEY}", 3, (KEY,)]}) == {REDACTED: [REDACTED, 3, (REDACTED,)]}


def test_short_values_are_not_secrets():
    register_secret("ab")
    assert secrets_registered() == 0 and redact_text("abc") == "abc"


def test_reading_the_key_registers_it(monkeypatch):
    from llmload.config import Target

    monkeypatch.setenv("UNIT_KEY", KEY)
    Credentials.from_target(Target(url="http://127.0.0.1:8000", api_key_env="UNIT_KEY"))
    assert redact_text(f"model {KEY}") == f"model {REDACTED}"


def test_record_and_telemetry_writers_redact(tmp_path):
    register_secret(KEY)
    with RecordWriter(tmp_path / "r.jsonl") as writer:
        writer.write(Record(request_id="1", step="s", worker="w", scheduled_at=0.0, finish_reason=KEY,
                            error=f"echo {KEY}"))
    row = json.loads((tmp_path / "r.jsonl").read_text())
    assert row["finish_reason"] == REDACTED and row["error"] == f"echo {REDACTED}"
    sink = TelemetrySink(tmp_path / "telemetry.jsonl")
    sink.write(1.0, "s", [Point(source="server", metric="m", value=1.0, labels=f"model_name={KEY}")])
    sink.close()
    assert KEY not in (tmp_path / "telemetry.jsonl").read_text()


def test_manifest_writer_redacts_what_was_added_after_the_build(tmp_path):
    from llmload.telemetry.manifest import write_manifest

    register_secret(KEY)
    write_manifest(tmp_path, {"preflight": {"models": [KEY]}})
    assert KEY not in (tmp_path / "manifest.json").read_text()


def test_console_and_log_handlers(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    logger = logging.getLogger("llmload.test_redaction")
    handler = logging.StreamHandler(err)
    logger.addHandler(handler)
    try:
        install_console_redaction()
        register_secret(KEY)
        import sys

        print(f"models: {KEY}")
        print(f"error: {KEY}", file=sys.stderr)
        logger.warning("server said %s", KEY)
    finally:
        logger.removeHandler(handler)
    assert KEY not in out.getvalue() and KEY not in err.getvalue()
    assert out.getvalue() == f"models: {REDACTED}\n"
    assert f"server said {REDACTED}" in err.getvalue()


def test_a_password_in_the_target_url_is_registered():
    from llmload.config import Target

    Credentials.from_target(Target(url="http://user:hunter2-pass@127.0.0.1:8000"))
    assert redact_text("server:http://user:hunter2-pass@127.0.0.1:8000") == f"server:http://user:{REDACTED}@127.0.0.1:8000"
