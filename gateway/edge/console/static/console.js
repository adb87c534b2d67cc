// The console page: fetch each panel's JSON from /console/api/ on an interval and render it.
// Every value is set as text (never as HTML); the charts are plotly.js, served by the gateway.
"use strict";

const $ = (id) => document.getElementById(id);
const dash = "–";
const fmt = {
  n: (v) => (v == null ? dash : Number(v).toLocaleString("en-US")),
  usd: (v, d = 4) => (v == null ? dash : Number(v).toFixed(d)),
  // Dollars spent: small sums keep three significant digits rather than reading as 0.0000.
  spent: (v) => (v == null ? dash : v !== 0 && Math.abs(v) < 0.01 ? Number(v).toPrecision(3) : Number(v).toFixed(4)),
  pct: (v, d = 1) => (v == null ? dash : (100 * v).toFixed(d) + "%"),
  ratio: (v) => (v == null ? dash : Number(v).toPrecision(3) + "×"),
  // API ÷ node said the way a person reads it: which side costs how many times the other.
  cheaper: (v) => (v == null ? dash : v >= 1
    ? `API costs ${Number(v).toPrecision(3)}× the node`
    : `node costs ${Number(1 / v).toPrecision(3)}× the API`),
  ms: (v) => (v == null ? dash : (1000 * v).toFixed(1)),
  ci: (ci) => (ci == null ? dash : (100 * ci[0]).toFixed(1) + "–" + (100 * ci[1]).toFixed(1) + "%"),
  p: (v) => (v == null ? dash : v < 0.001 ? v.toExponential(2) : v.toFixed(3)),
  time: (t) => new Date(1000 * t).toISOString().replace("T", " ").slice(0, 19) + " UTC",
  // A minimum detectable effect in accuracy points; none when the comparison cannot tell any gap.
  gap: (v, paired) => (paired == null ? dash : v == null ? "no gap" : (100 * v).toFixed(1) + " pts"),
};

function cell(value, cls) {
  const td = document.createElement("td");
  if (value instanceof Node) td.append(value);
  else td.textContent = value == null ? dash : String(value);
  if (cls) td.className = cls;
  return td;
}

// What an arm's numbers carry, in their own column: a difference its route accepts
// (accept_unequal), what its upstream could not be told (not at parity), or neither.
function parityCell(accepted, unsent) {
  if (unsent) return cell("not at parity: " + unsent, "warn");
  return accepted ? cell(accepted, "warn") : cell("at parity", "muted");
}

function badge(text, kind) {
  const span = document.createElement("span");
  span.className = "badge " + kind;
  span.textContent = text;
  return span;
}

function fill(tableId, rows, emptyText) {
  const body = $(tableId).tBodies[0];
  const cols = $(tableId).tHead.rows[0].cells.length;
  body.replaceChildren();
  if (!rows.length) {
    const tr = body.insertRow();
    const td = cell(emptyText, "empty");
    td.colSpan = cols;
    tr.append(td);
    return;
  }
  for (const cells of rows) {
    const tr = body.insertRow();
    tr.append(...cells);
  }
}

const layout = (extra) => ({
  margin: { l: 56, r: 16, t: 10, b: 48 },
  paper_bgcolor: "#ffffff",
  plot_bgcolor: "#ffffff",
  font: { family: "system-ui, sans-serif", size: 12, color: "#161b26" },
  showlegend: false,
  ...extra,
});
const plotConfig = { displayModeBar: false, responsive: true };
const palette = ["#1d4ed8", "#b45309", "#047857", "#7c3aed", "#be123c", "#0e7490"];

function draw(id, traces, extra) {
  if (typeof Plotly === "undefined") return;
  Plotly.react($(id), traces, layout(extra), plotConfig);
}

// An upstream's state from its failed calls (gateway/ledger/upstream_state.py): the window's
// (the store) where it is failing or degraded, else the live one's (/health), else the probe.
const troubled = (s) => s === "failing" || s === "degraded";
function healthBadge(u) {
  const r = u.report;
  const state = r && troubled(r.state) ? r.state : troubled(u.state) ? u.state : null;
  if (state) return badge(state, state === "failing" ? "bad" : "warn");
  return u.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad");
}

function renderUpstreams(doc) {
  const rows = doc.upstreams.map((u) => {
    const health = healthBadge(u);
    const proc = u.process ? `${u.process.state}${u.process.restarts ? ` (${u.process.restarts} restarts)` : ""}` : "not supervised";
    const watch = u.demoted ? badge("demoted", "bad") : u.tripped_now.length ? badge("tripped: " + u.tripped_now.join(", "), "warn") : badge("clear", "ok");
    const r = u.report;
    const tripped = r && r.tripped.length ? r.tripped.join(", ") : "none";
    return [
      cell(u.name),
      cell(health),
      cell(u.engine || "unknown", "mono"),
      cell(fmt.n(u.inflight), "num"),
      cell(u.cooling ? badge("cooling", "warn") : badge("no", "idle")),
      cell(proc),
      cell(watch),
      cell(u.demoted_by.length ? u.demoted_by.join(", ") : "none", "mono"),
      cell(r ? fmt.n(r.requests) : dash, "num"),
      cell(r ? fmt.n(r.errors) : dash, "num"),
      cell(tripped),
      cell(r ? fmt.n(r.failed_attempts) : dash, "num"),
      cell(r ? fmt.pct(r.error_rate) : dash, "num"),
      cell(r && r.last_error ? `${r.last_error} at ${fmt.time(r.last_error_time)}` : "none"),
    ];
  });
  fill("upstreams-table", rows, "No upstreams configured.");
  const list = $("findings");
  list.replaceChildren(...doc.findings.map((f) => {
    const li = document.createElement("li");
    li.textContent = `${f.check} on ${f.upstream}: ${f.detail}`;
    return li;
  }));
}

function renderCost(doc) {
  const rows = doc.rows.map((r) => [
    cell(r.model),
    cell(r.upstream),
    cell(r.kind === "node" ? `node ${r.node}` : r.kind === "api" ? "API" : r.kind),
    cell(fmt.n(r.requests), "num"),
    cell(fmt.n(r.prompt_tokens + r.completion_tokens), "num"),
    cell(fmt.spent(r.cost_usd), "num"),
    cell(fmt.usd(r.usd_per_m), "num"),
    cell(fmt.n(r.errors), "num"),
    cell(fmt.pct(r.error_rate), "num"),
    cell(r.lane),
  ]);
  fill("cost-table", rows, doc.store ? "No requests in this window." : "This gateway keeps no records (no store).");
  const econ = Object.entries(doc.models).map(([name, e]) => [
    cell(name),
    cell(fmt.usd(e.node_usd_per_m), "num"),
    cell(fmt.usd(e.api_usd_per_m), "num"),
    cell(fmt.cheaper(e.api_node_ratio)),
  ]);
  fill("economics-table", econ, "No model served in this window.");
  const priced = doc.rows.filter((r) => r.usd_per_m != null);
  draw("cost-chart", [{
    type: "bar",
    x: priced.map((r) => `${r.model} @ ${r.upstream}`),
    y: priced.map((r) => r.usd_per_m),
    marker: { color: priced.map((r) => (r.node ? "#047857" : "#1d4ed8")) },
    hovertemplate: "%{x}<br>$%{y:.4f}/M<extra></extra>",
  }], { yaxis: { title: { text: "$ per million tokens" }, rangemode: "tozero", gridcolor: "#e5e7eb" } });
}

function decisionBlock(model, d) {
  const box = document.createElement("article");
  box.className = "decision";
  const h = document.createElement("h4");
  h.textContent = `${model}: ${d.chosen ? "routes to " + d.chosen : "no choice"}`;
  const p = document.createElement("p");
  p.textContent = d.reason;
  const floor = document.createElement("p");
  floor.className = "muted";
  const f = d.floor || {};
  floor.textContent = f.gap == null
    ? `No noise floor. Decided ${fmt.time(d.decided_at)}.`
    : `Noise floor from ${f.controls.length} control pair(s): gap ${fmt.pct(f.gap)}, discordant imbalance ${fmt.pct(f.imbalance_rate)}, control McNemar p ${fmt.p(f.controls[0] && f.controls[0].p_value)}. Decided ${fmt.time(d.decided_at)}.`;
  // What the round could tell apart, beside the decision (docs/rounds.md).
  const resolution = document.createElement("p");
  resolution.className = "resolution";
  resolution.textContent = d.resolution ? d.resolution.charAt(0).toUpperCase() + d.resolution.slice(1) + "." : "";
  const table = document.createElement("table");
  table.createCaption().textContent = `Evidence for ${model}: each arm against the best scorer (${d.best || dash}), paired McNemar`;
  const head = table.createTHead().insertRow();
  for (const name of ["Upstream", "n", "Accuracy", "95% Wilson", "$/M tokens (gate price: input and output averaged)", "Paired n", "Only best", "Only this", "McNemar p", "Can tell apart", "Verdict", "Parity"]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = name;
    head.append(th);
  }
  const body = table.createTBody();
  for (const a of d.arms) {
    const tr = body.insertRow();
    const verdict = a.upstream === d.chosen ? badge("chosen", "ok") : a.eligible ? badge("eligible", "idle") : badge("not eligible", "bad");
    const why = document.createElement("span");
    why.append(verdict, " " + a.why);
    tr.append(cell(a.upstream), cell(fmt.n(a.n), "num"), cell(fmt.pct(a.accuracy), "num"),
      cell(fmt.ci(a.ci)), cell(fmt.usd(a.price_per_m, 3), "num"), cell(fmt.n(a.paired_n), "num"),
      cell(fmt.n(a.only_best), "num"), cell(fmt.n(a.only_this), "num"), cell(fmt.p(a.p_value), "num"),
      cell(fmt.gap(a.mde, a.paired_n), "num"), cell(why), parityCell(a.accepted));
  }
  const wrap = document.createElement("div");
  wrap.className = "scroll";
  wrap.tabIndex = 0;
  wrap.append(table);
  box.append(h, p, resolution, floor, wrap);
  return box;
}

function renderSchedule(schedule) {
  const rounds = schedule.rounds || [];
  fill("schedule-table", rounds.map((r) => [
    cell(fmt.time(r.started)), cell(r.gateway || "this gateway", "mono"),
    cell(badge(r.outcome, r.outcome === "ok" ? "ok" : r.outcome === "failed" ? "bad" : "idle")),
    cell(r.outcome === "failed" ? `${r.error_class}: ${r.error}` : r.finished ? `finished ${fmt.time(r.finished)}` : "running"),
  ]), "No scheduled round has run yet.");
  const trips = Object.values(schedule.tripwire || {});
  fill("tripwire-table", trips.map((t) => {
    const c = t.report.counts || {};
    const why = t.passed ? "" : t.report.why || "";
    return [cell(t.target, "mono"), cell(badge(t.verdict, t.passed ? "ok" : "bad")), cell(fmt.n(c.ok), "num"),
      cell(fmt.n(c.degenerate), "num"), cell(fmt.n(c.wrong), "num"), cell(fmt.n(c.error), "num"),
      cell(why), cell(fmt.time(t.time))];
  }), "No tripwire has run yet.");
  return rounds[0];
}

function renderQuality(doc) {
  const holder = $("decisions");
  const entries = Object.entries(doc.decisions);
  const last = renderSchedule(doc.schedule || {});
  if (!entries.length) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = last && last.outcome === "failed"
      ? `No gate decision yet: the last scheduled round failed (${last.error_class}: ${last.error}).`
      : "No gate decision yet: no route has the cheapest_within_floor policy, or no round has run.";
    holder.replaceChildren(p);
  } else {
    holder.replaceChildren(...entries.map(([m, d]) => decisionBlock(m, d)));
  }
  const rows = [];
  for (const round of doc.rounds) {
    for (const a of round.arms) {
      rows.push([
        cell(round.run, "mono"), cell(a.route), cell(a.control ? `${a.upstream} (control)` : a.upstream || a.label),
        cell(fmt.n(a.n), "num"), cell(fmt.n(a.correct), "num"), cell(fmt.pct(a.accuracy), "num"),
        cell(fmt.ci(a.ci)), cell(fmt.usd(a.usd_per_m_output), "num"),
        cell(a.on_frontier ? badge("on frontier", "ok") : a.usd_per_m_output == null ? "cost unknown" : "no"),
        parityCell(a.accepted, a.unsent),
      ]);
    }
  }
  fill("rounds-table", rows, doc.store ? "No eval round in the store yet." : "This gateway keeps no records (no store).");
  const latest = doc.rounds[0];
  // The control's second run measures noise, not an option: it stays off the chart.
  const known = latest ? latest.arms.filter((a) => a.usd_per_m_output != null && !a.control) : [];
  const unknown = latest ? latest.arms.filter((a) => a.usd_per_m_output == null).map((a) => a.label) : [];
  $("frontier-caption").textContent = "Accuracy against $/M output tokens" + (latest ? ` for ${latest.run}` : "") +
    "; error bars are 95% Wilson intervals, the dashed line is the frontier." +
    (unknown.length ? ` Cost unknown, not plotted: ${unknown.join(", ")}.` : "");
  const points = known.map((a, i) => ({
    type: "scatter", mode: "markers+text", name: a.label, x: [a.usd_per_m_output], y: [a.accuracy],
    text: [a.label], textposition: "top right", marker: { size: 10, color: palette[i % palette.length] },
    error_y: { type: "data", symmetric: false, array: [a.ci[1] - a.accuracy], arrayminus: [a.accuracy - a.ci[0]], thickness: 1.5 },
    hovertemplate: `${a.label}<br>$%{x:.4f}/M, %{y:.1%}<extra></extra>`,
  }));
  const line = known.filter((a) => a.on_frontier).sort((a, b) => a.usd_per_m_output - b.usd_per_m_output);
  if (line.length > 1) {
    points.push({ type: "scatter", mode: "lines", name: "frontier", x: line.map((a) => a.usd_per_m_output),
      y: line.map((a) => a.accuracy), line: { shape: "hv", dash: "dash", color: "#6b7280" }, hoverinfo: "skip" });
  }
  const most = Math.max(0, ...known.map((a) => a.usd_per_m_output));
  draw("frontier-chart", points, {
    xaxis: { title: { text: "$ per million output tokens" }, range: [0, most > 0 ? most * 1.3 : 1], gridcolor: "#e5e7eb" },
    yaxis: { title: { text: "accuracy" }, range: [0, 1.05], tickformat: ".0%", gridcolor: "#e5e7eb" },
  });
}

function renderTraffic(doc) {
  const trio = (p) => [p.p50, p.p90, p.p99].map(fmt.ms).join(" / ");
  const rows = doc.models.map((m) => [
    cell(m.model), cell(fmt.n(m.requests), "num"), cell(m.per_minute.toFixed(2), "num"),
    cell(trio(m.ttft_s), "num"), cell(trio(m.tpot_s), "num"),
    cell(fmt.pct(m.upstream_cut_rate), "num"), cell(fmt.pct(m.client_capped_rate), "num"),
    cell(fmt.pct(m.leak_rate), "num"),
    cell(fmt.n(m.errors), "num"), cell(fmt.pct(m.error_rate), "num"),
  ]);
  fill("traffic-table", rows, doc.store ? "No client requests in this window." : "This gateway keeps no records (no store).");
  draw("rate-chart", [{
    type: "bar", marker: { color: "#1d4ed8" },
    x: doc.series.map((s) => new Date(1000 * s.t)), y: doc.series.map((s) => s.per_minute),
    hovertemplate: "%{x}<br>%{y:.2f}/min<extra></extra>",
  }], { yaxis: { title: { text: "requests / min" }, rangemode: "tozero", gridcolor: "#e5e7eb" }, margin: { l: 56, r: 16, t: 8, b: 36 } });
  const shadow = doc.shadow.map((s) => [
    cell(s.model), cell(`${s.primary} → ${s.shadow}`), cell(fmt.n(s.pairs), "num"),
    cell(fmt.pct(s.agree_rate), "num"), cell(fmt.ci(s.agree_ci)),
    cell(Object.entries(s.agreements).sort().map(([k, v]) => `${k} ${v}`).join(", ")),
  ]);
  fill("shadow-table", shadow, "No shadowed requests in this window.");
}

function renderRejections(doc) {
  const rows = doc.rows.map((r) => [
    cell(r.door), cell(r.reason), cell(String(r.status), "num"), cell(fmt.n(r.requests), "num"),
    cell(r.model || dash, "mono"), cell(fmt.time(r.last)),
  ]);
  fill("rejections-table", rows, doc.store ? "No request was refused in this window." : "This gateway keeps no records (no store).");
}

function renderGlance(up, cost, quality, traffic) {
  const healthy = up.upstreams.filter((u) => u.healthy && !u.demoted && healthBadge(u).textContent === "healthy").length;
  $("glance-healthy").textContent = `${healthy} / ${up.upstreams.length}`;
  $("glance-requests").textContent = fmt.n(traffic.models.reduce((n, m) => n + m.requests, 0));
  const spend = cost.rows.reduce((usd, r) => usd + (r.cost_usd || 0), 0);
  $("glance-spend").textContent = cost.store ? "$" + fmt.spent(spend) : dash;
  const ratios = Object.values(cost.models).map((e) => e.api_node_ratio).filter((v) => v != null);
  $("glance-ratio").textContent = ratios.length ? fmt.cheaper(Math.max(...ratios)) : dash;
  const gates = Object.entries(quality.decisions).map(([m, d]) => `${m} → ${d.chosen || dash}`);
  $("glance-gate").textContent = gates.length ? gates.join(", ") : "no decision";
  // The answering process's loop: near 0.75 busy, or its timers late, new requests wait for it.
  const loop = up.event_loop, shown = $("glance-loop");
  const known = loop && loop.busy != null;
  shown.textContent = known ? `${fmt.pct(loop.busy, 0)} busy, timers ${loop.mean_lag_ms} ms late` : dash;
  shown.className = known && (loop.busy >= 0.75 || loop.mean_lag_ms >= 25) ? "warn" : "";
  shown.title = known ? `worst ${loop.worst_lag_ms} ms late; near 75% busy, run more workers` : "";
}

async function getJSON(path) {
  const response = await fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// The window and the refresh interval live in the query string, so a reload or a shared link
// keeps them.
function choose(id) {
  const value = new URLSearchParams(location.search).get(id);
  if (value && [...$(id).options].some((o) => o.value === value)) $(id).value = value;
}

function remember() {
  const query = new URLSearchParams(location.search);
  query.set("window", $("window").value);
  query.set("lane", $("lane").value);
  query.set("every", $("every").value);
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

let timer = null;
async function refresh() {
  const w = encodeURIComponent($("window").value);
  const lane = encodeURIComponent($("lane").value);
  const status = $("status");
  try {
    const [up, cost, quality, traffic, refused] = await Promise.all([
      getJSON(`/console/api/upstreams?window=${w}`),
      getJSON(`/console/api/cost?window=${w}&lane=${lane}`),
      getJSON("/console/api/quality"),
      getJSON(`/console/api/traffic?window=${w}&lane=${lane}`),
      getJSON(`/console/api/rejections?window=${w}`),
    ]);
    renderUpstreams(up);
    renderCost(cost);
    renderQuality(quality);
    renderTraffic(traffic);
    renderRejections(refused);
    renderGlance(up, cost, quality, traffic);
    status.classList.remove("error");
    status.textContent = `Updated ${new Date().toLocaleTimeString("en-GB")}`;
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (err) {
    status.classList.add("error");
    status.textContent = `Refresh failed: ${err.message}`;
  }
}

function schedule() {
  if (timer) clearInterval(timer);
  const every = Number($("every").value);
  timer = every > 0 ? setInterval(refresh, 1000 * every) : null;
}

document.addEventListener("DOMContentLoaded", () => {
  choose("window");
  choose("lane");
  choose("every");
  $("window").addEventListener("change", () => { remember(); refresh(); });
  $("lane").addEventListener("change", () => { remember(); refresh(); });
  $("every").addEventListener("change", () => { remember(); schedule(); });
  $("refresh").addEventListener("click", refresh);
  schedule();
  refresh();
});
