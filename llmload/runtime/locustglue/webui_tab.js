/* llmload's LLM tab in Locust's web UI: live SVG charts above the step table, the run's status and,
   when it ends, its verdict, answer and report link; a header box (step, in flight, pool).
   Loaded by the index page (llmload.runtime.locustglue.webui); data from ./llmload/live.json every second.
   No external resources: plain DOM and inline SVG. */
(function () {
  "use strict";
  // The page's own POSTs (Start, Stop, Reset) carry this UI's token: llmload.runtime.locustglue.webui refuses any
  // POST without it, so another site cannot start a run here (it can neither read the page nor set a header).
  (function () {
    var meta = document.querySelector('meta[name="llmload-token"]');
    if (!meta || !window.fetch || window.fetch.llmloadToken) return;
    var token = meta.getAttribute("content");
    var original = window.fetch;
    var wrapped = function (input, init) {
      var isRequest = typeof Request !== "undefined" && input instanceof Request;
      var method = String((init && init.method) || (isRequest ? input.method : "GET")).toUpperCase();
      var url = new URL(isRequest ? input.url : String(input), window.location.href);
      if (method === "POST" && url.origin === window.location.origin) {
        if (isRequest && !init) {
          var headers = new Headers(input.headers);
          headers.set("X-Llmload-Token", token);
          input = new Request(input, { headers: headers });
        } else {
          init = Object.assign({}, init || {});
          var own = new Headers(init.headers || (isRequest ? input.headers : undefined));
          own.set("X-Llmload-Token", token);
          init.headers = own;
        }
      }
      return original.call(this, input, init);
    };
    wrapped.llmloadToken = true;
    window.fetch = wrapped;
  })();
  var POLL_MS = 1000;
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = { p50: "#2c7fb8", p95: "#d95f02", slo: "#c0392b", offered: "#9a9a9a", achieved: "#2c7fb8",
                 goodput: "#1a9850", running: "#2c7fb8", waiting: "#d95f02", kv: "#7b3294", gpu: "#525252" };
  var VERDICT_COLORS = { pass: "#1a9850", fail: "#c0392b", running: "#2c7fb8", invalid: "#b8860b",
                         insufficient: "#b8860b", inconclusive: "#7b3294" };
  var state = null;
  var panel = null;
  var formOpened = false;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function verdictColor(v) {
    if (!v) return "#888";
    var key = String(v).split(" ")[0];
    return VERDICT_COLORS[key] || "#888";
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    return Number(v).toFixed(digits === undefined ? 0 : digits);
  }
  function clock(s) {
    s = Math.max(0, Math.round(s));
    var m = Math.floor(s / 60), r = s % 60;
    return m + ":" + (r < 10 ? "0" : "") + r;
  }
  // the smallest tick step of 1, 2 or 5 x 10^k with at most `count` + 1 steps up to `v` (never 2.5: its
  // ticks read 0, 3, 5, 8, 10 once rounded), and the axis top, a whole number of steps
  function niceTicks(v, count) {
    if (!(v > 0)) v = 1;
    count = count || 4;
    var p = Math.pow(10, Math.floor(Math.log10(v / count))), step = 10 * p;
    [1, 2, 5].some(function (m) { if (Math.ceil(v / (m * p) - 1e-9) <= count + 1) { step = m * p; return true; } return false; });
    var digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    var top = Math.ceil(v / step - 1e-9) * step, ticks = [];
    for (var k = 0; k * step <= top + step / 2; k++) ticks.push(Number((k * step).toFixed(digits)));
    return { step: step, max: ticks[ticks.length - 1], ticks: ticks, digits: digits };
  }
  function maxOf(arrays) {
    var m = 0;
    arrays.forEach(function (a) { (a || []).forEach(function (v) { if (v !== null && v > m) m = v; }); });
    return m;
  }

  /* ---------------------------------------------------------------- one chart */
  // spec: {id, title, unit, xmax, lines: [{name, color, xs, ys, dash, right}], hlines: [{y, label}],
  //        right: {max, unit, scale} | null}
  function drawChart(card, spec) {
    var svg = card.querySelector("svg");
    var W = Math.max(320, card.clientWidth - 4), H = 210;
    var L = 52, R = spec.right ? 46 : 14, T = 26, B = 26;
    var pw = W - L - R, ph = H - T - B;
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var left = spec.lines.filter(function (l) { return !l.right; });
    var yticks = niceTicks(1.1 * Math.max(maxOf(left.map(function (l) { return l.ys; })),
      Math.max.apply(null, [0].concat((spec.hlines || []).map(function (h) { return h.y; })))), 4);
    var ymax = yticks.max;
    var xmax = Math.max(spec.xmax, 1);
    function X(t) { return L + pw * t / xmax; }
    function Y(v) { return T + ph - ph * v / ymax; }
    function YR(v) { return T + ph - ph * v / spec.right.max; }
    // step windows and boundaries, with each step's label and verdict on top
    ((state && state.steps) || []).forEach(function (s) {
      if (s.start === null) return;
      var ws = s.window_start !== null ? s.window_start : s.start;
      var we = s.window_end !== null ? Math.min(s.window_end, xmax) : xmax;
      var color = verdictColor(s.verdict);
      if (we > ws) svg.appendChild(svgEl("rect", { x: X(ws), y: T, width: Math.max(0, X(we) - X(ws)), height: ph,
        fill: color, "fill-opacity": 0.07, "class": "llm-window" }));
      svg.appendChild(svgEl("line", { x1: X(s.start), x2: X(s.start), y1: T - 4, y2: T + ph, stroke: color,
        "stroke-dasharray": "3 3", "stroke-opacity": 0.8, "class": "llm-step-line" }));
      var label = svgEl("text", { x: X(s.start) + 3, y: T - 8, "font-size": 10, fill: color, "class": "llm-step-label" },
        s.label + (s.verdict ? " " + s.verdict : ""));
      svg.appendChild(label);
    });
    // axes and ticks
    var axis = "currentColor";
    svg.appendChild(svgEl("line", { x1: L, x2: L + pw, y1: T + ph, y2: T + ph, stroke: axis, "stroke-opacity": 0.5 }));
    svg.appendChild(svgEl("line", { x1: L, x2: L, y1: T, y2: T + ph, stroke: axis, "stroke-opacity": 0.5 }));
    yticks.ticks.forEach(function (v) {
      var y = Y(v);
      svg.appendChild(svgEl("line", { x1: L, x2: L + pw, y1: y, y2: y, stroke: axis, "stroke-opacity": 0.1 }));
      svg.appendChild(svgEl("text", { x: L - 5, y: y + 3, "font-size": 10, "text-anchor": "end", fill: axis,
        "class": "llm-ytick" }, fmt(v, yticks.digits)));
    });
    if (spec.right) {
      for (var i = 0; i <= 4; i++) {  // 0, 25, 50, 75, 100 %
        svg.appendChild(svgEl("text", { x: L + pw + 5, y: YR(spec.right.max * i / 4) + 3, "font-size": 10, fill: COLORS.kv },
          fmt(spec.right.max * i / 4 * spec.right.scale) + spec.right.unit));
      }
    }
    var step = Math.max(1, niceTicks(xmax, 6).step);  // whole seconds
    for (var t = 0; t <= xmax + 1e-9; t += step) {
      svg.appendChild(svgEl("text", { x: X(t), y: T + ph + 15, "font-size": 10, "text-anchor": "middle", fill: axis }, clock(t)));
    }
    svg.appendChild(svgEl("text", { x: 4, y: 12, "font-size": 10, fill: axis }, spec.unit));
    // SLO lines
    (spec.hlines || []).forEach(function (h) {
      svg.appendChild(svgEl("line", { x1: L, x2: L + pw, y1: Y(h.y), y2: Y(h.y), stroke: COLORS.slo, "stroke-width": 1.5,
        "stroke-dasharray": "6 4", "class": "llm-slo" }));
      svg.appendChild(svgEl("text", { x: L + pw - 4, y: Y(h.y) - 4, "font-size": 10, "text-anchor": "end", fill: COLORS.slo }, h.label));
    });
    // series (a gap where a value is missing)
    var legend = card.querySelector(".llm-legend");
    legend.textContent = "";
    spec.lines.forEach(function (line) {
      var d = "", pen = false, last = null, ys = line.ys || [], xs = line.xs || [];
      for (var k = 0; k < ys.length; k++) {
        if (ys[k] === null || ys[k] === undefined) { pen = false; continue; }
        var yy = line.right ? YR(ys[k]) : Y(ys[k]);
        d += (pen ? "L" : "M") + X(xs[k]).toFixed(1) + " " + yy.toFixed(1);
        pen = true; last = ys[k];
      }
      if (d) svg.appendChild(svgEl("path", { d: d, fill: "none", stroke: line.color, "stroke-width": line.width || 1.8,
        "stroke-dasharray": line.dash || "", "stroke-opacity": line.opacity || 1, "stroke-linejoin": "round",
        "class": "llm-series", "data-name": line.name }));
      if (line.markers) {  // a dot per second: at low rates most seconds stand alone, and a line needs two
        var dots = ys.filter(function (v) { return v !== null && v !== undefined; }).length;
        for (var m = 0; m < ys.length; m++) {
          if (ys[m] === null || ys[m] === undefined) continue;
          var alone = (m === 0 || ys[m - 1] === null || ys[m - 1] === undefined) &&
            (m === ys.length - 1 || ys[m + 1] === null || ys[m + 1] === undefined);
          if (dots > 300 && !alone) continue;  // a long run: dots only where no line is drawn
          svg.appendChild(svgEl("circle", { cx: X(xs[m]).toFixed(1), cy: Y(ys[m]).toFixed(1), r: 2.4,
            fill: line.color, "class": "llm-marker", "data-name": line.name }));
        }
      }
      var item = el("span", { "class": "llm-legend-item" });
      var swatch = el("span", { "class": "llm-swatch" });
      swatch.style.background = line.color;
      swatch.style.opacity = line.opacity || 1;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(line.name + (line.format === null ? "" :
        " " + (line.format ? line.format(last) : fmt(last, 1)))));
      legend.appendChild(item);
    });
  }

  /* ---------------------------------------------------------------- the panel */
  function buildPanel() {
    var p = el("div", { id: "llmload-panel" });
    var style = el("style");
    style.textContent =
      "#llmload-panel{margin:8px 0 16px 0;font-size:14px}" +
      "#llmload-panel .llm-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:12px}" +
      "#llmload-panel .llm-card{border:1px solid rgba(128,128,128,.35);border-radius:6px;padding:8px}" +
      "#llmload-panel .llm-card h3{font-size:14px;margin:0 0 4px 0;font-weight:600}" +
      "#llmload-panel .llm-legend{font-size:12px;display:flex;flex-wrap:wrap;gap:12px;margin-top:2px}" +
      "#llmload-panel .llm-swatch{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}" +
      "#llmload-panel .llm-status{margin:4px 0 10px 0}" +
      "#llmload-panel .llm-result{border:2px solid #888;border-radius:6px;padding:10px 14px;margin-bottom:12px}" +
      "#llmload-panel .llm-result .llm-verdict{font-weight:700;font-size:16px}" +
      "#llmload-panel .llm-result a{font-weight:600;color:#3d9be9}" +
      "#llmload-panel .llm-note{font-size:12px;opacity:.75;margin-top:8px}" +
      "#llmload-header *{text-transform:none;white-space:nowrap}";
    p.appendChild(style);
    p.appendChild(el("div", { "class": "llm-result", id: "llmload-result", hidden: "" }));
    p.appendChild(el("div", { "class": "llm-status", id: "llmload-status" }, "waiting for the run..."));
    var grid = el("div", { "class": "llm-grid" });
    [["ttft", "TTFT per second: p50 and p95 of the requests sent that second"],
     ["tpot", "TPOT per second: p50 and p95 (time per output token after the first)"],
     ["rates", "Offered vs achieved vs goodput (req/s, per second)"],
     ["server", "Server: running and waiting requests, KV cache usage"],
     ["gpu", "GPU memory used"]].forEach(function (c) {
      var card = el("div", { "class": "llm-card", id: "llmload-chart-" + c[0] });
      card.appendChild(el("h3", {}, c[1]));
      card.appendChild(svgEl("svg", { "class": "llm-chart", role: "img", "aria-label": c[1] }));
      card.appendChild(el("div", { "class": "llm-legend" }));
      grid.appendChild(card);
    });
    p.appendChild(grid);
    p.appendChild(el("div", { "class": "llm-note" },
      "Time axis: m:ss since the run's first arrival. Shaded: each step's measurement window, labelled with its " +
      "verdict. Dashed red: the SLO thresholds. " +
      "A request counts when it finishes, so the last seconds fill in as requests in flight end. " +
      "The table below has each step's numbers over its window (the report recomputes them from the raw records)."));
    return p;
  }

  function statusText(s) {
    var c = s.current;
    if (s.state === "running" && c) {
      return "Running step " + c.label + " (" + c.index + " of " + c.count + ")" +
        (c.elapsed_s !== null ? ", " + fmt(c.elapsed_s) + " s" + (c.duration_s ? " of " + fmt(c.duration_s) + " s" : "") : "") +
        (c.in_flight !== null ? "; in flight (due, not finished): " + c.in_flight : "") +
        ". Open loop: arrivals follow the plan; Locust's Users (" + s.pool + ") are the client's pool of slots.";
    }
    return {
      ready: "Ready: press Start (the form shows this run's steps, rates and SLO, and lets you edit them).",
      preflight: "Pre-flight checks (server reachable, model, quality cases)...",
      running: "Running...",
      finishing: "The last step has drained: merging records and writing the report...",
      finished: "The run has ended.",
      failed: "The run did not finish: see the terminal.",
      stopped: "Stopped."
    }[s.state] || s.state;
  }

  // the result box is rebuilt only when the result changed: rebuilt on every poll, its report link was
  // a new element each second, and a click whose press and release straddled a rebuild opened nothing
  var shownResult = null;
  function renderResult(s) {
    var box = panel.querySelector("#llmload-result");
    var r = s.result;
    var key = JSON.stringify(r || null);
    if (key === shownResult) return;
    shownResult = key;
    if (!r) { box.hidden = true; return; }
    box.hidden = false;
    box.style.borderColor = verdictColor(r.verdict);
    box.textContent = "";
    var head = el("div", { "class": "llm-verdict", id: "llmload-verdict" }, "Verdict: " + (r.verdict || "unknown").toUpperCase());
    head.style.color = verdictColor(r.verdict);
    box.appendChild(head);
    var list = el("ul", { id: "llmload-answer" });
    (r.sentences || []).forEach(function (t) { list.appendChild(el("li", {}, t)); });
    box.appendChild(list);
    if (r.report_url) {
      var a = el("a", { href: r.report_url, target: "_blank", rel: "noopener", id: "llmload-report-link" },
        "Open the report (report.html)");
      box.appendChild(a);
    }
    box.appendChild(el("div", { "class": "llm-note" }, "Run directory: " + r.run_dir));
  }

  function drawAll(s) {
    var ser = s.series || {}, xs = ser.t || [], sv = ser.server || { t: [] };
    var xmax = Math.max(xs.length ? xs[xs.length - 1] + 1 : 0, sv.t.length ? sv.t[sv.t.length - 1] : 0);
    (s.steps || []).forEach(function (st) {
      if (st.window_end !== null && st.status !== "not_run") xmax = Math.max(xmax, st.window_end);
    });
    function ms(v) { return fmt(v) + " ms"; }
    function sloLines(key) {
      return (s.slo[key] || []).map(function (t) { return { y: t.ms, label: "SLO p" + t.p + " " + t.ms + " ms" }; });
    }
    ["ttft", "tpot"].forEach(function (key) {
      drawChart(panel.querySelector("#llmload-chart-" + key), { unit: "ms", xmax: xmax, hlines: sloLines(key), lines: [
        { name: "p50", color: COLORS.p50, xs: xs, ys: ser[key + "_p50_ms"], format: ms, markers: true },
        { name: "p95", color: COLORS.p95, xs: xs, ys: ser[key + "_p95_ms"], format: ms, markers: true }] });
    });
    // drawn wide to narrow, so equal series stay visible: offered (wide, pale), achieved, goodput (dashed)
    drawChart(panel.querySelector("#llmload-chart-rates"), { unit: "req/s", xmax: xmax, lines: [
      { name: "offered (planned arrivals)", color: COLORS.offered, xs: xs, ys: ser.offered, width: 7, opacity: 0.45,
        format: null },
      { name: "achieved (sent)", color: COLORS.achieved, xs: xs, ys: ser.achieved, width: 2.5, format: null },
      { name: "goodput (met every SLO)", color: COLORS.goodput, xs: xs, ys: ser.goodput, dash: "6 3", width: 2,
        format: null }] });
    var kv = (sv.kv_usage || []).map(function (v) { return v === null ? null : v; });
    var hasKv = kv.some(function (v) { return v !== null; });
    var serverLines = [
      { name: "running", color: COLORS.running, xs: sv.t, ys: sv.running },
      { name: "waiting", color: COLORS.waiting, xs: sv.t, ys: sv.waiting }];
    if (hasKv) serverLines.push({ name: "KV usage", color: COLORS.kv, xs: sv.t, ys: kv, right: true, dash: "2 2",
      format: function (v) { return fmt(v * 100) + "%"; } });
    drawChart(panel.querySelector("#llmload-chart-server"), { unit: "requests", xmax: xmax, lines: serverLines,
      right: hasKv ? { max: 1, unit: "%", scale: 100 } : null });
    var gpu = (sv.gpu_memory_used_bytes || []).map(function (v) { return v === null ? null : v / Math.pow(1024, 3); });
    var gpuCard = panel.querySelector("#llmload-chart-gpu");
    var hasGpu = gpu.some(function (v) { return v !== null; });
    gpuCard.hidden = !hasGpu;
    if (hasGpu) drawChart(gpuCard, { unit: "GiB", xmax: xmax, lines: [
      { name: "used", color: COLORS.gpu, xs: sv.t, ys: gpu, format: function (v) { return fmt(v, 2) + " GiB"; } }] });
  }

  /* ---------------------------------------------------------------- placement in Locust's page */
  function stepTable() {
    var heads = document.querySelectorAll("th");
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent.trim() === "Offered req/s") {
        return heads[i].closest(".MuiTableContainer-root") || heads[i].closest("table");
      }
    }
    return null;
  }

  function placePanel() {
    var onTab = new URLSearchParams(window.location.search).get("tab") === "llm";
    var table = onTab ? stepTable() : null;
    if (!table) {
      if (panel && panel.parentNode) panel.parentNode.removeChild(panel);
      return false;
    }
    if (!panel) panel = buildPanel();
    if (table.previousSibling !== panel) table.parentNode.insertBefore(panel, table);
    return true;
  }

  function headerBox(s) {
    var header = document.querySelector("header");
    if (!header) return;
    var labels = header.querySelectorAll("p, span, h6, div");
    var rps = null, users = null;
    for (var i = 0; i < labels.length; i++) {
      var text = labels[i].childNodes.length === 1 && labels[i].textContent.trim();
      if (text === "RPS" && !rps) rps = labels[i];
      if (text === "Users" && !users) users = labels[i];
    }
    if (users) {
      users.parentNode.setAttribute("title", "Locust's users are llmload's pool of " + (s.pool || "") +
        " client slots (the concurrency cap), not load: arrivals follow the plan (open loop)");
      users.textContent = "Pool";
      users.style.whiteSpace = "nowrap";
    }
    if (!rps) return;
    var stat = rps.parentNode, box = document.getElementById("llmload-header");
    // once the run is over Locust keeps its last RPS on show beside STOPPED: a rate of nothing
    stat.style.display = ["finishing", "finished", "failed", "stopped"].indexOf(s.state) >= 0 ? "none" : "";
    if (!box) {
      box = stat.cloneNode(true);
      box.id = "llmload-header";
      box.removeAttribute("title");
      box.style.display = "";
    }
    if (box.nextSibling !== stat) stat.parentNode.insertBefore(box, stat);
    var parts = box.children;
    var c = s.current, value;
    if (s.state === "running" && c) value = c.label + " (" + c.index + "/" + c.count + ")" +
      (c.in_flight !== null ? " · " + c.in_flight + " in flight" : "");
    else value = s.result ? "done: " + (s.result.verdict || "?") : s.state;
    if (parts.length >= 2) { parts[0].textContent = "LLM step"; parts[1].textContent = value; }
    else box.textContent = "LLM step " + value;
    box.setAttribute("title", "llmload: the running step and its requests due but not finished; RPS counts each request once (E2E)");
  }

  // Locust's Statistics tab calls the mean response_length "Average size (bytes)": llmload reports each
  // request's output tokens there, so the column says so
  var SIZE_LABEL = "Average size (bytes)", TOKENS_LABEL = "Average output tokens";
  var TTFA_TITLE = "TTFA p95 ms";  // webui.LLM_TABLE's title
  function relabelSize() {
    var nodes = document.querySelectorAll("th, th *");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].childElementCount === 0 && nodes[i].textContent.trim() === SIZE_LABEL) {
        nodes[i].textContent = TOKENS_LABEL;
        nodes[i].setAttribute("title", "llmload reports each request's output tokens as its response size");
      }
    }
  }

  function hideEmptyColumn(title) {
    // a column no step fills (TTFA p95 of a run without reasoning: it equals TTFT) is hidden, not a column of dashes
    var heads = document.querySelectorAll("th");
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent.trim() !== title) continue;
      var row = heads[i].parentNode, index = Array.prototype.indexOf.call(row.children, heads[i]);
      var body = heads[i].closest("table").querySelectorAll("tbody tr"), cells = [heads[i]], empty = true;
      for (var r = 0; r < body.length; r++) {
        var cell = body[r].children[index];
        if (!cell) continue;
        cells.push(cell);
        var text = cell.textContent.trim();
        if (text !== "" && text !== "-" && text !== "null") empty = false;
      }
      for (var c = 0; c < cells.length; c++) cells[c].style.display = empty ? "none" : "";
    }
  }

  function openForm() {
    // the start form: open "Custom parameters" once, so the run's steps, rates and SLO are in view
    if (formOpened) return;
    var nodes = document.querySelectorAll(".MuiAccordionSummary-root");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].textContent.indexOf("Custom parameters") >= 0) {
        formOpened = true;
        if (nodes[i].getAttribute("aria-expanded") !== "true") nodes[i].click();
      }
    }
  }

  function render() {
    if (!state) return;
    try { headerBox(state); relabelSize(); hideEmptyColumn(TTFA_TITLE); }
    catch (e) { /* the header is Locust's: never break the page */ }
    if (state.state === "ready") openForm();
    if (!placePanel()) return;
    panel.querySelector("#llmload-status").textContent = statusText(state);
    renderResult(state);
    drawAll(state);
  }

  function poll() {
    fetch("./llmload/live.json", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (d) { state = d; render(); })
      .catch(function () { /* the run may be restarting: try again */ });
  }
  window.llmloadLive = function () { return state; };
  window.llmloadNiceTicks = niceTicks;  // for the tests
  poll();
  setInterval(poll, POLL_MS);
  setInterval(function () { if (state) { try { hideEmptyColumn(TTFA_TITLE);
    if (placePanel() && !panel.querySelector("svg").firstChild) render(); } catch (e) { /* ignore */ } } }, 300);
  window.addEventListener("resize", render);
})();
