"""Every input's size is bounded and every string is valid UTF-8 when it is checked (issue 44 item 6):
a dataset line, the dataset, a trace line and file, a config value. Each is one line naming the file
and line, exit 2, before anything starts; reading a huge line costs bounded memory."""

from __future__ import annotations

import tracemalloc

import pytest
from support import assert_one_line, bad_input_cli

from llmload.client import dataset
from llmload.errors import ConfigError

TARGET = "target:\n  url: http://127.0.0.1:8000\n"
LADDER = "shape:\n  ladder:\n    steps:\n      - {rate: 1, duration: 10s}\n"


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    return bad_input_cli(tmp_path, monkeypatch, capsys, what="an oversized or invalid input")


def test_a_dataset_line_over_the_bound_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"prompt": "hi"}\n{"prompt": "' + b"x" * (40 * 2**20) + b'"}\n')
    dataset._last.clear()
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            dataset.load_dataset(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    said = str(info.value)
    assert said.startswith(f"{path}:2") and "more than 8 MiB" in said and "\n" not in said, said
    assert peak < 3 * dataset.MAX_LINE_BYTES, peak  # never the whole 40 MiB line (it was read whole, twice)


def test_a_dataset_file_over_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"prompt": "hi"}\n' * 1000)
    monkeypatch.setattr(dataset, "MAX_DATASET_BYTES", 4096)
    dataset._last.clear()
    with pytest.raises(ConfigError, match=r"data\.jsonl requests\.dataset: the dataset is 16\.6 KiB.*at most 4 KiB"):
        dataset.load_dataset(path)


@pytest.mark.parametrize(("content", "where"), [
    (b'{"prompt": "hi"}\n{"prompt": "bad \\ud800 surrogate"}\n', "data.jsonl:2"),
    (b'{"messages": [{"role": "user", "content": "\\udfff"}]}\n', "data.jsonl:1"),
    (b'{"conversations": [{"from": "human", "value": "ok"}], "note": "\\ud83d"}\n', "data.jsonl:1"),
], ids=["prompt", "messages", "other-field"])
def test_a_lone_surrogate_in_a_dataset_is_refused_at_validation(run_cli, tmp_path, content, where):
    (tmp_path / "data.jsonl").write_bytes(content)
    dataset._last.clear()
    assert_one_line(*run_cli(TARGET + LADDER + "requests:\n  dataset: data.jsonl\n"), where=where,
                    key="not valid UTF-8")


def test_a_lone_surrogate_in_the_config_is_refused(run_cli):
    text = TARGET + LADDER + 'conditions:\n  notes: "a \\ud800 b"\n'
    assert_one_line(*run_cli(text), where="bad.yaml:8 conditions.notes", key="not valid UTF-8")


def test_a_trace_line_over_the_bound_is_refused(tmp_path):
    from llmload.traces import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0}\n{"timestamp": 1, "x": "' + "y" * (9 * 2**20) + '"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: .*more than 8 MiB") as info:
        load_trace(path)
    assert "\n" not in str(info.value)


def test_a_lone_surrogate_in_a_trace_prompt_is_refused(tmp_path):
    from llmload.traces import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "prompt": "ok"}\n{"timestamp": 1, "prompt": "\\ud800"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: not valid UTF-8: a lone surrogate"):
        load_trace(path)


def test_a_trace_file_over_the_bound_is_refused(tmp_path, monkeypatch):
    from llmload import traces

    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "0,10,10\n" * 1000, encoding="utf-8")
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 1024)
    with pytest.raises(ConfigError, match=r"t\.csv: the trace is .* at most 1 KiB"):
        traces.load_trace(path)
