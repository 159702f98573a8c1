"""NDJSON framing: complete lines out, at every split point."""

from __future__ import annotations

from llmload.protocols import NDJSONDecoder

BODY = '{"response":"\u00e9\u4e16"}\n\n{"done":true}\r\n{"tail":1}'.encode()


def decode(chunks: list[bytes]) -> list[bytes]:
    dec = NDJSONDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(dec.feed(chunk))
    return out + dec.flush()


def test_every_split_point() -> None:
    expected = [b'{"response":"\xc3\xa9\xe4\xb8\x96"}', b'{"done":true}', b'{"tail":1}']
    for i in range(len(BODY) + 1):
        assert decode([BODY[:i], BODY[i:]]) == expected, i


def test_flush_empty() -> None:
    assert NDJSONDecoder().flush() == []
