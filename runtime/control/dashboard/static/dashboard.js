// statekit ui: the page. Plain DOM, no framework, no build step. Every text that comes from a
// job (names, uids, paths, failures) goes in through textContent, never as HTML.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const POLL_MS = Math.max(100, parseInt(document.querySelector('meta[name="poll-ms"]').content, 10) || 1000);
const MAX_WATERMARK = 9.2e18;

const view = { route: null, jobId: null, tab: "overview", vertex: null, checkpoint: null, details: null, plan: null,
  results: [], timer: null, busy: false };

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

async function api(path, options) {
  const init = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
  if (init.method && init.method !== "GET") {
    init.headers = Object.assign({ "Content-Type": "application/json", "X-CSRF-Token": CSRF }, init.headers);
  }
  const response = await fetch(path, init);
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const error = new Error((body && body.error) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

const nf = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
function num(value) { return value === null || value === undefined ? "-" : nf.format(value); }
function rate(value) { return value === null || value === undefined ? "-" : `${nf.format(value)}/s`; }
function ms(value) {
  if (value === null || value === undefined) return "-";
  if (value >= 60000) return `${nf.format(value / 60000)} min`;
  if (value >= 10000) return `${nf.format(value / 1000)} s`;
  if (value > 0 && value < 1) return `${value.toFixed(2)} ms`;
  return `${nf.format(value)} ms`;
}
function bytes(value) {
  if (value === null || value === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${value} B` : `${v.toFixed(1)} ${units[i]}`;
}
function time(epochMs) {
  if (!epochMs) return "-";
  const d = new Date(epochMs);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}
function clock(epochMs) {
  return epochMs ? new Date(epochMs).toISOString().slice(11, 19) : "-";
}
function pathCell(text) { return el("td", { class: "path", text: text }); }
function age(fromMs, toMs) {
  if (!fromMs) return "-";
  const s = Math.max(0, ((toMs || Date.now()) - fromMs) / 1000);
  if (s < 120) return `${s.toFixed(0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(0)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
function watermark(value, now) {
  if (value === null || value === undefined) return "No Watermark";
  if (value >= MAX_WATERMARK) return "MAX (end of input)";
  const text = new Date(value).toISOString().slice(11, 23);
  const lag = (now || Date.now()) - value;
  return lag > 0 ? `${text} (${ms(lag)} behind)` : text;
}
function stateSpan(state) { return el("span", { class: `state ${state}`, text: state }); }
function table(id, headers, rows) {
  const head = el("tr", {}, headers.map(h => el("th", { class: h.n ? "n" : null, text: h.t || h })));
  return el("table", { id }, el("thead", {}, head), el("tbody", {}, rows));
}
function cell(text, numeric) { return el("td", { class: numeric ? "n" : null, text: text }); }
function replace(id, node) {
  const old = document.getElementById(id);
  if (old) old.replaceWith(node);
}
function setStatus(text, error) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = error ? "error" : "muted";
}

// ------------------------------------------------------------------ routing and polling

function parseRoute() {
  const hash = location.hash || "#/";
  const match = hash.match(/^#\/jobs\/([0-9a-f]{32})(?:\/(overview|checkpoints))?$/);
  if (match) return { name: "job", jobId: match[1], tab: match[2] || "overview" };
  return { name: "jobs" };
}

function navigate() {
  const route = parseRoute();
  const changedJob = route.name !== view.route || route.jobId !== view.jobId;
  view.route = route.name;
  view.jobId = route.jobId || null;
  if (route.tab) view.tab = route.tab;
  if (changedJob) {
    view.vertex = null; view.checkpoint = null; view.details = null; view.results = [];
    skeleton();
  } else {
    showTab();
  }
  refresh();
}

async function refresh() {
  if (view.busy) return;
  view.busy = true;
  try {
    if (view.route === "job") await refreshJob();
    else await refreshJobs();
    setStatus(`live · updated ${new Date().toLocaleTimeString()} · every ${POLL_MS / 1000} s`);
  } catch (error) {
    setStatus(error.status === 401 ? "no session: open the address statekit ui printed" : `error: ${error.message}`,
      true);
  } finally {
    view.busy = false;
  }
}

function skeleton() {
  const main = document.getElementById("main");
  main.replaceChildren();
  if (view.route === "jobs") {
    main.append(el("h1", { text: "Jobs" }), el("p", { id: "registry", class: "muted" }), el("table", { id: "jobs" }));
    return;
  }
  main.append(
    el("h1", {}, el("span", { id: "job-name", text: "…" }), " ", el("span", { id: "job-state" })),
    el("p", { id: "job-facts", class: "muted mono" }),
    el("div", { id: "job-note" }),
    actionsBar(),
    el("div", { class: "tabs" },
      el("button", { id: "tab-overview", onclick: () => { location.hash = `#/jobs/${view.jobId}/overview`; } },
        "Overview"),
      el("button", { id: "tab-checkpoints", onclick: () => { location.hash = `#/jobs/${view.jobId}/checkpoints`; } },
        "Checkpoints")),
    el("section", { id: "pane-overview" },
      el("h2", { text: "Job graph" }), el("div", { id: "graph", class: "graph" }),
      el("h2", { text: "Vertices" }), el("table", { id: "vertices" }),
      el("div", { id: "subtasks" })),
    el("section", { id: "pane-checkpoints" },
      el("div", { id: "checkpoint-counts", class: "cards" }),
      el("div", { id: "checkpoint-latest" }),
      el("h2", { text: "Summary (completed checkpoints)" }), el("table", { id: "checkpoint-summary" }),
      el("h2", { text: "History" }), el("p", { id: "checkpoint-source", class: "muted" }),
      el("div", { id: "checkpoint-details" }),
      el("table", { id: "checkpoint-history" }),
      el("h2", { text: "Configuration" }), el("table", { id: "checkpoint-config" })));
  showTab();
}

function showTab() {
  for (const name of ["overview", "checkpoints"]) {
    const pane = document.getElementById(`pane-${name}`);
    const tab = document.getElementById(`tab-${name}`);
    if (!pane || !tab) continue;
    pane.hidden = name !== view.tab;
    tab.className = name === view.tab ? "active" : "";
  }
}

// ------------------------------------------------------------------ the jobs overview

async function refreshJobs() {
  const data = await api("/api/jobs");
  document.getElementById("registry").textContent = `registry: ${data.registry} · ${data.jobs.length} job(s)`;
  const rows = data.jobs.map(job => {
    const last = job.last_checkpoint;
    const link = el("a", { href: `#/jobs/${job.jid}`, class: "mono", text: job.jid });
    const state = el("td", {}, stateSpan(job.state),
      job.crash_reason || job.failure ? el("div", { class: "muted", text: job["crash-reason"] || job.failure }) : null);
    return el("tr", { class: "job-row", "data-jid": job.jid },
      el("td", {}, link), cell(job.name), state,
      cell(time(job["start-time"])), cell(age(job["start-time"], job["end-time"] || data.now), true),
      cell(job.parallelism === null ? "-" : job.parallelism, true),
      cell(last ? `chk-${last.id} · ${ms(last.duration_ms)} · ${bytes(last.size)}` : "-"),
      cell(rate(job.records_in_per_second), true), cell(rate(job.records_out_per_second), true),
      cell(job.live ? watermark(job.low_watermark, data.now) : "-"));
  });
  replace("jobs", table("jobs", ["job id", "name", "state", "started", { t: "uptime", n: 1 },
    { t: "parallelism", n: 1 }, "last checkpoint", { t: "records in", n: 1 }, { t: "records out", n: 1 },
    "low watermark"], rows.length ? rows : [el("tr", {}, el("td", { colspan: 10, text: "No jobs in the registry." }))]));
}

// ------------------------------------------------------------------ one job

async function refreshJob() {
  const data = await api(`/api/jobs/${view.jobId}`);
  view.plan = data.plan;
  const job = data.job;
  document.getElementById("job-name").textContent = job.name;
  document.getElementById("job-state").replaceChildren(stateSpan(job.state));
  document.getElementById("job-facts").textContent = [
    job.jid, `started ${time(job["start-time"])}`, `uptime ${age(job["start-time"], job["end-time"] || data.now)}`,
    `pid ${job.pid}`, job["checkpoint-dir"] ? `checkpoints ${job["checkpoint-dir"]}` : null,
  ].filter(Boolean).join(" · ");
  const note = [];
  if (job.failure || job["crash-reason"]) note.push(el("div", { class: "note", text: job["crash-reason"] || job.failure }));
  if (!data.live && job.running) note.push(el("div", { class: "note", text: `the job does not answer: ${data.live_error}` }));
  if (!job.running) note.push(el("div", { class: "note", text: "The job has ended: its graph and checkpoint history are shown from the registry." }));
  document.getElementById("job-note").replaceChildren(...note);
  const target = document.getElementById("target");
  if (target && !target.dataset.touched && !target.value && job["savepoint-dir"]) target.value = job["savepoint-dir"];
  for (const id of ["action-savepoint", "action-stop", "action-cancel"]) {
    document.getElementById(id).disabled = !data.live;
  }
  renderGraph(data);
  renderVertices(data);
  renderCheckpoints(data);
  if (view.checkpoint !== null && view.details && view.details.status === "IN_PROGRESS") await loadDetails(view.checkpoint);
}

function vertexFigures(data) {
  const figures = new Map();
  for (const node of (data.plan && data.plan.nodes) || []) {
    figures.set(node.id, { node, tasks: [], in: 0, out: 0, inRate: 0, outRate: 0, ratio: 0, inWm: undefined,
      outWm: undefined });
  }
  for (const task of data.tasks) {
    const f = figures.get(task.vertex);
    if (!f) continue;
    f.tasks.push(task);
    f.in += task.records_in; f.out += task.records_out;
    f.inRate += task.records_in_per_second; f.outRate += task.records_out_per_second;
    f.ratio = Math.max(f.ratio, task.backpressured_ratio);
    const wm = task.watermarks || {};
    f.inWm = lowest(f.inWm, wm.input);
    f.outWm = lowest(f.outWm, wm.output);
  }
  return figures;
}

function lowest(current, value) {
  if (current === null || value === null || value === undefined) return null;  // a subtask without one holds all back
  return current === undefined ? value : Math.min(current, value);
}

function level(ratio) { return ratio > 0.5 ? "high" : ratio > 0.1 ? "low" : "ok"; }

function renderGraph(data) {
  const plan = data.plan;
  const box = document.getElementById("graph");
  if (!plan || !plan.nodes || !plan.nodes.length) {
    box.replaceChildren(el("p", { class: "muted", text: "No job graph recorded for this job." }));
    return;
  }
  const figures = vertexFigures(data);
  const depth = new Map(plan.nodes.map(n => [n.id, 0]));
  for (let i = 0; i < plan.nodes.length; i++) {
    for (const e of plan.edges) depth.set(e.target, Math.max(depth.get(e.target), depth.get(e.source) + 1));
  }
  const columns = new Map();
  for (const n of plan.nodes) {
    const d = depth.get(n.id);
    if (!columns.has(d)) columns.set(d, []);
    columns.get(d).push(n);
  }
  const W = 230, H = 92, GX = 80, GY = 26, pos = new Map();
  let height = 0;
  for (const [d, nodes] of columns) {
    nodes.forEach((n, i) => pos.set(n.id, { x: 20 + d * (W + GX), y: 20 + i * (H + GY) }));
    height = Math.max(height, 20 + nodes.length * (H + GY));
  }
  const width = 40 + columns.size * (W + GX) - GX;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "job graph" });
  root.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
    markerHeight: 7, orient: "auto" }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8c959f" }))));
  for (const e of plan.edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    root.append(svg("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`,
      "marker-end": "url(#arrow)" }));
    const label = e.partitioning.toUpperCase() + (e.side_output ? ` (${e.side_output})` : "");
    root.append(svg("text", { class: "edge-label", x: mx, y: (y1 + y2) / 2 - 4, "text-anchor": "middle", text: label }));
  }
  for (const n of plan.nodes) {
    const p = pos.get(n.id), f = figures.get(n.id);
    const bp = level(f.ratio);
    const name = n.name.length > 34 ? n.name.slice(0, 33) + "…" : n.name;
    const g = svg("g", { class: `vertex bp-${bp}${view.vertex === n.id ? " selected" : ""}`, "data-vertex": n.id,
      transform: `translate(${p.x},${p.y})`, onclick: () => { view.vertex = n.id; renderGraph(data); renderVertices(data); } },
      svg("title", { text: n.operators.map(o => `${o.name} (${o.uid})`).join("\n") }),
      svg("rect", { width: W, height: H }),
      svg("text", { class: "title", x: 8, y: 17, text: name }),
      svg("text", { x: 8, y: 34, text: `parallelism ${n.parallelism} · backpressure ${bp}` }),
      svg("text", { x: 8, y: 50, text: `in ${rate(f.inRate)} · out ${rate(f.outRate)}` }),
      svg("text", { x: 8, y: 66, text: `in wm ${f.tasks.length ? watermark(f.inWm, data.now) : "-"}` }),
      svg("text", { x: 8, y: 82, text: `out wm ${f.tasks.length ? watermark(f.outWm, data.now) : "-"}` }));
    root.append(g);
  }
  box.replaceChildren(root);
}

function renderVertices(data) {
  const figures = vertexFigures(data);
  const rows = [];
  for (const f of figures.values()) {
    const bp = level(f.ratio);
    const row = el("tr", { class: `clickable${view.vertex === f.node.id ? " selected" : ""}`, "data-vertex": f.node.id,
      onclick: () => { view.vertex = f.node.id; renderGraph(data); renderVertices(data); } },
      cell(f.node.id, true), cell(f.node.name), cell(f.node.parallelism, true),
      cell(num(f.in), true), cell(num(f.out), true), cell(rate(f.inRate), true), cell(rate(f.outRate), true),
      el("td", { class: `bp-${bp}`, text: `${bp} (${(f.ratio * 100).toFixed(0)}%)` }),
      cell(f.tasks.length ? watermark(f.inWm, data.now) : "-"), cell(f.tasks.length ? watermark(f.outWm, data.now) : "-"));
    rows.push(row);
  }
  replace("vertices", table("vertices", [{ t: "id", n: 1 }, "vertex", { t: "parallelism", n: 1 },
    { t: "records in", n: 1 }, { t: "records out", n: 1 }, { t: "in/s", n: 1 }, { t: "out/s", n: 1 }, "backpressure",
    "input watermark", "output watermark"], rows));
  const chosen = view.vertex === null ? null : figures.get(view.vertex);
  if (!chosen) {
    replace("subtasks", el("div", { id: "subtasks" },
      el("p", { class: "muted", text: data.live ? "Select a vertex for its subtasks." : "" })));
    return;
  }
  const subRows = chosen.tasks.slice().sort((a, b) => a.subtask - b.subtask).map(t => {
    const wm = t.watermarks || {};
    const c = t.checkpoints || {};
    return el("tr", { class: "subtask-row" }, cell(t.subtask, true), cell(num(t.records_in), true),
      cell(num(t.records_out), true), cell(rate(t.records_in_per_second), true), cell(rate(t.records_out_per_second), true),
      el("td", { class: `bp-${t.backpressure}`, text: `${t.backpressure} (${(t.backpressured_ratio * 100).toFixed(0)}%)` }),
      cell(watermark(wm.input, data.now)), cell(watermark(wm.output, data.now)),
      cell(c.last_id === null || c.last_id === undefined ? "-" : `chk-${c.last_id}`),
      cell(ms(c.last_alignment_ms), true), cell(ms(c.last_sync_ms), true), cell(t.finished ? "finished" : "running"));
  });
  replace("subtasks", el("div", { id: "subtasks" }, el("h2", { text: `Subtasks of ${chosen.node.name}` }),
    table("subtask-table", [{ t: "subtask", n: 1 }, { t: "records in", n: 1 }, { t: "records out", n: 1 },
      { t: "in/s", n: 1 }, { t: "out/s", n: 1 }, "backpressure", "input watermark", "output watermark",
      "last checkpoint", { t: "alignment", n: 1 }, { t: "sync", n: 1 }, "state"], subRows)));
}

// ------------------------------------------------------------------ checkpoints

function renderCheckpoints(data) {
  const stats = data.checkpoints || {};
  const counts = stats.counts || {};
  const card = (key, value) => el("div", { class: "card", "data-count": key },
    el("div", { class: "v", text: value === null || value === undefined ? "-" : value }), el("div", { class: "k", text: key }));
  document.getElementById("checkpoint-counts").replaceChildren(card("completed", counts.completed),
    card("failed", counts.failed), card("in progress", counts.in_progress),
    card("restored", counts.restored === null || counts.restored === undefined ? "-" : counts.restored),
    card("savepoints", counts.savepoints !== undefined ? counts.savepoints :
      (stats.history || []).filter(e => e.is_savepoint).length));
  const latest = stats.latest || {};
  const latestRows = [["completed", latest.completed], ["savepoint", latest.savepoint], ["failed", latest.failed]]
    .map(([kind, e]) => el("tr", {}, cell(kind), cell(e ? `${e.id}` : "-"), cell(e ? time(e.trigger_timestamp) : "-"),
      cell(e ? ms(e.end_to_end_duration) : "-", true), cell(e ? bytes(e.state_size) : "-", true),
      pathCell(e ? (e.failure_message || e.external_path || "-") : "-")));
  if (latest.restored) {
    latestRows.push(el("tr", {}, cell("restored"), cell(`${latest.restored.id}`), cell("-"), cell("-", true),
      cell("-", true), cell(latest.restored.external_path || "-")));
  }
  document.getElementById("checkpoint-latest").replaceChildren(el("h2", { text: "Latest" }),
    table("checkpoint-latest-table", ["", "id", "triggered", { t: "duration", n: 1 }, { t: "state size", n: 1 },
      "path / failure"], latestRows));
  const summary = stats.summary || {};
  const figures = [["end to end duration", "end_to_end_duration", ms], ["state size", "state_size", bytes],
    ["checkpointed size", "checkpointed_size", bytes], ["alignment", "alignment_duration", ms],
    ["in-flight data", "persisted_data", bytes], ["sync duration", "sync_duration", ms],
    ["async duration", "async_duration", ms], ["start delay", "start_delay", ms]];
  replace("checkpoint-summary", table("checkpoint-summary", ["figure", { t: "min", n: 1 }, { t: "avg", n: 1 },
    { t: "max", n: 1 }], figures.map(([label, key, fmt]) => {
    const s = summary[key] || {};
    return el("tr", {}, cell(label), cell(fmt(s.min), true), cell(fmt(s.avg), true), cell(fmt(s.max), true));
  })));
  document.getElementById("checkpoint-source").textContent = stats.source === "history"
    ? `from the history file ${stats["history-file"]}` : "from the running job (the history file keeps every one)";
  const rows = (stats.history || []).map(e => el("tr", {
    class: `clickable checkpoint-row${view.checkpoint === e.id ? " selected" : ""}`, "data-id": e.id,
    onclick: () => loadDetails(e.id) },
  cell(e.id, true), el("td", { class: `state ${e.status === "COMPLETED" ? "RUNNING" : e.status === "FAILED" ? "FAILED" : ""}`,
    text: e.status }), cell(e.is_savepoint ? "savepoint" : (e.checkpoint_type || e.mode || "checkpoint")),
  el("td", { title: time(e.trigger_timestamp), text: clock(e.trigger_timestamp) }),
  cell(ms(e.end_to_end_duration), true), cell(bytes(e.state_size), true),
  cell(bytes(e.checkpointed_size), true), cell(ms(e.alignment_duration), true), cell(bytes(e.persisted_data), true),
  cell(`${e.num_acknowledged_subtasks ?? "-"}/${e.num_subtasks ?? "-"}`, true),
  pathCell(e.failure_message || e.external_path || "-")));
  replace("checkpoint-history", table("checkpoint-history", [{ t: "id", n: 1 }, "status", "type", "triggered (UTC)",
    { t: "end to end", n: 1 }, { t: "state size", n: 1 }, { t: "written", n: 1 }, { t: "alignment", n: 1 },
    { t: "in-flight", n: 1 }, { t: "acks", n: 1 }, "path / failure"], rows));
  const config = data.config;
  const configRows = config ? Object.entries(config).map(([k, v]) => el("tr", {}, cell(k.replaceAll("_", " ")),
    cell(typeof v === "object" && v !== null ? JSON.stringify(v) : v === null ? "-" : String(v))))
    : [el("tr", {}, el("td", { colspan: 2, text: "Shown while the job runs." }))];
  replace("checkpoint-config", table("checkpoint-config", ["setting", "value"], configRows));
}

async function loadDetails(checkpointId) {
  view.checkpoint = checkpointId;
  let details;
  try {
    details = await api(`/api/jobs/${view.jobId}/checkpoints/${checkpointId}`);
  } catch (error) {
    replace("checkpoint-details", el("div", { id: "checkpoint-details" },
      el("p", { class: "error", text: `checkpoint ${checkpointId}: ${error.message}` })));
    return;
  }
  view.details = details;
  for (const row of document.querySelectorAll("#checkpoint-history tr.checkpoint-row")) {
    row.classList.toggle("selected", Number(row.dataset.id) === checkpointId);
  }
  const names = new Map(((view.plan && view.plan.nodes) || []).map(n => [n.id, n.name]));
  const rows = (details.subtasks || []).map(s => el("tr", { class: "detail-row" }, cell(names.get(s.vertex) ?? s.vertex),
    cell(s.subtask, true), cell(s.status), cell(clock(s.ack_timestamp)), cell(ms(s.end_to_end_duration), true),
    cell(ms(s.sync_duration), true), cell(ms(s.async_duration), true), cell(ms(s.alignment_duration), true),
    cell(ms(s.start_delay), true), cell(bytes(s.state_size), true), cell(bytes(s.checkpointed_size), true),
    cell(s.unaligned_checkpoint ? "yes" : s.status === "completed" ? "no" : "-")));
  replace("checkpoint-details", el("div", { id: "checkpoint-details" },
    el("h3", { text: `Checkpoint ${details.id}: ${details.status} · per subtask` }),
    table("checkpoint-subtasks", ["vertex", { t: "subtask", n: 1 }, "status", "acknowledged (UTC)",
      { t: "end to end", n: 1 }, { t: "sync", n: 1 }, { t: "async", n: 1 }, { t: "alignment", n: 1 },
      { t: "start delay", n: 1 }, { t: "state size", n: 1 }, { t: "written", n: 1 }, "unaligned"], rows)));
}

// ------------------------------------------------------------------ actions

function actionsBar() {
  const target = el("input", { type: "text", id: "target", placeholder: "savepoint directory (default: the job's)",
    oninput: () => { target.dataset.touched = "1"; } });
  const drain = el("input", { type: "checkbox", id: "drain" });
  return el("div", { class: "actions" },
    el("label", {}, "target ", target),
    el("button", { id: "action-savepoint", onclick: () => act("savepoint") }, "Savepoint"),
    el("button", { id: "action-stop", onclick: () => act("stop") }, "Stop with savepoint"),
    el("label", {}, drain, " drain"),
    el("button", { id: "action-cancel", class: "danger", onclick: () => act("cancel") }, "Cancel"),
    el("ul", { id: "results" }));
}

function addResult(text, kind, location) {
  const item = el("li", { class: kind }, text, location ? el("code", { class: "location", text: location }) : null);
  document.getElementById("results").prepend(item);
  return item;
}

async function act(action) {
  if (action === "cancel" && !window.confirm(`Cancel job ${view.jobId}?`)) return;
  const target = document.getElementById("target").value.trim() || null;
  const drain = document.getElementById("drain").checked;
  const label = { savepoint: "savepoint", stop: "stop with savepoint", cancel: "cancel" }[action];
  const item = addResult(`${label}: requested…`, "pending");
  item.dataset.action = action;
  try {
    const answer = await api(`/api/jobs/${view.jobId}/actions`, { method: "POST",
      body: JSON.stringify({ action, target, drain }) });
    if (action === "cancel") {
      item.textContent = "cancel: requested; the job is CANCELLING";
      item.className = "ok";
      refresh();
      return;
    }
    await follow(answer["request-id"], item, label);
  } catch (error) {
    item.textContent = `${label} failed: ${error.message}`;
    item.className = "failed";
  }
}

async function follow(requestId, item, label) {
  const jobId = view.jobId;
  item.textContent = `${label}: in progress (request ${requestId})`;
  for (;;) {
    const status = await api(`/api/jobs/${jobId}/operations/${requestId}`);
    if (status.status === "COMPLETED") {
      item.replaceChildren(`${label} completed: `, el("code", { class: "location", text: status.location }));
      item.className = "ok";
      refresh();
      return;
    }
    if (status.status === "FAILED") {
      item.textContent = `${label} failed: ${status.failure}`;
      item.className = "failed";
      return;
    }
    await new Promise(resolve => setTimeout(resolve, 300));
  }
}

// ------------------------------------------------------------------ start

window.addEventListener("hashchange", navigate);
navigate();
view.timer = setInterval(refresh, POLL_MS);
