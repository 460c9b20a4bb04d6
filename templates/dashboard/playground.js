{% verbatim %}
// The playground (docs/dashboard.md#playground): everything goes through this gateway's /v1 API.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const script = $("pg-script");
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  let apiKey = null;
  const SHOWN_HEADERS = /^(x-switchboard-|x-request-id$|x-ratelimit-|retry-after$|content-type$)/;

  function state(text) { $("pg-state").textContent = text; }
  function fail(text) { const e = $("pg-error"); e.textContent = text; e.hidden = !text; }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function api(path, init, tries) {
    // A key minted a moment ago reaches every serving process within about a second: retry its 401.
    for (let i = 0; ; i++) {
      const answer = await fetch(path, Object.assign({ credentials: "omit" }, init, {
        headers: Object.assign({ Authorization: "Bearer " + apiKey }, (init || {}).headers || {}),
      }));
      if (answer.status !== 401 || i >= (tries || 0)) return answer;
      await sleep(250);
    }
  }

  async function connect() {
    fail("");
    const pasted = $("pg-key").value.trim();
    if (pasted) {
      apiKey = pasted;
      $("pg-session").textContent = "Using the pasted key.";
    } else {
      const agent = $("pg-agent").value;
      if (!agent) { fail("Pick an agent, or paste an API key."); return; }
      const body = new URLSearchParams({ agent: agent });
      const answer = await fetch(script.dataset.keyUrl, {
        method: "POST", credentials: "same-origin", body: body, headers: { "X-CSRFToken": csrf },
      });
      const data = await answer.json();
      if (!answer.ok) { fail(data.error || ("minting a key failed: HTTP " + answer.status)); return; }
      apiKey = data.key;
      $("pg-session").textContent = "Key " + data.prefix + "… for " + data.agent + ", expires " + new Date(data.expires_at).toUTCString() + ".";
    }
    const models = await api("/v1/models", {}, 12);
    const listed = await models.json();
    if (!models.ok) { fail(listed.error ? listed.error.code + ": " + listed.error.message : "GET /v1/models failed"); return; }
    const select = $("pg-model");
    select.innerHTML = "";
    for (const m of listed.data) {
      const option = document.createElement("option");
      option.value = option.textContent = m.id;
      select.appendChild(option);
    }
    select.disabled = false;
    $("pg-send").disabled = listed.data.length === 0;
    state(listed.data.length + " model(s) this key may use");
  }

  function showHeaders(headers) {
    const body = $("pg-headers").querySelector("tbody");
    body.innerHTML = "";
    const names = [];
    headers.forEach((value, name) => { if (SHOWN_HEADERS.test(name)) names.push([name, value]); });
    names.sort();
    for (const [name, value] of names) {
      const row = body.insertRow();
      row.dataset.header = name;
      row.insertCell().textContent = name;
      row.insertCell().textContent = value;
    }
  }

  function errorText(error) {
    return (error.code || "error") + ": " + (error.message || JSON.stringify(error));
  }

  async function readStream(answer) {
    // SSE frames: `data: {json}` lines, ending with `data: [DONE]` (or one error frame).
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, cut).trim();
        buffered = buffered.slice(cut + 1);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const frame = JSON.parse(data);
        if (frame.error) { fail(errorText(frame.error)); continue; }
        const delta = frame.choices && frame.choices[0] && frame.choices[0].delta;
        if (delta && delta.content) $("pg-answer").textContent += delta.content;
      }
    }
  }

  async function showRecord(requestId) {
    // The usage writer stores the record off the request path, within a few seconds.
    const url = script.dataset.recordUrl.replace("REQUEST_ID", encodeURIComponent(requestId));
    for (let i = 0; i < 40; i++) {
      const answer = await fetch(url, { credentials: "same-origin" });
      if (answer.ok) {
        const r = await answer.json();
        $("pg-cost").textContent = r.cost_usd === null ? "– (the model has no prices)" : "$" + r.cost_usd + " USD";
        $("pg-tokens").textContent = (r.prompt_tokens ?? "–") + " prompt + " + (r.completion_tokens ?? "–") + " completion";
        $("pg-model-used").textContent = (r.model_used || "–") + (r.provider ? " on " + r.provider : "") + " · " + r.attempts + " attempt(s)";
        $("pg-latency").textContent = r.latency_ms + " ms";
        const trail = $("pg-trail");
        trail.innerHTML = "";
        for (const hop of r.trail) {
          const li = document.createElement("li");
          li.dataset.served = hop.served; li.dataset.outcome = hop.outcome;
          li.textContent = hop.model + (hop.provider ? " (" + hop.provider + ")" : "") + ": " + hop.meaning;
          trail.appendChild(li);
        }
        $("pg-record").dataset.loaded = "true";
        return;
      }
      if (answer.status !== 404) return;
      await sleep(250);
    }
    $("pg-cost").textContent = "not recorded yet: see the request log";
  }

  async function send() {
    fail("");
    $("pg-answer").textContent = "";
    $("pg-record").dataset.loaded = "false";
    const stream = $("pg-stream").checked;
    const requestId = "playground-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 8);
    state("sending…");
    $("pg-send").disabled = true;
    try {
      const answer = await api("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Request-Id": requestId },
        body: JSON.stringify({
          model: $("pg-model").value,
          messages: [{ role: "user", content: $("pg-message").value }],
          stream: stream,
        }),
      });
      showHeaders(answer.headers);
      if (!answer.ok) {
        const body = await answer.json().catch(() => ({}));
        fail(body.error ? errorText(body.error) : "HTTP " + answer.status);
      } else if (stream) {
        await readStream(answer);
      } else {
        const body = await answer.json();
        $("pg-answer").textContent = body.choices[0].message.content;
      }
      state("HTTP " + answer.status);
      await showRecord(answer.headers.get("x-request-id") || requestId);
    } catch (err) {
      fail(String(err));
      state("");
    } finally {
      $("pg-send").disabled = false;
    }
  }

  $("pg-connect").addEventListener("click", connect);
  $("pg-send").addEventListener("click", send);
})();
{% endverbatim %}
