"""Trace loaders: the two real Azure traces, and small BurstGPT / Mooncake / llmload files written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmload.errors import ConfigError
from llmload.traces import TRACE_COLUMNS, load_trace, sniff_format

#: the two real one-hour Azure traces ship with the project (CC BY 4.0, see examples/traces/README.md)
TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
CODE = TRACES / "AzureLLMInferenceTrace_code.csv"
needs_azure = pytest.mark.skipif(not CONV.exists(), reason="the Azure traces are not here")


@needs_azure
@pytest.mark.parametrize(("path", "count"), [(CONV, 19_366), (CODE, 8_819)])
def test_azure_traces_load_every_row(path, count):
    # The files hold 19,366 and 8,819 data rows (their README says one fewer of each).
    frame = load_trace(path)
    assert sniff_format(path) == "azure"
    assert list(frame.columns) == list(TRACE_COLUMNS)
    assert len(frame) == count
    offsets = frame["offset_s"].to_numpy()
    assert offsets[0] == 0.0 and np.all(np.diff(offsets) >= 0)
    assert 3_300 < offsets[-1] < 3_600  # about one hour
    assert frame["input_tokens"].min() >= 1 and frame["output_tokens"].min() >= 1
    assert not frame["failed_in_source"].any()
    assert frame["prefix_id"].isna().all()


@needs_azure
def test_azure_first_offsets_keep_sub_millisecond_digits():
    frame = load_trace(CONV, "azure")
    # 18:15:46.6805900 -> 18:15:50.9951690
    assert frame["offset_s"].iloc[1] == pytest.approx(4.314579, abs=1e-7)
    assert (frame["input_tokens"].iloc[0], frame["output_tokens"].iloc[0]) == (374, 44)


def test_burstgpt_failed_requests_are_flagged_and_counted(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    frame = load_trace(path)
    assert sniff_format(path) == "burstgpt"
    assert frame["offset_s"].tolist() == [0.0, 40.0, 113.0]
    assert frame["failed_in_source"].tolist() == [False, True, False]
    assert frame["output_tokens"].tolist() == [18, 0, 276]


def test_mooncake_hash_blocks_become_shared_prefix_ids(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 1000, "input_length": 1600, "output_length": 10, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 1500, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 7]},
        {"timestamp": 3000, "input_length": 600, "output_length": 30, "hash_ids": [1, 9]},
        {"timestamp": 4000, "input_length": 300, "output_length": 40, "hash_ids": [5]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    frame = load_trace(path)
    assert sniff_format(path) == "mooncake"
    assert frame["offset_s"].tolist() == [0.0, 0.5, 2.0, 3.0]
    ids = frame["prefix_id"].tolist()
    assert ids[0] == ids[1] and ids[2] not in (ids[0], None)
    assert frame["prefix_id"].isna().tolist() == [False, False, False, True]
    assert frame["prefix_tokens"].tolist()[:3] == [1024, 1024, 512]
    assert frame["prefix_ids"].tolist()[1] == [1, 2, 7]


def test_llmload_csv_with_iso_times_prompts_and_prefixes(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(
        "timestamp,input_tokens,output_tokens,prompt,prefix_id\n"
        "2025-01-01T00:00:01.5Z,10,5,hello there,2\n"
        "2025-01-01T00:00:00Z,20,6,,\n"
    )
    frame = load_trace(path)
    assert frame["offset_s"].tolist() == [0.0, 1.5]  # sorted by time
    assert frame["input_tokens"].tolist() == [20, 10]
    assert frame["prompt"].tolist() == [None, "hello there"]
    assert frame["prefix_id"].isna().tolist() == [True, False]


def test_llmload_jsonl_in_seconds_without_sizes(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"timestamp": 12.0}\n\n{"timestamp": 12.25, "input_tokens": 7, "output_tokens": 3}\n')
    frame = load_trace(path, "llmload")
    assert frame["offset_s"].tolist() == [0.0, 0.25]
    assert frame["input_tokens"].isna().tolist() == [True, False]


@pytest.mark.parametrize(("name", "text", "fmt", "match"), [
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,2\nyesterday,3,4\n",
     "auto", r"a\.csv:3: TIMESTAMP: unparsable timestamp \"yesterday\""),
    ("b.csv", "TIMESTAMP,GeneratedTokens\n2023-11-16 18:15:46.68,2\n", "azure",
     r"b\.csv:1: missing column \"ContextTokens\""),
    ("c.csv", "Timestamp,Request tokens,Response tokens\n1,2,3\n2,-5,3\n", "auto",
     r"c\.csv:3: Request tokens: expected a non-negative integer, got \"-5\""),
    ("d.jsonl", '{"timestamp": 1, "input_length": 1, "output_length": 1}\n{"timestamp": \n', "auto",
     r"d\.jsonl:2: not valid JSON"),
    ("e.csv", "when,size\n1,2\n", "auto", r"e\.csv:1: cannot tell the trace format"),
    ("f.csv", "timestamp,input_tokens\n1.0,3\n2.0,x\n", "auto", r"f\.csv:3: input_tokens"),
    ("g.csv", "timestamp\n", "auto", r"g\.csv.*no arrivals"),
])
def test_bad_files_give_one_line_errors_with_file_and_line(tmp_path, name, text, fmt, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_trace(path, fmt)
    assert "\n" not in str(info.value)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="nope.csv: trace file not found"):
        load_trace(tmp_path / "nope.csv")


def test_example_samples_match_their_source():
    examples = Path(__file__).resolve().parents[1] / "examples" / "traces"
    conv = load_trace(examples / "azure_conv_5min.csv")
    code = load_trace(examples / "azure_code_5min_llmload.csv")
    assert (len(conv), len(code)) == (1_445, 781)
    assert conv["offset_s"].max() < 300 and code["offset_s"].max() < 300
    if CODE.exists():
        full = load_trace(CODE).head(781)
        assert code["input_tokens"].tolist() == full["input_tokens"].tolist()
        np.testing.assert_allclose(code["offset_s"], full["offset_s"], atol=1e-6)


def test_a_mooncake_row_without_hash_ids_is_one_line(tmp_path):
    """Mooncake prompts are built from hash_ids: a row without them is an error naming its line."""
    path = tmp_path / "mooncake.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 10, "input_length": 600, "output_length": 5}\n')
    with pytest.raises(ConfigError) as err:
        load_trace(path, "mooncake")
    assert str(err.value).startswith(f"{path}:2") and "hash_ids: missing" in str(err.value)
    assert "\n" not in str(err.value)


def test_mooncake_prompts_share_exactly_their_leading_hash_blocks():
    """Block `h` is the same 512 tokens of text wherever it appears: two prompts share the sim's tokens
    up to the end of their common leading hash ids, not further."""
    from llmload.client.mix import RequestMix
    from llmload.config import Requests, Target
    from llmload.sim.text import prompt_token_list

    mix = RequestMix(Requests(), Target(url="http://127.0.0.1:9", api="openai-chat", model="m"))

    def tokens(index: int, hash_ids: list[int], n: int) -> list:
        request = mix.build(f"r{index}", index, input_tokens=n, output_tokens=4, hash_ids=hash_ids)
        assert request.planned_input_tokens == n
        return prompt_token_list("", json.loads(request.body)["messages"])

    a, b, c = tokens(0, [1, 2], 1028), tokens(1, [1, 2, 3], 1540), tokens(2, [1, 9], 700)
    assert len(a) == 1028 and len(b) == 1540 and len(c) == 700  # the sim counts the planned length

    def common(x: list, y: list) -> int:
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        return n

    assert common(a, b) == 3 + 1024 and common(a, c) == 3 + 512  # template tokens, then whole blocks


def test_only_mooncake_rows_carry_hash_ids(tmp_path):
    """An llmload trace's `prefix_id` keeps the shared-prefix prompts: it is not a list of hash blocks."""
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens,prefix_id\n0,100,5,1\n1,100,5,1\n")
    frame = load_trace(path)
    assert frame["hash_ids"].isna().all() and list(frame["prefix_id"]) == [1, 1]


def test_conversation_trace_is_one_arrival_per_session_with_its_later_turns(tmp_path):
    path = tmp_path / "conv.jsonl"
    rows = [{"session_id": "a", "turn_idx": 0, "arrival_time_ns": 0, "input_toks": 100, "output_toks": 10},
            {"session_id": "b", "turn_idx": 0, "arrival_time_ns": 500_000_000, "input_toks": 50, "output_toks": 5},
            {"session_id": "a", "turn_idx": 1, "arrival_time_ns": 2_000_000_000, "input_toks": 150,
             "output_toks": 20}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sniff_format(path) == "conversation"
    frame = load_trace(path)
    assert list(frame["offset_s"]) == [0.0, 0.5] and list(frame["input_tokens"]) == [100, 50]
    assert frame["session_turns"][0] == [{"new_tokens": 40, "output_tokens": 20, "think_s": 2.0}]
    assert frame["session_turns"][1] == []


def test_conversation_turns_out_of_order_are_one_line(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text("session_id,turn_idx,arrival_time_ns,input_toks,output_toks\na,0,0,10,1\na,2,5,30,1\n")
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}:3") and "in order without gaps" in str(err.value)
