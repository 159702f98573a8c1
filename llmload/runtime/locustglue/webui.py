"""The live LLM view in Locust's web UI: the "LLM" tab (charts, status, step table) and the start form.

- The tab's step table: `seams.add_tab` plus an `after_request` hook that adds its rows to
  `/stats/requests` (what the UI polls every few seconds; `seams.fill_tab`): one row per step with offered and achieved rate, TTFT / TPOT / E2E p95, goodput, client
  wait, server waiting and the verdict so far (the running step shows its numbers so far, verdict
  `running`).
- Above it, live SVG charts drawn by `webui_tab.js` (no CDN, works offline), which the index page
  loads: per-second TTFT and TPOT p50/p95 with the SLO lines, offered vs achieved vs goodput, server
  running/waiting and KV usage (GPU memory when known), step windows and verdicts marked; then the
  run's status, and when it ends its verdict, the report's answer sentences and a link to the report
  (served at `/llmload/report`). Data: `/llmload/live.json` (`live_state`).
- The header gets a box with the current step and the requests due but not finished ("in flight"),
  and Locust's "Users" explained as the client's pool of slots (the load is open loop).
- The start form shows the run's shape, rates, SLO and target (`llmload.runtime.master.start_form`): the rates
  and the SLO can be edited for the run; a bad value is refused when Start is pressed.

`/llmload` (the old separate page) redirects to the tab. The run's shape and SLO come from
`--llmload-config`.

Every request is answered only for this UI's own `Host`, with no CORS header for another origin
(`webdoor.OwnOriginOnly`: Locust turns CORS on for every route). Every POST (Start `/swarm`, `/stop`, `/stats/reset`, `/user`: each changes the run) is refused with 403
unless it comes from the UI's own page (`check_post`): its `Host` is a loopback name or an IP address
(or a name in `LLMLOAD_WEB_HOSTS`, comma-separated: a DNS name could be rebound to 127.0.0.1 by another
site), its `Origin` (or `Referer`) is that host, a browser's `Sec-Fetch-Site` says same-origin, and it
carries this UI's token (a random value made at start, in the page's `llmload-token` meta tag; the tab's
script adds it to the page's own POSTs as the `X-Llmload-Token` header, or a form field
`llmload_token`). Another site can neither read the page nor send that header. docs/SECURITY.md.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
from importlib.resources import files
from pathlib import Path
from typing import Any

import gevent

from llmload.redaction import redact
from llmload.runtime.locustglue.seams import add_tab, fill_tab, override_start_form, splice_into_page
from llmload.runtime.locustglue.webdoor import HOSTS_ENV, OwnOriginOnly, host_allowed
from llmload.runtime.master.live_series import LiveSeries
from llmload.runtime.master.step import Step, StepStatus

__all__ = ["LLM_TABLE", "TOKEN_FIELD", "TOKEN_HEADER", "check_post", "install_web_ui", "live_state", "step_rows"]

#: how the UI's page proves a POST is its own (the token is in the page's `llmload-token` meta tag)
TOKEN_HEADER = "X-Llmload-Token"
TOKEN_FIELD = "llmload_token"

#: the tab's columns: (key, title)
LLM_TABLE = (
    ("label", "Step"), ("offered_rate", "Offered req/s"), ("achieved_rate", "Achieved req/s"),
    ("ttft_p95_ms", "TTFT p95 ms"), ("ttfa_p95_ms", "TTFA p95 ms"), ("tpot_p95_ms", "TPOT p95 ms"), ("e2e_p95_ms", "E2E p95 ms"),
    ("goodput", "Goodput req/s"), ("client_wait_p95_ms", "Client wait p95 ms"),
    ("server_waiting", "Server waiting"), ("verdict", "Verdict"),
)
#: how often the sampler reads the collector's latest values (seconds)
SAMPLE_EVERY_S = 1.0


def _num(value: Any, scale: float = 1.0, digits: int = 2) -> float | None:
    if value is None:
        return None
    try:
        x = float(value) * scale
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else round(x, digits)


def _running_stats(session: Any, controller: Any, step: Step) -> dict:
    """`quick_stats` of the running step, folded in as its summaries arrived (`StepRecords.progress`:
    counts and quantile sketches); a poll never re-reads the step's summaries."""
    return step.rows.stats()


def step_rows(session: Any) -> list[dict]:
    """One row per step of the current run (judged steps from the live table, the running one so far)."""
    controller = getattr(session, "controller", None)
    if controller is None:
        return []
    steps: list[Step] = controller.steps
    rows = []
    t = controller.now()
    for step in steps:
        row = step.table_row
        if row is None and step.status is StepStatus.RUNNING:
            stats = _running_stats(session, controller, step)
            offered, achieved = step.running_rates(t)
            row = {"label": step.label, **stats, "verdict": "running", "offered_rate": offered,
                   "achieved_rate": achieved, "server_waiting": controller.tally.step_waiting(step)}
        if row is None:
            rows.append({"label": step.label, "verdict": step.status.value})
            continue
        rows.append({
            "label": step.label, "offered_rate": _num(row.get("offered_rate")),
            "achieved_rate": _num(row.get("achieved_rate")),
            "ttft_p95_ms": _num(row.get("ttft_p95_s"), 1000, 0),
            "ttfa_p95_ms": _num(row.get("ttfa_p95_s"), 1000, 0) if row.get("ttfa_p95_s") is not None else None,
            "tpot_p95_ms": _num(row.get("tpot_p95_s"), 1000, 0),
            "e2e_p95_ms": _num(row.get("e2e_p95_s"), 1000, 0), "goodput": _num(row.get("goodput")),
            "client_wait_p95_ms": _num(row.get("client_wait_p95_s"), 1000, 0),
            "server_waiting": _num(row.get("server_waiting"), 1, 1), "verdict": row.get("verdict"),
        })
    return rows


def _plan_steps(session: Any, t0: float | None) -> list[dict]:
    """The steps' boundaries (seconds from the charts' `t0`) and verdicts, for the charts' markers."""
    controller = getattr(session, "controller", None)
    if controller is None or t0 is None:
        return []

    def rel(value: float | None) -> float | None:
        return None if value is None else round(float(value) - t0, 2)

    return [{"label": step.label, "status": step.status.value, "start": rel(step.start_at),
             "window_start": rel(step.window_start), "window_end": rel(step.window_end),
             "drained": rel(step.drained_at), "target_rate": step.target_rate,
             "verdict": (step.table_row["verdict"] if step.table_row is not None else None) or step.status.value}
            for step in controller.steps]


def _current_step(session: Any) -> dict | None:
    """The running step: label, position, elapsed and planned seconds, requests due but not finished."""
    controller = getattr(session, "controller", None)
    if controller is None:
        return None
    step = controller.running()
    if step is None:
        return None
    t = controller.now()
    start = step.start_at
    due = None
    if step.offsets is not None and start is not None:
        import numpy as np

        due = int(np.count_nonzero(step.offsets < t - start))
    elif step.planned_arrivals:
        due = int(step.planned_arrivals)
    duration = None
    if step.window_end is not None and start is not None:
        duration = round(float(step.window_end) - float(start), 1)
    return {"label": step.label, "index": controller.steps.index(step) + 1,
            "count": len(controller.steps), "target_rate": step.target_rate,
            "elapsed_s": None if start is None else round(max(0.0, t - float(start)), 1), "duration_s": duration,
            "in_flight": None if due is None else max(0, due - len(step.rows))}


def _slo_lines(config: Any) -> dict[str, list[dict]]:
    """SLO thresholds per charted metric: `{"ttft": [{"p": 95, "ms": 500}], "tpot": [...]}`."""
    lines: dict[str, list[dict]] = {"ttft": [], "tpot": []}
    if config is None:
        return lines
    for t in config.slo.thresholds:
        if t.metric in lines:
            lines[t.metric].append({"p": t.percentile, "ms": round(t.value_s * 1000, 3)})
    return lines


def live_state(session: Any, live: LiveSeries) -> dict:
    """Everything the tab draws above the step table, as one JSON-able dict (the table itself comes with
    `/stats/requests`, so the running step's numbers are not computed twice)."""
    config = session.config
    controller = getattr(session, "controller", None)
    running = session.greenlet is not None and not session.greenlet.dead
    if session.finished:
        summary = session.run_dir / "summary.json" if session.run_dir is not None else None
        state = "finished" if session.outcome or (summary is not None and summary.exists()) else "failed"
    elif controller is None:
        state = "preflight" if running else "ready"
    elif controller.done.is_set():
        state = "finishing"
    else:
        state = "running"
    series = live.series(until=controller.now() if state == "running" and controller is not None else None)
    report = session.run_dir / "report.html" if session.run_dir is not None else None
    result = None
    if session.finished and session.run_dir is not None:
        result = {"verdict": session.outcome.get("verdict"), "sentences": session.outcome.get("sentences", []),
                  "exit_code": session.exit_code, "run_dir": str(session.run_dir),
                  "report_url": "./llmload/report" if report is not None and report.exists() else None}
    from llmload.runtime.master.pool import pool_size

    return {"state": state, "series": series, "steps": _plan_steps(session, series.get("t0")),
            "current": _current_step(session), "slo": _slo_lines(config), "result": result,
            "pool": pool_size(config) if config is not None else None,
            "shape": config.shape.kind if config is not None else None,
            "overrides": session.overrides}


def _sample(session: Any, live: LiveSeries) -> None:
    """Every second: the collector's latest server/GPU values (the steps' planned arrivals come with their
    `step_started` event: `LiveSeries.listen`)."""
    while True:
        gevent.sleep(SAMPLE_EVERY_S)
        try:
            if getattr(session, "controller", None) is None or session.finished:
                continue
            telemetry = getattr(session, "telemetry", None)
            if telemetry is not None:
                latest = telemetry.latest()
                stamps = [v.get("t") for v in latest.values() if v.get("t") is not None]
                if stamps:
                    live.add_server(max(stamps), latest)
        except Exception:  # the charts must never take the run down
            continue


def check_post(headers: Any, form: Any, token: str, *, bound: str = "") -> str | None:
    """Why a POST to the UI must be refused (None when it comes from the UI's own page); see the module
    docstring. `headers` and `form` are mappings with `.get` (Flask's request.headers and request.form);
    `bound`: the `--web-host` the UI listens on (`webdoor.host_allowed`)."""
    host = (headers.get("Host") or "").strip()
    if not host_allowed(host, bound=bound):
        return f"Host {host!r} is not this UI's address (a loopback name or an IP; others in {HOSTS_ENV})"
    own = {f"http://{host}".lower(), f"https://{host}".lower()}
    origin = headers.get("Origin")
    if origin is not None and origin.rstrip("/").lower() not in own:
        return f"cross-site request from {origin!r}"
    referer = headers.get("Referer")
    if origin is None and referer and not any(referer.lower().startswith(o + "/") or referer.lower() == o
                                              for o in own):
        return "cross-site request (Referer)"
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request (Sec-Fetch-Site: {site})"
    given = headers.get(TOKEN_HEADER) or form.get(TOKEN_FIELD) or ""
    if not hmac.compare_digest(str(given).encode(), token.encode()):
        return f"the UI's token is missing or wrong (send the page's llmload-token as {TOKEN_HEADER})"
    return None


def _form_template_args(web_ui: Any, session: Any) -> None:
    """Show this run's values and help in the start form's custom parameters, and the target as host."""
    from llmload.runtime.master.start_form import form_help, form_values, target_text

    def shown(options: dict) -> tuple[dict, str] | None:
        config = session.file_config
        if config is None:
            return None
        values, helps = form_values(config), form_help(config)
        parsed = session.env.parsed_options
        for key in values:
            if key in options:
                given = str(getattr(parsed, key, "") or "")
                options[key] = {**options[key], "default_value": given or values[key], "help_text": helps[key]}
        return options, session.env.host or target_text(config)

    override_start_form(web_ui, shown)


def install_web_ui(environment: Any, session: Any) -> None:
    """Add the LLM tab, its charts and data routes, and the start form's values to `environment.web_ui`."""
    from flask import Response, jsonify, redirect, request

    web_ui = environment.web_ui
    live = LiveSeries(session.config.slo if session.config is not None else None)
    session.live = live
    add_tab(web_ui, "LLM", "llm", LLM_TABLE)
    _form_template_args(web_ui, session)
    script = files("llmload.runtime.locustglue").joinpath("webui_tab.js").read_text(encoding="utf-8")
    token = secrets.token_urlsafe(24)
    bound = str(getattr(web_ui, "host", "") or "")
    web_ui.app.wsgi_app = OwnOriginOnly(web_ui.app.wsgi_app, bound=bound,
                                        say=lambda line: print(line, flush=True))  # Host checked, no CORS

    @web_ui.app.before_request
    def _same_site_posts_only():
        """Refuse a POST that is not the UI page's own (another site's form, a rebound DNS name)."""
        if request.method != "POST":
            return None
        why = check_post(request.headers, request.form, token, bound=bound)
        if why is None:
            return None
        print(f"llmload: refused a web UI request to {request.path}: {why}", flush=True)
        return Response(f"llmload: refused: {why}\n", status=403, mimetype="text/plain")

    @web_ui.app.before_request
    def _check_form():
        """Refuse a start whose rates or SLO are invalid (one line, shown by the form)."""
        if request.method != "POST" or not request.path.endswith("/swarm") or session.file_config is None:
            return None
        from llmload.errors import LLMLoadError
        from llmload.runtime.master.start_form import RATES, SLO_OPTION, apply_form

        try:
            apply_form(session.file_config, request.form.get(RATES, ""), request.form.get(SLO_OPTION, ""),
                       request.form.get("host", ""))
        except LLMLoadError as exc:
            return jsonify({"success": False, "message": f"llmload: {exc}", "host": environment.host})
        return None

    @web_ui.app.after_request
    def _extend(response):  # noqa: ANN001 (Flask's response)
        if not fill_tab(request, response, "llm", lambda: redact(step_rows(session))):
            tag = '<script src="./llmload/tab.js"></script>'
            if splice_into_page(request, response, f'<meta name="llmload-token" content="{token}">' + tag, unless=tag):
                response.headers["Cache-Control"] = "no-store"
        return response

    @web_ui.app.route("/llmload/tab.js")
    @web_ui.auth_required_if_enabled
    def _tab_js():
        return Response(script, mimetype="application/javascript")

    @web_ui.app.route("/llmload/live.json")
    @web_ui.auth_required_if_enabled
    def _live_json():
        return Response(json.dumps(redact(live_state(session, live))), mimetype="application/json")

    @web_ui.app.route("/llmload/steps.json")
    @web_ui.auth_required_if_enabled
    def _steps_json():
        return Response(json.dumps(redact({"steps": step_rows(session)})), mimetype="application/json")

    @web_ui.app.route("/llmload")
    @web_ui.auth_required_if_enabled
    def _page():
        return redirect("./?tab=llm")

    @web_ui.app.route("/llmload/report")
    @web_ui.auth_required_if_enabled
    def _report():
        run_dir = session.run_dir
        path = Path(run_dir) / "report.html" if run_dir is not None else None
        if path is None or not session.finished or not path.exists():
            return Response("no report yet: it is written when the run ends", status=404, mimetype="text/plain")
        return Response(path.read_text(encoding="utf-8"), mimetype="text/html")

    gevent.spawn(_sample, session, live)
