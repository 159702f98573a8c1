"""The web UI's door (issue 33 item 14): another site cannot start a run, and a run moved to another host
does not take the key along. Ground truth: what a second server on 127.0.0.2 received."""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from runtime_helpers import base_config, write_config
from support import free_port
from test_probe_credentials import serving

from llmload.runtime.launcher.run import locust_command
from llmload.runtime.locustglue.webui import check_post

KEY = "sk-web-ui-secret-0123456789"
TOKEN = "the-ui-token"


def _post(url: str, form: dict, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(("headers", "form", "why"), [
    ({"Host": "127.0.0.1:8089", "Origin": "http://evil.example"}, {}, "cross-site request from 'http://evil.example'"),
    ({"Host": "127.0.0.1:8089", "Origin": "null", "X-Llmload-Token": TOKEN}, {}, "cross-site request"),
    ({"Host": "evil.example:8089", "Origin": "http://evil.example:8089", "X-Llmload-Token": TOKEN}, {},
     "Host 'evil.example:8089' is not this UI's address"),
    ({"Host": "127.0.0.1:8089", "Referer": "http://evil.example/x"}, {}, "cross-site request (Referer)"),
    ({"Host": "127.0.0.1:8089", "Sec-Fetch-Site": "cross-site", "X-Llmload-Token": TOKEN}, {}, "Sec-Fetch-Site"),
    ({"Host": "127.0.0.1:8089", "Origin": "http://127.0.0.1:8089"}, {}, "token is missing or wrong"),
    ({"Host": "127.0.0.1:8089"}, {"llmload_token": "guess"}, "token is missing or wrong"),
    ({"Host": "127.0.0.1:8089", "Origin": "http://127.0.0.1:8089", "X-Llmload-Token": TOKEN}, {}, None),
    ({"Host": "[::1]:8089", "Sec-Fetch-Site": "same-origin"}, {"llmload_token": TOKEN}, None),
    ({"Host": "localhost:8089", "Referer": "http://localhost:8089/?tab=llm", "X-Llmload-Token": TOKEN}, {}, None),
])
def test_check_post(headers, form, why):
    got = check_post(headers, form, TOKEN)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_a_host_named_in_the_environment_is_allowed(monkeypatch):
    headers = {"Host": "loadbox:8089", "Origin": "http://loadbox:8089", "X-Llmload-Token": TOKEN}
    assert "not this UI's address" in check_post(headers, {}, TOKEN)
    monkeypatch.setenv("LLMLOAD_WEB_HOSTS", "other, loadbox")
    assert check_post(headers, {}, TOKEN) is None


def test_another_host_in_the_form_gets_no_credentials():
    from llmload.config import parse_config
    from llmload.runtime.master.start_form import apply_form

    config = parse_config({"target": {"url": "http://127.0.0.1:8000", "api_key_env": "K", "headers": {
        "X-Api-Key": "secret-header", "X-Team": "search"}}, "shape": {"ladder": {"steps": [{"rate": 1, "duration": 1}]}}})
    moved, changed = apply_form(config, host="http://127.0.0.2:8000")
    assert (moved.target.api_key_env, moved.target.headers) == (None, {"X-Team": "search"})
    assert "not sent" in changed["credentials"]
    same, changed = apply_form(config, host="http://127.0.0.1:8000/")
    assert same.target.api_key_env == "K" and "credentials" not in changed


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_forged_start_is_refused_and_a_moved_run_takes_no_key(sim_factory, tmp_path):
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                              "steps": [{"rate": 2, "duration": "2s"}]}})
    config["target"]["api_key_env"] = "LLMLOAD_WEB_KEY"
    port = free_port()
    cmd = locust_command(write_config(tmp_path, config), tmp_path / "run", web=True) + ["--web-port", str(port)]
    with serving("127.0.0.2") as away:
        proc = subprocess.Popen(cmd, env={**os.environ, "LLMLOAD_WEB_KEY": KEY}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            ui = f"http://127.0.0.1:{port}"
            deadline, page = time.time() + 60, None
            while page is None:
                assert time.time() < deadline and proc.poll() is None, "the web UI did not come up"
                try:
                    page = urllib.request.urlopen(ui + "/", timeout=5).read().decode()
                except OSError:
                    time.sleep(0.3)
            form = {"user_count": "1", "spawn_rate": "1", "host": away.url}
            # another site's form: refused, and nothing reaches the server it names
            status, body = _post(ui + "/swarm", form, {"Origin": "http://evil.example"})
            assert status == 403 and "cross-site" in body, (status, body)
            status, body = _post(ui + "/swarm", form, {"Origin": ui})  # same origin but no token
            assert status == 403 and "token" in body, (status, body)
            time.sleep(2.0)
            assert away.log == []
            # the page's own Start, moved to the second server: the run goes there without the key
            token = re.search(r'name="llmload-token" content="([^"]+)"', page).group(1)
            status, body = _post(ui + "/swarm", form, {"Origin": ui, "X-Llmload-Token": token})
            assert status == 200 and '"success": true' in body, (status, body)
            deadline = time.time() + 30
            while not away.log and time.time() < deadline:
                time.sleep(0.2)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert away.log, "the started run never reached the second server"
        assert away.log[0][0] == "/v1/models"  # the pre-flight went there first
        assert all("authorization" not in headers for _, headers in away.log), away.log
