{% verbatim %}
// Switchboard live dashboard. Vanilla JS, no build step.
// State arrives per serving process ("state" messages); the page merges them:
// the worst breaker state of a link wins, counters add up. Events ("events")
// feed the list and move a link's state at once, before the next refresh.
(function () {
  "use strict";
  const body = document.body;
  const refreshMs = Math.max(500, parseFloat(body.dataset.refreshS || "1.5") * 1000);
  const STALE_MS = Math.max(15000, refreshMs * 8);
  const RANK = { closed: 0, half_open: 1, open: 2, forced: 3 };
  const LABEL = { closed: "closed", half_open: "half-open", open: "open", forced: "forced open" };
  const processes = new Map(); // process id -> { state, at (ms, performance.now) }
  const events = new Map(); // event id -> event
  const linkRows = new Map(); // link name -> <tr>
  const providerRows = new Map();
  const cooldownDeadlines = new Map(); // link name -> performance.now() deadline
  let socket = null;
  let retryMs = 1000;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const pct = (x) => (x ? (x * 100).toFixed(1) + " %" : "0 %");
  const secs = (s) => {
    const whole = Math.ceil(s); // round once, so 299.4 s reads 5m 00s, never 4m 60s
    return whole >= 60 ? Math.floor(whole / 60) + "m " + String(whole % 60).padStart(2, "0") + "s" : whole + "s";
  };

  // ------------------------------------------------------------------ state merge
  function applyState(state) {
    processes.set(state.process, { state: state, at: performance.now() });
    for (const e of state.feed || []) events.set(e.id, e);
    render();
  }

  function liveProcesses() {
    const now = performance.now();
    let freshest = 0;
    for (const p of processes.values()) freshest = Math.max(freshest, p.at);
    const out = [];
    for (const [id, p] of processes) {
      if (now - p.at > STALE_MS && freshest - p.at > STALE_MS) processes.delete(id);
      else out.push(p);
    }
    return out;
  }

  function merged() {
    const links = new Map();
    const models = new Map();
    const providers = new Map();
    for (const p of liveProcesses()) {
      const s = p.state;
      for (const l of s.links || []) {
        const deadline = p.at + (l.cooldown_s || 0) * 1000;
        const cur = links.get(l.link);
        if (!cur) {
          links.set(l.link, Object.assign({}, l, { deadline: deadline }));
        } else {
          if (RANK[l.state] > RANK[cur.state]) { cur.state = l.state; cur.forced_reason = l.forced_reason; cur.forced_until = l.forced_until; }
          cur.failures = Math.max(cur.failures, l.failures);
          cur.parked_s = Math.max(cur.parked_s || 0, l.parked_s || 0);
          cur.misconfigured = cur.misconfigured || l.misconfigured;
          cur.org_open = Array.from(new Set((cur.org_open || []).concat(l.org_open || [])));
          cur.org_views = mergeOrgViews(cur.org_views, l.org_views);
          cur.deadline = Math.max(cur.deadline, deadline);
        }
      }
      for (const [name, m] of Object.entries(s.models || {})) {
        const cur = models.get(name) || { rps: 0, requests: 0, errors: 0, fallbacks: 0, spark: null };
        cur.rps += m.rps; cur.requests += m.requests; cur.errors += m.errors; cur.fallbacks += m.fallbacks;
        if (m.spark) cur.spark = mergeSpark(cur.spark, m.spark);
        models.set(name, cur);
      }
      for (const pr of s.providers || []) {
        const cur = providers.get(pr.name);
        if (!cur || (pr.checked_at && (!cur.checked_at || pr.checked_at > cur.checked_at))) providers.set(pr.name, pr);
      }
    }
    return { links, models, providers };
  }

  // Org views (docs/resilience.md#org-views): per org, the worst state and the most failures any process saw.
  function mergeOrgViews(cur, more) {
    const byOrg = new Map((cur || []).map((v) => [v.org, Object.assign({}, v)]));
    for (const v of more || []) {
      const seen = byOrg.get(v.org);
      if (!seen) { byOrg.set(v.org, Object.assign({}, v)); continue; }
      if (RANK[v.state] > RANK[seen.state]) seen.state = v.state;
      seen.failures = Math.max(seen.failures, v.failures);
      seen.cooldown_s = Math.max(seen.cooldown_s, v.cooldown_s);
    }
    return Array.from(byOrg.values()).sort((a, b) => (a.org < b.org ? -1 : 1));
  }

  function orgViewsText(views) {
    return (views || []).map((v) => (v.state === "open" ? "open" : v.state.replace("_", "-")) + " for org " + v.org +
      " (" + v.failures + " failure" + (v.failures === 1 ? "" : "s") + (v.state === "open" ? ", " + Math.ceil(v.cooldown_s) + " s left" : "") + ")").join(" · ");
  }

  // Sparklines: per minute, requests and errors add up across processes; the p50 is
  // their request-weighted mean (each process only knows its own histogram).
  function mergeSpark(cur, sp) {
    if (!cur) return { t0: sp.t0, req: sp.req.slice(), err: sp.err.slice(), p50: sp.p50.slice() };
    const shift = Math.round((sp.t0 - cur.t0) / 60); // processes a minute apart: align on the newer
    for (let i = 0; i < cur.req.length; i++) {
      const j = i - shift;
      if (j < 0 || j >= sp.req.length) continue;
      const a = cur.req[i], b = sp.req[j];
      if (sp.p50[j] != null) cur.p50[i] = cur.p50[i] == null || !a ? sp.p50[j] : (cur.p50[i] * a + sp.p50[j] * b) / (a + b);
      cur.req[i] = a + b; cur.err[i] += sp.err[j];
    }
    return cur;
  }

  const SVG = "http://www.w3.org/2000/svg";
  function polyline(values, max, w, h, color) {
    const step = values.length > 1 ? w / (values.length - 1) : w;
    const pts = [];
    values.forEach((v, i) => { if (v != null) pts.push((i * step).toFixed(1) + "," + (h - 1 - (v / (max || 1)) * (h - 2)).toFixed(1)); });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "1.5");
    return line;
  }

  function drawSpark(td, sp) {
    const req = sp ? sp.req : [], err = sp ? sp.err : [], p50 = sp ? sp.p50 : [];
    const total = req.reduce((a, b) => a + b, 0), errors = err.reduce((a, b) => a + b, 0);
    const key = JSON.stringify([req, err, p50]);
    if (td.dataset.drawn === key) return;
    td.dataset.drawn = key;
    td.dataset.requests = String(total);
    td.dataset.errors = String(errors);
    td.textContent = "";
    const w = 90, h = 22;
    const traffic = document.createElementNS(SVG, "svg");
    traffic.setAttribute("class", "spark"); traffic.setAttribute("data-spark", "traffic");
    traffic.setAttribute("width", w); traffic.setAttribute("height", h);
    const max = Math.max(1, ...req);
    traffic.appendChild(polyline(req, max, w, h, "#0969da"));
    traffic.appendChild(polyline(err, max, w, h, "#cf222e"));
    const tips = req.map((r, i) => r + " req, " + err[i] + " err");
    traffic.appendChild(Object.assign(document.createElementNS(SVG, "title"), { textContent: "requests (blue) and 5xx errors (red) per minute, last 15 min: " + tips.join(" · ") }));
    td.appendChild(traffic);
    const lat = document.createElementNS(SVG, "svg");
    lat.setAttribute("class", "spark"); lat.setAttribute("data-spark", "p50");
    lat.setAttribute("width", w); lat.setAttribute("height", h);
    const known = p50.filter((v) => v != null);
    lat.appendChild(polyline(p50, Math.max(1, ...known), w, h, "#1a7f37"));
    const last = known.length ? known[known.length - 1] : null;
    lat.appendChild(Object.assign(document.createElementNS(SVG, "title"), { textContent: "p50 latency per minute" + (last != null ? "; latest " + last.toFixed(0) + " ms" : "") }));
    td.appendChild(lat);
    td.appendChild(el("span", { class: "muted", "data-role": "spark-label" }, " " + total + " req" + (last != null ? " · p50 " + last.toFixed(0) + " ms" : "")));
  }

  // ------------------------------------------------------------------ rendering
  function linkRow(l) {
    const tr = el("tr", { "data-link": l.link, "data-key": JSON.stringify(l.key), "data-provider": l.provider, "data-model": l.model });
    const name = el("td", { class: "link" });
    name.appendChild(el("code", {}, l.link));
    if (l.deployment) { // one of a model's deployments (docs/deployments.md): say which, by what weight
      const d = l.deployment;
      name.appendChild(el("div", { class: "muted", "data-role": "deployment" },
        "deployment " + d.index + "/" + d.of + " of " + l.model + " · " + d.routing + ", weight " + d.weight));
      if (d.overload) { // adaptive concurrency (docs/overload.md): limit, in flight, waiting
        const o = d.overload;
        name.appendChild(el("div", { class: "muted", "data-role": "overload" },
          "limit " + o.limit + " · in flight " + o.inflight + " · queued " + o.queued));
      }
    }
    tr.appendChild(name);
    const state = el("td", { class: "state" });
    state.appendChild(el("span", { class: "badge", "data-role": "state" }));
    state.appendChild(el("div", { class: "muted", "data-role": "forced" }));
    tr.appendChild(state);
    tr.appendChild(el("td", { class: "num", "data-role": "failures" }));
    tr.appendChild(el("td", { class: "num", "data-role": "cooldown" }));
    tr.appendChild(el("td", { "data-role": "provider-health" }));
    tr.appendChild(el("td", { class: "num", "data-role": "rps" }));
    tr.appendChild(el("td", { class: "num", "data-role": "error-rate" }));
    tr.appendChild(el("td", { class: "num", "data-role": "fallback-rate" }));
    tr.appendChild(el("td", { class: "sparks", "data-role": "spark" }));
    const controls = el("td", { class: "controls" });
    controls.appendChild(el("button", { type: "button", "data-action": "reset" }, "Reset"));
    controls.appendChild(document.createTextNode(" "));
    controls.appendChild(el("input", { type: "text", "data-field": "reason", placeholder: "reason", maxlength: "500", "aria-label": "reason for " + l.link }));
    controls.appendChild(el("input", { type: "number", "data-field": "minutes", placeholder: "min", min: "1", step: "1", "aria-label": "minutes for " + l.link }));
    controls.appendChild(el("button", { type: "button", "data-action": "force-open" }, "Force open"));
    if (body.dataset.canControl === "false") {
      controls.querySelectorAll("button, input").forEach((c) => { c.disabled = true; c.title = "viewing only: acting on breakers needs the routing.control_breaker permission"; });
    }
    tr.appendChild(controls);
    return tr;
  }

  function cell(tr, role) { return tr.querySelector('[data-role="' + role + '"]'); }

  function render() {
    const m = merged();
    const tbody = $("link-rows");
    for (const [name, l] of m.links) {
      let tr = linkRows.get(name);
      if (!tr) { tr = linkRow(l); linkRows.set(name, tr); tbody.appendChild(tr); }
      tr.dataset.state = l.state;
      const badge = cell(tr, "state");
      badge.dataset.state = l.state;
      badge.textContent = LABEL[l.state] || l.state;
      cell(tr, "forced").textContent = l.state === "forced" ? (l.forced_reason || "") + (l.forced_until ? " · until " + new Date(l.forced_until * 1000).toLocaleTimeString() : " · until reset") : orgViewsText(l.org_views);
      cell(tr, "failures").textContent = l.failures;
      cooldownDeadlines.set(name, l.state === "closed" ? 0 : l.deadline);
      const pr = m.providers.get(l.provider);
      const health = cell(tr, "provider-health");
      health.textContent = "";
      health.appendChild(el("span", {}, l.provider + " "));
      health.appendChild(el("span", { class: "badge", "data-status": pr ? pr.status : "unknown" }, pr ? pr.status : "unknown"));
      const st = m.models.get(l.model);
      cell(tr, "rps").textContent = st ? st.rps.toFixed(2) : "0.00";
      cell(tr, "error-rate").textContent = st && st.requests ? pct(st.errors / st.requests) : "–";
      cell(tr, "fallback-rate").textContent = st && st.requests ? pct(st.fallbacks / st.requests) : "–";
      if (!l.org) drawSpark(cell(tr, "spark"), st ? st.spark : null);
    }
    for (const [name, tr] of linkRows) {
      if (!m.links.has(name)) { tr.remove(); linkRows.delete(name); cooldownDeadlines.delete(name); }
    }
    $("no-links").hidden = linkRows.size > 0;

    const ptbody = $("provider-rows");
    for (const [name, pr] of m.providers) {
      let tr = providerRows.get(name);
      if (!tr) {
        tr = el("tr", { "data-provider": name });
        tr.appendChild(el("td", {}, name));
        const st = el("td"); st.appendChild(el("span", { class: "badge", "data-role": "status" })); tr.appendChild(st);
        tr.appendChild(el("td", { class: "num", "data-role": "latency" }));
        tr.appendChild(el("td", { "data-role": "checked" }));
        tr.appendChild(el("td", { class: "muted", "data-role": "detail" }));
        providerRows.set(name, tr); ptbody.appendChild(tr);
      }
      tr.dataset.status = pr.status;
      const badge = cell(tr, "status"); badge.dataset.status = pr.status; badge.textContent = pr.status;
      cell(tr, "latency").textContent = pr.latency_ms == null ? "–" : pr.latency_ms.toFixed(1) + " ms";
      cell(tr, "checked").textContent = pr.checked_at ? new Date(pr.checked_at).toLocaleTimeString() : "never";
      cell(tr, "detail").textContent = pr.detail || "";
    }
    for (const [name, tr] of providerRows) if (!m.providers.has(name)) { tr.remove(); providerRows.delete(name); }

    renderFeed();
    $("processes").textContent = processes.size + (processes.size === 1 ? " process" : " processes");
    tick();
  }

  function describe(e) {
    switch (e.kind) {
      case "breaker": return "breaker " + e.link + ": " + (LABEL[e.old] || e.old) + " → " + (LABEL[e.new] || e.new);
      case "fallback": return "fallback " + e.from_model + " → " + e.to_model + " (" + e.reason + ")";
      case "probe": return "probe " + e.provider + ": " + e.status + (e.latency_ms != null ? " in " + e.latency_ms.toFixed(1) + " ms" : "") + (e.detail ? " — " + e.detail : "");
      case "control": return e.action.replace("_", " ") + " " + e.link + " by " + e.user + (e.reason ? " — " + e.reason : "");
      default: return e.kind;
    }
  }

  function renderFeed() {
    const list = Array.from(events.values()).sort((a, b) => b.at - a.at).slice(0, 80);
    const keep = new Set(list.map((e) => e.id));
    for (const id of Array.from(events.keys())) if (!keep.has(id)) events.delete(id);
    const ol = $("feed");
    ol.textContent = "";
    for (const e of list) {
      const li = el("li", { "data-kind": e.kind, "data-event": e.id });
      if (e.link) li.dataset.link = e.link;
      li.appendChild(el("time", { datetime: new Date(e.at * 1000).toISOString() }, new Date(e.at * 1000).toLocaleTimeString()));
      li.appendChild(el("span", {}, describe(e)));
      ol.appendChild(li);
    }
  }

  function tick() {
    const now = performance.now();
    for (const [name, tr] of linkRows) {
      const left = ((cooldownDeadlines.get(name) || 0) - now) / 1000;
      cell(tr, "cooldown").textContent = left > 0 ? secs(left) : "–";
    }
  }

  function applyEvents(msg) {
    const proc = processes.get(msg.process);
    for (const e of msg.events || []) {
      events.set(e.id, e);
      if (e.kind === "breaker" && proc) {
        for (const l of proc.state.links || []) {
          if (l.link === e.link && l.state !== "forced") { l.state = e.new; if (e.new === "closed") { l.failures = 0; l.cooldown_s = 0; } }
        }
      }
    }
    render();
  }

  // ------------------------------------------------------------------ socket + controls
  function flash(ok, text) {
    const f = $("flash");
    f.hidden = false; f.dataset.ok = String(ok); f.textContent = text;
  }

  function setConn(status, text) { const c = $("conn-status"); c.dataset.status = status; c.textContent = text; }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + body.dataset.wsPath);
    setConn("connecting", "connecting…");
    socket.onopen = () => { retryMs = 1000; setConn("open", "live"); };
    socket.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (err) { return; }
      if (msg.type === "state") applyState(msg);
      else if (msg.type === "events") applyEvents(msg);
      else if (msg.type === "ack") flash(msg.ok, msg.message || (msg.ok ? "done" : "failed"));
    };
    socket.onclose = (ev) => {
      if (ev.code === 4403) { setConn("closed", "not allowed: sign in as staff"); return; }
      setConn("closed", "disconnected; retrying");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  $("link-rows").addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (!button) return;
    const tr = button.closest("tr[data-link]");
    if (!socket || socket.readyState !== WebSocket.OPEN) { flash(false, "not connected; wait for the page to reconnect"); return; }
    const msg = { action: button.dataset.action, key: JSON.parse(tr.dataset.key) };
    if (msg.action === "force-open") {
      msg.reason = tr.querySelector('[data-field="reason"]').value;
      msg.minutes = tr.querySelector('[data-field="minutes"]').value || null;
    }
    socket.send(JSON.stringify(msg));
  });

  applyState(JSON.parse($("initial-state").textContent));
  setInterval(tick, 250);
  setInterval(render, Math.max(refreshMs, 1000));
  connect();
})();
{% endverbatim %}
