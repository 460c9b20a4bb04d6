{% verbatim %}
// Switchboard analytics: four uPlot charts from the page's aggregated series (no extra request).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("analytics-data").textContent);
  const x = data.buckets;
  const charts = {};
  window.switchboardCharts = charts; // for the browser tests and the curious

  const COLORS = { requests: "#0969da", errors: "#cf222e", client: "#bf8700", fallbacks: "#8250df",
                   p50: "#1a7f37", p95: "#bf8700", cost: "#0969da", prompt: "#0969da", completion: "#8250df" };
  const fmtTime = data.step_s >= 86400 ? "{YYYY}-{MM}-{DD}" : "{HH}:{mm}";

  // Points a line cannot draw: a value whose neighbours are gaps (a week whose traffic all fell in
  // one hour has one latency value, and a line needs two). Drawn as dots even when points are off.
  function isolated(u, seriesIdx, show) {
    if (show) return null; // every point is drawn anyway
    const ys = u.data[seriesIdx];
    const out = [];
    for (let i = 0; i < ys.length; i++) {
      if (ys[i] != null && (i === 0 || ys[i - 1] == null) && (i === ys.length - 1 || ys[i + 1] == null)) out.push(i);
    }
    return out.length ? out : null;
  }

  function series(label, color, opts) {
    const points = { show: x.length <= 60, filter: isolated, size: 6 };
    return Object.assign({ label: label, stroke: color, width: 2, points: points }, opts || {});
  }

  // Axis labels that stay readable for tiny spends (0.0004) and big counts (12k) alike.
  function short(v) {
    if (v == null) return "";
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 1) return String(+v.toFixed(2));
    return String(+v.toPrecision(2));
  }

  function make(id, ySeries, values, yLabel) {
    const node = document.getElementById(id);
    const width = Math.max(320, node.clientWidth || 560);
    const opts = {
      width: width,
      height: 220,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
      series: [{ label: "time (UTC)", value: fmtTime }].concat(ySeries),
      axes: [{}, { label: yLabel, size: 64, values: (u, splits) => splits.map(short) }],
      scales: { x: { time: true } },
      legend: { live: true },
    };
    const plot = new uPlot(opts, [x].concat(values), node);
    const points = values.reduce((n, s) => n + s.filter((v) => v != null && v !== 0).length, 0);
    node.dataset.points = String(points); // buckets with data, across the chart's series
    charts[node.dataset.chart] = plot;
    return plot;
  }

  make("chart-traffic", [
    series("requests", COLORS.requests),
    series("errors (5xx)", COLORS.errors),
    series("4xx", COLORS.client),
    series("fallbacks", COLORS.fallbacks),
  ], [data.requests, data.errors, data.client_errors, data.fallbacks], "per bucket");
  make("chart-latency", [
    series("p50", COLORS.p50, { spanGaps: false }),
    series("p95", COLORS.p95, { spanGaps: false }),
  ], [data.p50, data.p95], "ms");
  make("chart-cost", [series("spend (USD)", COLORS.cost, { fill: "rgba(9,105,218,0.12)" })], [data.cost], "US$");
  make("chart-tokens", [
    series("prompt", COLORS.prompt),
    series("completion", COLORS.completion),
  ], [data.prompt_tokens, data.completion_tokens], "tokens");

  // Filters apply when changed (the Apply button stays for keyboards and text fields);
  // empty ones stay out of the address, so it reads as what was chosen.
  const form = document.getElementById("filters");
  const submit = () => {
    form.querySelectorAll("input, select").forEach((f) => { if (!f.value) f.disabled = true; });
    form.submit();
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(); });
  form.querySelectorAll("select").forEach((s) => s.addEventListener("change", submit));
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const plot of Object.values(charts)) plot.setSize({ width: Math.max(320, plot.root.parentNode.clientWidth), height: 220 });
    }, 150);
  });
})();
{% endverbatim %}
