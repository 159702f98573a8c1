"""SSE framing: the WHATWG rules, every chunk split, and agreement with sseclient-py."""

from __future__ import annotations

import sseclient

from llmload.protocols import SSEDecoder, SSEEvent

STREAM = (
    "\ufeff: ping comment\r\n"
    "data: {\"a\": \"h\u00e9llo \u4e16\u754c \U0001f600\"}\r\n"
    "\r\n"
    "event: update\n"
    "id: 7\n"
    "data: line one\n"
    "data:line two\n"
    "data\n"
    "\n"
    ":another comment\r"
    "retry: 1500\r"
    "data:  two spaces\r"
    "\r"
    "event: lonely\n"
    "\n"
    "id: 8\n"
    "data: [DONE]\n"
    "\n"
).encode()

EXPECTED = [
    SSEEvent(data='{"a": "h\u00e9llo \u4e16\u754c \U0001f600"}'),
    SSEEvent(data="line one\nline two\n", event="update", id="7"),
    SSEEvent(data=" two spaces", id="7", retry=1500),
    SSEEvent(data="[DONE]", id="8", retry=1500),
]


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(dec.feed(chunk))
    out.extend(dec.flush())
    return out


def test_whole_stream() -> None:
    assert decode([STREAM]) == EXPECTED


def test_every_split_point() -> None:
    for i in range(len(STREAM) + 1):
        assert decode([STREAM[:i], STREAM[i:]]) == EXPECTED, f"split at byte {i}"


def test_every_pair_of_split_points_in_the_multibyte_line() -> None:
    start = STREAM.index(b"h\xc3")
    end = STREAM.index(b"\r\n\r\n")
    for i in range(start, end):
        for j in range(i, end + 2):
            assert decode([STREAM[:i], STREAM[i:j], STREAM[j:]]) == EXPECTED, (i, j)


def test_byte_at_a_time() -> None:
    assert decode([STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_agrees_with_sseclient_on_lf_streams() -> None:
    # sseclient-py (the library Locust users usually pair with) as an oracle, on LF-framed input
    stream = b": hi\n\ndata: a\ndata: b\n\nevent: x\nid: 3\ndata: c\n\ndata: [DONE]\n\n"
    # (ids are left out: sseclient-py does not carry the last event id forward as the standard says)
    ours = [(e.event, e.data) for e in decode([stream])]
    theirs = [(e.event, e.data) for e in sseclient.SSEClient(iter([stream])).events()]
    assert ours == theirs


def test_unterminated_last_line_is_dropped_but_terminated_event_is_kept() -> None:
    assert decode([b"data: [DONE]\n"]) == [SSEEvent(data="[DONE]")]
    assert decode([b"data: {\"cut"]) == []


def test_llamacpp_error_field_becomes_error_event() -> None:
    events = decode([b'error: {"code": 500, "message": "boom"}\n\n'])
    assert events == [SSEEvent(data='{"code": 500, "message": "boom"}', event="error")]


def test_id_with_nul_is_ignored_and_unknown_fields_skipped() -> None:
    assert decode([b"id: 1\nid: a\x00b\nfoo: bar\ndata: x\n\n"]) == [SSEEvent(data="x", id="1")]


def test_line_at_a_time_as_readline_hands_them_over() -> None:
    # the streaming core feeds one LF-terminated line per call (its fast path): same events as one
    # chunk, a BOM before the first `data:` dropped, a non-UTF-8 data line replaced and kept as invalid
    stream = STREAM.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    for lines in (stream, b"\xef\xbb\xbfdata: first\n\n" + stream[3:], b"data: \xff\xfe\ndata: ok\n\n\n"):
        whole = SSEDecoder()
        expected = whole.feed(lines) + whole.flush()
        one = SSEDecoder()
        got = [ev for line in lines.splitlines(keepends=True) for ev in one.feed(line)] + one.flush()
        assert got == expected and one.invalid == whole.invalid
    assert expected == [SSEEvent(data="\ufffd\ufffd\nok")] and one.invalid == b"data: \xff\xfe"
    first = SSEDecoder()
    assert first.feed(b"\xef\xbb\xbfdata: x\n") == [] and first.feed(b"\n") == [SSEEvent(data="x")]


def test_event_at_a_time_as_one_socket_read_brings_them() -> None:
    # the streaming core feeds what each read brings, usually one whole `data:` event (its fast path):
    # the same events as one chunk, the last id and retry carried, a pending event name or data line
    # from an earlier read kept, a non-UTF-8 event replaced and kept as invalid
    stream = STREAM.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    cases = (stream, b"id: 4\nretry: 9\n\ndata: a\n\ndata: b\n\n", b"event: x\n" + b"data: y\n\n" * 2,
             b"data: y\n" + b"data: z\n\n" * 2, b"data: ok\n\ndata: \xff\xfe\n\ndata: ok\n\n")
    for body in cases:
        whole = SSEDecoder()
        expected = whole.feed(body) + whole.flush()
        one = SSEDecoder()
        got = [ev for part in body.split(b"\n\n") for ev in one.feed(part + b"\n\n")] + one.flush()
        assert got == expected and one.invalid == whole.invalid, body
    assert expected[1] == SSEEvent(data="\ufffd\ufffd") and one.invalid == b"data: \xff\xfe"
    for before, expected_event in ((b"data: y\n", SSEEvent(data="y\nz")),
                                   (b"event: x\n", SSEEvent(data="z", event="x")),
                                   (b"\xef\xbb\xbf", SSEEvent(data="z"))):
        dec = SSEDecoder()
        assert dec.feed(before) == [] and dec.feed(b"data: z\n\n") == [expected_event], before
