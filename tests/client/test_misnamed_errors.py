"""Errors that name what happened (issue 44 item 7): a complete 200 whose body is not the API's stream
(an HTML page) is `malformed`, not `disconnect`; a chunked body that breaks after the 200's headers is a
connection lost after the headers, never "before the response headers". Real client, hostile server."""

from __future__ import annotations

from client_helpers import fixed_requests, send_batch, sim_target
from hostile.hostile_server import hostile_server

HTML = b"<!DOCTYPE html>\n<html><head><title>Login</title></head>\n<body>Please sign in</body></html>\n"


def _target(url: str, api: str = "openai-chat"):
    return sim_target(url, api, None, timeout=30.0, idle_timeout=10.0)


def html_page(handler, request) -> None:  # noqa: ANN001 (the hostile server's Handler and Received)
    handler.respond(200, HTML, content_type="text/html")


def html_chunked(handler, request) -> None:  # noqa: ANN001
    handler.stream_head(content_type="text/html")
    handler.chunk(HTML)
    handler.end()


def bad_chunk_size(handler, request) -> None:  # noqa: ANN001
    # one write: the client's read that ends the headers also holds the broken chunk size
    handler.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"zz\r\ndata: {}\r\n")
    handler.close()


def test_a_complete_html_page_is_malformed() -> None:
    for mode in (html_page, html_chunked):
        with hostile_server(mode) as server:
            records = send_batch(_target(server.url), fixed_requests(), 2)
        assert [r.outcome for r in records] == ["malformed"] * 2, [r.error for r in records]
        assert "not an event stream" in records[0].error and "<!DOCTYPE html>" in records[0].error, records[0].error


def test_an_html_page_to_an_ollama_request_is_malformed() -> None:
    with hostile_server(html_page) as server:
        records = send_batch(_target(server.url, "ollama-chat"), fixed_requests(), 1)
    assert [r.outcome for r in records] == ["malformed"], [r.error for r in records]


def test_a_bad_chunk_size_after_the_headers_is_named_after_the_headers() -> None:
    with hostile_server(bad_chunk_size) as server:
        records = send_batch(_target(server.url), fixed_requests(), 1)
    record = records[0]
    assert record.outcome == "disconnect" and record.http_status == 200, (record.outcome, record.error)
    assert "before the response headers" not in record.error and "after the response headers" in record.error, \
        record.error
