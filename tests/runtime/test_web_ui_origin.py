"""The web UI is readable only by its own page (issue 44 item 4): no CORS header for another origin on
any route (its pre-flight included), every request's `Host` checked (DNS rebinding: a name another site
points at 127.0.0.1), so the page that holds the UI's token is never readable by another site.

Real HTTP requests to a real Locust web UI (`llmload.runtime.locustglue.webui`) on 127.0.0.1."""

from __future__ import annotations

import http.client
import re
import subprocess
import time

import pytest
from runtime_helpers import start_web_run

EVIL = "http://evil.example"
ROUTES = ["/", "/llmload/live.json", "/llmload/steps.json", "/stats/requests", "/llmload/tab.js"]


def _request(port: int, method: str, path: str, headers: dict) -> tuple[int, dict, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode(errors="replace")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def web_ui(tmp_path_factory):
    """A web UI waiting for Start (nothing is ever sent: the target is a closed port)."""
    for attempt in (1, 2):  # a free port taken by a neighbour test before Locust bound it: once more
        tmp = tmp_path_factory.mktemp("web")
        proc, url, _ = start_web_run("http://127.0.0.1:9", tmp, [{"rate": 1, "duration": "2s"}], autostart=False,
                                     stderr=subprocess.PIPE)
        port = int(url.rsplit(":", 1)[1])
        deadline = time.time() + 60
        while proc.poll() is None and time.time() < deadline:
            try:
                if _request(port, "GET", "/", {})[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        if proc.poll() is None and time.time() < deadline:
            break
        if proc.poll() is None:  # not answering after 60 s
            proc.kill()
        said = proc.communicate(timeout=30)[1]
        assert attempt == 1 and "in use" in said, f"the web UI did not come up (exit {proc.poll()}): {said[-2000:]}"
    yield port
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("path", ROUTES)
def test_another_origin_gets_no_cors_header(web_ui, path):
    status, headers, _ = _request(web_ui, "GET", path, {"Origin": EVIL})
    assert status == 200, status
    assert not any(h.startswith("access-control-") for h in headers), headers
    assert headers.get("x-frame-options") == "DENY"


@pytest.mark.slow
def test_the_preflight_allows_nothing_to_another_origin(web_ui):
    status, headers, _ = _request(web_ui, "OPTIONS", "/swarm", {
        "Origin": EVIL, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-llmload-token"})
    assert not any(h.startswith("access-control-") for h in headers), (status, headers)


@pytest.mark.slow
@pytest.mark.parametrize("path", ROUTES)
def test_a_rebound_host_name_reads_nothing(web_ui, path):
    status, _, body = _request(web_ui, "GET", path, {"Host": f"evil.example:{web_ui}"})
    assert status == 403 and "llmload-token" not in body, (status, body[:300])
    assert body.startswith("llmload: refused:") and len(body.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_the_ui_own_page_still_reads_with_its_token(web_ui, host):
    status, headers, body = _request(web_ui, "GET", "/", {"Host": host.format(port=web_ui)})
    assert status == 200 and re.search(r'name="llmload-token" content="[^"]+"', body)
    assert headers.get("cache-control") == "no-store"


@pytest.mark.parametrize(("host", "bound", "allowed"), [
    ("127.0.0.1:8089", "127.0.0.1", True), ("localhost", "127.0.0.1", True), ("ui.localhost:8089", "", True),
    ("10.0.0.5:8089", "0.0.0.0", True),  # an address cannot be rebound: a browser sent it to that address
    ("loadbox:8089", "loadbox", True),  # the name the UI was bound to (--web-host)
    ("evil.example:8089", "127.0.0.1", False), ("loadbox:8089", "127.0.0.1", False), ("", "127.0.0.1", False),
    ("evil.example", "0.0.0.0", False),
])
def test_host_allowed(host, bound, allowed):
    from llmload.runtime.locustglue.webdoor import host_allowed

    assert host_allowed(host, bound=bound) is allowed
