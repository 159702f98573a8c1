"""The live LLM view in Locust's web UI: an "LLM" tab with the step table, and a `/llmload` page.

- The tab: `web_ui.template_args["extended_tabs" / "extended_tables"]` plus an `after_request` hook
  that adds `extended_stats` to `/stats/requests` (what the UI polls every few seconds): one row per
  step with offered and achieved rate, TTFT / TPOT / E2E p95, goodput, client wait, server waiting and
  the verdict so far (the running step shows its numbers so far, verdict `running`: its offered and
  achieved rate over the elapsed window, its mean server waiting from the collector's samples).
- The page `/llmload`: live SVG charts of TTFT p95, goodput and server waiting per step, drawn by a
  few lines of inline JavaScript from `/llmload/steps.json` (no CDN, works offline).

A run started from the UI takes its shape and SLO from `--llmload-config`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from llmload.runtime.table import quick_stats

__all__ = ["LLM_TABLE", "install_web_ui", "step_rows"]

#: the tab's columns: (key, title)
LLM_TABLE = (
    ("label", "Step"), ("offered_rate", "Offered req/s"), ("achieved_rate", "Achieved req/s"),
    ("ttft_p95_ms", "TTFT p95 ms"), ("tpot_p95_ms", "TPOT p95 ms"), ("e2e_p95_ms", "E2E p95 ms"),
    ("goodput", "Goodput req/s"), ("client_wait_p95_ms", "Client wait p95 ms"),
    ("server_waiting", "Server waiting"), ("verdict", "Verdict"),
)


def _num(value: Any, scale: float = 1.0, digits: int = 2) -> float | None:
    if value is None:
        return None
    try:
        x = float(value) * scale
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else round(x, digits)


def step_rows(session: Any) -> list[dict]:
    """One row per step of the current run (judged steps from the live table, the running one so far)."""
    controller = getattr(session, "controller", None)
    if controller is None:
        return []
    judged = {r["label"]: r for r in controller.table_rows}
    rows = []
    for step in controller.plan.steps:
        label = step["label"]
        row = judged.get(label)
        if row is None and step.get("status") == "running":
            stats = quick_stats(controller.rows.get(label, []))
            offered, achieved = controller.running_rates(label, step)
            row = {"label": label, **stats, "verdict": "running", "offered_rate": offered,
                   "achieved_rate": achieved, "server_waiting": controller.step_waiting(step)}
        if row is None:
            rows.append({"label": label, "verdict": step.get("status") or "not_run"})
            continue
        rows.append({
            "label": label, "offered_rate": _num(row.get("offered_rate")),
            "achieved_rate": _num(row.get("achieved_rate")),
            "ttft_p95_ms": _num(row.get("ttft_p95_s"), 1000, 0), "tpot_p95_ms": _num(row.get("tpot_p95_s"), 1000, 0),
            "e2e_p95_ms": _num(row.get("e2e_p95_s"), 1000, 0), "goodput": _num(row.get("goodput")),
            "client_wait_p95_ms": _num(row.get("client_wait_p95_s"), 1000, 0),
            "server_waiting": _num(row.get("server_waiting"), 1, 1), "verdict": row.get("verdict"),
        })
    return rows


def install_web_ui(environment: Any, session: Any) -> None:
    """Add the LLM tab and the `/llmload` page to `environment.web_ui`."""
    from flask import Response, request

    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": "llm"}]
    web_ui.template_args["extended_tables"] = [
        {"key": "llm", "structure": [{"key": k, "title": t} for k, t in LLM_TABLE]}]

    @web_ui.app.after_request
    def _extend_stats(response):  # noqa: ANN001 (Flask's response)
        if request.path != "/stats/requests" or not response.is_json:
            return response
        data = response.get_json() or {}
        data["extended_stats"] = [{"key": "llm", "data": step_rows(session)}]
        response.set_data(json.dumps(data))
        return response

    @web_ui.app.route("/llmload/steps.json")
    def _steps_json():
        return Response(json.dumps({"steps": step_rows(session)}), mimetype="application/json")

    @web_ui.app.route("/llmload")
    def _page():
        return Response(PAGE, mimetype="text/html")


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>llmload live</title>
<style>body{font-family:sans-serif;margin:1.5em;color:#222}svg{border:1px solid #ccc;margin:.5em 0}
.c{display:inline-block;margin-right:1.5em}h2{font-size:1em;margin:.2em 0}</style></head><body>
<h1>llmload: live steps</h1><p id="status">waiting for the first step...</p>
<div class="c"><h2>TTFT p95 (ms)</h2><svg id="ttft" width="420" height="200"></svg></div>
<div class="c"><h2>Goodput (req/s)</h2><svg id="goodput" width="420" height="200"></svg></div>
<div class="c"><h2>Server waiting (requests)</h2><svg id="waiting" width="420" height="200"></svg></div>
<script>
function draw(id, steps, key){
  var svg=document.getElementById(id), W=420, H=200, P=36, pts=[], max=0;
  steps.forEach(function(s,i){var v=s[key]; if(v!==null&&v!==undefined){pts.push([i,v]); max=Math.max(max,v);}});
  var n=Math.max(steps.length-1,1), out='';
  if(max<=0) max=1;
  out+='<line x1="'+P+'" y1="'+(H-P)+'" x2="'+(W-8)+'" y2="'+(H-P)+'" stroke="#999"/>';
  out+='<line x1="'+P+'" y1="8" x2="'+P+'" y2="'+(H-P)+'" stroke="#999"/>';
  out+='<text x="2" y="14" font-size="10">'+max.toFixed(1)+'</text>';
  var path='';
  pts.forEach(function(p,j){var x=P+(W-P-8)*p[0]/n, y=(H-P)-(H-P-8)*p[1]/max;
    path+=(j?'L':'M')+x.toFixed(1)+' '+y.toFixed(1);
    var s=steps[p[0]], col=s.verdict&&s.verdict.indexOf('fail')===0?'#c0392b':(s.verdict==='pass'?'#27ae60':'#2c7fb8');
    out+='<circle cx="'+x.toFixed(1)+'" cy="'+y.toFixed(1)+'" r="4" fill="'+col+'"><title>'+s.label+': '+p[1]+'</title></circle>';});
  if(path) out='<path d="'+path+'" fill="none" stroke="#2c7fb8" stroke-width="2"/>'+out;
  steps.forEach(function(s,i){var x=P+(W-P-8)*i/n;
    out+='<text x="'+x.toFixed(1)+'" y="'+(H-P+14)+'" font-size="9" text-anchor="middle">'+s.label+'</text>';});
  svg.innerHTML=out;
}
function poll(){
  fetch('/llmload/steps.json').then(function(r){return r.json();}).then(function(d){
    var steps=d.steps||[];
    document.getElementById('status').textContent=steps.length?steps.map(function(s){return s.label+': '+s.verdict;}).join(' | '):'no run yet';
    draw('ttft',steps,'ttft_p95_ms'); draw('goodput',steps,'goodput'); draw('waiting',steps,'server_waiting');
  }).catch(function(){});
}
poll(); setInterval(poll, 2000);
</script></body></html>
"""
