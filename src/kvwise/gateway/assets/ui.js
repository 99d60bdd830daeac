// kvwise live page: polls /kvwise/status and draws the figures and inline-SVG charts.
"use strict";
const POLL_MS = 1000;
const CHARTS = [
  {title: "KV tokens: engine use vs planned pool", unit: "tokens", series: [
    ["kv_used_tokens", "engine KV used", "#2a7ae2"],
    ["reserved_tokens", "gateway reserved", "#8e44ad"],
    ["planned_pool_tokens", "planned pool", "#c0392b", true],
    ["kv_pool_tokens", "engine pool", "#7f8c8d", true]]},
  {title: "Queue depth", unit: "requests", series: [["queue_depth", "queued", "#16a085"]]},
  {title: "TTFT at the gateway (last minute)", unit: "ms", series: [
    ["ttft_p50_ms", "p50", "#2a7ae2"], ["ttft_p99_ms", "p99", "#e67e22"]]},
  {title: "429 responses", unit: "per min", series: [["rejected_429_per_min", "429/min", "#c0392b"]]},
  {title: "Preemptions (engines)", unit: "per min", series: [["preemptions_per_min", "preemptions/min", "#7f8c8d"]]},
];
// SGLang reports retractions where vLLM reports preemptions (live/window.py reads
// sglang:num_retracted_requests_total into the same figure): say which the replicas count
const PREEMPT_WORDS = {
  vllm: ["preempt/min", "Preemptions (engines)", "preemptions/min"],
  sglang: ["retractions/min", "Retractions (engines)", "retractions/min"],
  mixed: ["preempt·retract/min", "Preemptions + retractions (engines)", "preemptions + retractions/min"],
};
function preemptWords(replicas) {
  const engines = new Set(replicas.map((r) => r.engine).filter(Boolean));
  if (engines.has("sglang")) return PREEMPT_WORDS[engines.size === 1 ? "sglang" : "mixed"];
  return PREEMPT_WORDS.vllm;
}
const $ = (id) => document.getElementById(id);
const fmt = (v, digits = 0) => v === null || v === undefined ? "–" :
  Number(v).toLocaleString("en-US", {maximumFractionDigits: digits});
const pair = (a, b) => `${fmt(a, 1)} / ${fmt(b, 1)} ms`;

function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }

function card(label, value, note, key) {
  const div = document.createElement("div");
  div.className = "card";
  div.dataset.figure = key;
  div.innerHTML = "<small></small><b></b><small></small>";
  div.children[0].textContent = label; div.children[1].textContent = value;
  div.children[2].textContent = note || "";
  return div;
}

function showGateway(g) {
  const cards = [
    ["queue depth", fmt(g.queue_depth), `${fmt(g.queue_tokens)} KV tokens queued`, "queue_depth"],
    ["admitted", fmt(g.num_admitted), `${fmt(g.num_queued)} had to wait`, "num_admitted"],
    ["rejected (429)", fmt(g.num_rejected), `${fmt(g.rejected_429_per_min, 1)} per min`, "num_rejected"],
    ["budget in use", `${fmt(g.reserved_tokens)} / ${fmt(g.budget_tokens)}`, "KV tokens reserved / planned", "budget"],
    ["sessions", g.num_sessions === null ? "off" : fmt(g.num_sessions), "in the store", "sessions"],
    ["TTFT p50 / p99", pair(g.ttft_p50_ms, g.ttft_p99_ms), `over ${fmt(g.window_s)} s`, "ttft"],
    ["TPOT p50 / p99", pair(g.tpot_p50_ms, g.tpot_p99_ms), `over ${fmt(g.window_s)} s`, "tpot"],
  ];
  const flows = (g.top_queued_flows || []).map((f) => `${f.flow}: ${fmt(f.queued_tokens)}`);
  if (flows.length) cards.push(["top queued flows (KV tokens)", flows[0], flows.slice(1).join(" · "), "flows"]);
  $("gateway").replaceChildren(...cards.map((c) => card(...c)));
}

function showReplicas(replicas) {
  const rows = replicas.map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.replica = r.name;
    const used = r.kv_used_tokens === undefined ? "no engine metrics" :
      `${fmt(r.kv_used_tokens)} / ${fmt(r.kv_pool_tokens)} (${fmt(r.kv_usage_pct, 1)} %)`;
    [`${r.name}${r.healthy ? "" : " (down)"}`, used, fmt(r.planned_pool_tokens), fmt(r.reserved_tokens),
     fmt(r.num_requests_running), fmt(r.num_requests_waiting), fmt(r.preemptions_per_min, 1),
     pair(r.ttft_p50_ms, r.ttft_p99_ms), pair(r.tpot_p50_ms, r.tpot_p99_ms), fmt(r.tokens_per_s, 1)]
      .forEach((t) => tr.appendChild(cell(t)));
    return tr;
  });
  $("replicas").tBodies[0].replaceChildren(...rows);
}

function showDepartures(lines) {
  const box = $("departures");
  box.hidden = lines.length === 0;
  box.replaceChildren(...lines.map((l) => { const p = document.createElement("p"); p.textContent = "⚠ " + l; return p; }));
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function drawChart(spec, history) {
  const W = 360, H = 150, L = 52, R = 8, T = 8, B = 20;
  const t0 = history.length ? history[0].time_s : 0, t1 = history.length ? history[history.length - 1].time_s : 1;
  const values = spec.series.flatMap(([k]) => history.map((p) => p[k]).filter((v) => v !== null && v !== undefined));
  const top = Math.max(1, ...values) * 1.1;
  const x = (t) => L + (W - L - R) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
  for (let i = 0; i <= 4; i++) {
    const v = top * i / 4;
    root.appendChild(svg("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e3e6ec"}));
    const label = svg("text", {x: L - 4, y: y(v) + 3, "text-anchor": "end"});
    label.textContent = fmt(v, v < 10 ? 1 : 0); root.appendChild(label);
  }
  const span = svg("text", {x: W - R, y: H - 4, "text-anchor": "end"});
  span.textContent = `last ${fmt(t1 - t0)} s → now`; root.appendChild(span);
  const unit = svg("text", {x: L, y: H - 4}); unit.textContent = spec.unit; root.appendChild(unit);
  for (const [key, , color, dashed] of spec.series) {
    const pts = history.filter((p) => p[key] !== null && p[key] !== undefined).map((p) => `${x(p.time_s).toFixed(1)},${y(p[key]).toFixed(1)}`);
    if (pts.length) root.appendChild(svg("polyline", {points: pts.join(" "), fill: "none", stroke: color,
      "stroke-width": 1.6, "stroke-dasharray": dashed ? "5 3" : "none", "data-series": key}));
  }
  return root;
}

function showCharts(history, words) {
  $("charts").replaceChildren(...CHARTS.map((spec) => {
    const div = document.createElement("div");
    div.className = "chart";
    const preempt = spec.series[0][0] === "preemptions_per_min";
    const h = document.createElement("h3"); h.textContent = preempt ? words[1] : spec.title;
    const legend = document.createElement("div"); legend.className = "legend";
    for (const [key, name, color] of spec.series) {
      const label = preempt ? words[2] : name;
      const last = history.length ? history[history.length - 1][key] : null;
      const s = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = color;
      s.append(swatch, `${label}: ${fmt(last, 1)}`);
      legend.appendChild(s);
    }
    div.append(h, drawChart(spec, history), legend);
    return div;
  }));
}

function show(status) {
  showGateway(status.gateway);
  showReplicas(status.replicas);
  const words = preemptWords(status.replicas || []);
  $("preempt-head").textContent = words[0];
  showDepartures(status.departures || []);
  showCharts(status.history || [], words);
  const mem = status.host && status.host.memory;
  const gpus = (status.host && status.host.gpus) || [];
  const gpuText = gpus.map((g) => ` · GPU ${g.index} ${g.name}: ${fmt(g.used_gib, 1)} of ${fmt(g.total_gib, 1)} GiB used`).join("");
  $("host").textContent = (mem ? `host memory: ${fmt(mem.used_gib, 1)} GiB used of ${fmt(mem.total_gib, 1)} GiB (${fmt(mem.available_gib, 1)} GiB available)` : "host memory: not available") + gpuText;
  $("state").className = "";
  $("state").textContent = `updated ${new Date(status.time_s * 1000).toLocaleTimeString()} · every ${POLL_MS / 1000} s`;
}

async function poll() {
  try {
    const response = await fetch(new URL("/kvwise/status", location.origin), {credentials: "same-origin", cache: "no-store"});
    if (!response.ok) throw new Error(`/kvwise/status answered ${response.status}`);
    show(await response.json());
  } catch (err) {
    $("state").className = "down";
    $("state").textContent = `gateway unreachable: ${err.message}`;
  }
  setTimeout(poll, POLL_MS);
}
poll();
