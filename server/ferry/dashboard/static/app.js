// The dashboard page: polls /dashboard/api/metrics every second and /dashboard/api/models every few
// seconds, keeps five minutes of derived points per model version, and draws the selected model's
// charts, the model table, the server's resources and the "try an image" panel.

import { api, AuthCancelled, currentToken, forgetToken, jsonOrError } from "./api.js";
import { DynamicLineChart, formatNumber, LineChart } from "./charts.js";
import { derivePoint, formatBound, recentBatchSizes } from "./stats.js";
import { TryIt } from "./tryit.js";

const POLL_MS = 1000;
const MODELS_EVERY = 5; // refresh the model list every 5 polls
const HISTORY = 300; // points kept per series
const PERCENTILE_WINDOW_S = 5;
const BATCH_WINDOW_S = 60;

const $ = (id) => document.getElementById(id);

const state = {
  overview: null, // /dashboard/api/models
  snapshots: [], // recent /dashboard/api/metrics answers (for windows)
  series: new Map(), // "name/version" -> derived points
  host: { t: [], cpu: [], memory: [], gpus: new Map() },
  selected: null, // model name whose charts are shown
  userSelected: false, // until the user picks a model, the busiest one is shown
  polls: 0,
  paused: false,
  timer: null,
};

// --- derived series ------------------------------------------------------------------------

function modelKey(entry) {
  return `${entry.name}/${entry.version}`;
}

function newSeries() {
  return { t: [], requestsPerSecond: [], inferencesPerSecond: [], p50: [], p95: [], p99: [], p50Beyond: [],
           p95Beyond: [], p99Beyond: [], queueMs: [],
           computeMs: [], endToEndMs: [], failures: new Map() };
}

function push(array, value) {
  array.push(value);
  if (array.length > HISTORY) array.shift();
}

/** The most recent snapshot taken at least `seconds` before `time` (the oldest one otherwise). */
function snapshotBefore(time, seconds) {
  const older = state.snapshots.filter((s) => s.time <= time - seconds);
  return older.length ? older[older.length - 1] : state.snapshots[0];
}

function modelEntry(snapshot, key) {
  return snapshot?.models.find((m) => modelKey(m) === key);
}

function ingest(snapshot) {
  const previous = state.snapshots[state.snapshots.length - 1];
  state.snapshots.push(snapshot);
  while (state.snapshots.length > 2 && state.snapshots[1].time <= snapshot.time - BATCH_WINDOW_S) state.snapshots.shift();
  if (previous) {
    const seconds = snapshot.time - previous.time;
    const windowStart = snapshotBefore(snapshot.time, PERCENTILE_WINDOW_S);
    for (const entry of snapshot.models) {
      const key = modelKey(entry);
      if (!state.series.has(key)) state.series.set(key, newSeries());
      const series = state.series.get(key);
      const point = derivePoint(entry, modelEntry(previous, key), seconds, modelEntry(windowStart, key));
      push(series.t, snapshot.time);
      for (const name of ["requestsPerSecond", "inferencesPerSecond", "p50", "p95", "p99", "p50Beyond", "p95Beyond",
                          "p99Beyond", "queueMs", "computeMs", "endToEndMs"]) push(series[name], point[name]);
      for (const [reason, value] of Object.entries(point.failures)) {
        if (!series.failures.has(reason)) series.failures.set(reason, series.t.slice(0, -1).map(() => null));
        push(series.failures.get(reason), value);
      }
      for (const [reason, values] of series.failures) if (values.length < series.t.length) push(values, null);
    }
  }
  const host = state.host;
  push(host.t, snapshot.time);
  const h = snapshot.host;
  push(host.cpu, h.nv_cpu_utilization !== undefined ? h.nv_cpu_utilization * 100 : null);
  push(host.memory, h.nv_cpu_memory_total_bytes ? (100 * h.nv_cpu_memory_used_bytes) / h.nv_cpu_memory_total_bytes : null);
  for (const gpu of snapshot.gpus) {
    if (!host.gpus.has(gpu.gpu)) host.gpus.set(gpu.gpu, { util: host.t.slice(0, -1).map(() => null), memory: host.t.slice(0, -1).map(() => null) });
    const g = host.gpus.get(gpu.gpu);
    push(g.util, gpu.nv_gpu_utilization !== undefined ? gpu.nv_gpu_utilization * 100 : null);
    push(g.memory, gpu.nv_gpu_memory_total_bytes ? (100 * gpu.nv_gpu_memory_used_bytes) / gpu.nv_gpu_memory_total_bytes : null);
  }
}

// --- model table ---------------------------------------------------------------------------

function servedVersion(model) {
  const ready = model.versions.filter((v) => v.state === "READY");
  return ready.length ? ready.reduce((a, b) => (Number(a.version) >= Number(b.version) ? a : b)) : null;
}

function latest(array) {
  for (let i = array.length - 1; i >= 0 && i >= array.length - 3; i--) if (array[i] !== null) return array[i];
  return null;
}

/** The latest value of percentile `name` ("p95") as the bucket bound it is: "≤ 50", "> 1000" or "–". */
function percentile(series, name) {
  const values = series[name];
  const beyond = series[`${name}Beyond`];
  for (let i = values.length - 1; i >= 0 && i >= values.length - 3; i--) {
    if (values[i] !== null) return formatBound(values[i], beyond[i], formatNumber);
  }
  return "–";
}

function cell(text, className = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function button(text, onClick, attributes = {}) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.addEventListener("click", onClick);
  for (const [k, v] of Object.entries(attributes)) b.setAttribute(k, v);
  return b;
}

function describeInstances(version) {
  if (!version?.instances) return "–";
  const groups = new Map();
  for (const instance of version.instances) {
    const key = `${instance.kind} · ${instance.device}`;
    groups.set(key, (groups.get(key) || 0) + 1);
  }
  return [...groups].map(([key, count]) => `${count} × ${key}`).join(", ");
}

function describeBatching(version) {
  if (!version || version.max_batch_size === undefined) return "–";
  if (!version.max_batch_size) return "no batching";
  const parts = [`max ${version.max_batch_size}`];
  const dynamic = version.dynamic_batching;
  if (dynamic) {
    parts.push(`dynamic, delay ${dynamic.max_queue_delay_us} µs`);
    if (dynamic.preferred_batch_sizes.length) parts.push(`preferred ${dynamic.preferred_batch_sizes.join("/")}`);
  } else {
    parts.push("no dynamic batching");
  }
  return parts.join(" · ");
}

/** Rebuild the table when the model list or the selection changed; otherwise only its numbers. */
function renderModels() {
  const overview = state.overview;
  if (!overview) return;
  const key = JSON.stringify([overview, state.selected]);
  if (key !== state.tableKey) {
    state.tableKey = key;
    buildModelRows(overview);
  }
  for (const row of $("model-rows").rows) {
    const model = overview.models.find((m) => m.name === row.dataset.model);
    const served = model ? servedVersion(model) : null;
    const series = served ? state.series.get(`${model.name}/${served.version}`) : null;
    row.querySelector(".throughput").textContent = series ? formatNumber(latest(series.requestsPerSecond), 1) : "–";
    row.querySelector(".p95").textContent = series ? percentile(series, "p95") : "–";
  }
}

function buildModelRows(overview) {
  const tbody = $("model-rows");
  const rows = [];
  for (const model of overview.models) {
    const served = servedVersion(model);
    const tr = document.createElement("tr");
    tr.dataset.model = model.name;
    if (model.name === state.selected) tr.classList.add("selected");
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = model.name;
    tr.append(th);
    const versions = model.versions.length
      ? model.versions.map((v) => `v${v.version || "?"} ${v.state}`).join(", ")
      : "not loaded";
    const stateCell = cell(versions, "state");
    const reasons = model.versions.filter((v) => v.reason).map((v) => `v${v.version}: ${v.reason}`).join("; ");
    if (reasons) {
      const reason = document.createElement("div");
      reason.className = "reason";
      reason.textContent = reasons;
      stateCell.append(reason);
    }
    stateCell.dataset.state = served ? "READY" : model.versions[0]?.state || "UNLOADED";
    tr.append(stateCell, cell(served?.platform ?? "–"), cell(describeInstances(served)), cell(describeBatching(served)),
              cell("–", "num throughput"), cell("–", "num p95"));
    const actions = document.createElement("td");
    actions.className = "actions";
    if (served) {
      actions.append(button("Charts", () => select(model.name), {
        "aria-pressed": String(model.name === state.selected), "aria-label": `Show charts for ${model.name}`,
      }));
    }
    if (overview.repository_api) {
      if (served) actions.append(button("Unload", () => repositoryAction(model.name, "unload"), { "aria-label": `Unload ${model.name}` }));
      actions.append(button(served ? "Reload" : "Load", () => repositoryAction(model.name, "load"),
                            { "aria-label": `${served ? "Reload" : "Load"} ${model.name}` }));
    }
    tr.append(actions);
    rows.push(tr);
  }
  // Keep the focused button focused when the rows are rebuilt.
  const focused = document.activeElement;
  const focusKey = tbody.contains(focused) ? [focused.closest("tr")?.dataset.model, focused.textContent] : null;
  tbody.replaceChildren(...rows);
  if (focusKey) {
    const row = [...tbody.rows].find((r) => r.dataset.model === focusKey[0]);
    const buttons = [...(row?.querySelectorAll("button") || [])];
    (buttons.find((b) => b.textContent === focusKey[1]) || buttons[0])?.focus(); // "Load" may now be "Reload"
  }
  $("repo-note").textContent = overview.repository_api
    ? "Load, reload and unload go through the repository API (explicit model control mode)."
    : `Model control mode '${overview.control_mode}': load and unload are disabled on this server.`;
}

async function repositoryAction(name, action) {
  const status = $("action-status");
  status.textContent = `${action === "load" ? "Loading" : "Unloading"} ${name}…`;
  try {
    await jsonOrError(await api(`v2/repository/models/${encodeURIComponent(name)}/${action}`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
    }));
    status.textContent = `${name}: ${action} done.`;
  } catch (error) {
    status.textContent = error instanceof AuthCancelled ? `${name}: not ${action}ed, no token given.`
      : error.status === 403 ? `${name}: this token may not ${action} models.` : `${name}: ${action} failed: ${error.message}`;
  }
  await refreshModels();
}

// --- charts of the selected model ------------------------------------------------------------

const charts = {};

function createCharts() {
  charts.throughput = new LineChart($("chart-throughput"), [{ label: "requests/s" }, { label: "inferences/s" }]);
  charts.latency = new LineChart($("chart-latency"), [{ label: "p50 ≤" }, { label: "p95 ≤" }, { label: "p99 ≤" }],
                                 { unit: " ms" });
  charts.time = new LineChart($("chart-time"), [{ label: "queue" }, { label: "compute" }, { label: "end to end" }],
                              { unit: " ms" });
  charts.failures = new DynamicLineChart($("chart-failures"), { unit: "/s" });
  charts.host = new DynamicLineChart($("chart-host"), { unit: "%", yRange: [0, 100] });
}

function select(name) {
  state.selected = name;
  state.userSelected = true;
  const url = new URL(window.location.href);
  url.hash = `model=${encodeURIComponent(name)}`;
  window.history.replaceState(null, "", url);
  renderModels();
  renderSelected();
}

function renderSelected() {
  const model = state.overview?.models.find((m) => m.name === state.selected);
  const served = model ? servedVersion(model) : null;
  $("details-title").textContent = served ? `Charts: ${model.name} v${served.version}` : "Charts";
  const series = served ? state.series.get(`${model.name}/${served.version}`) : null;
  if (!series) {
    $("details-summary").textContent = served ? "Waiting for data…" : "Choose a loaded model with its Charts button.";
    for (const c of [charts.throughput, charts.latency, charts.time]) c.update([], [[], [], []]);
    charts.failures.update([], []);
    $("batch-bars").replaceChildren();
    return;
  }
  charts.throughput.update(series.t, [series.requestsPerSecond, series.inferencesPerSecond]);
  charts.latency.update(series.t, [series.p50, series.p95, series.p99]);
  charts.time.update(series.t, [series.queueMs, series.computeMs, series.endToEndMs]);
  charts.failures.update(series.t, [...series.failures].map(([reason, values]) => ({ label: reason, values })));
  const rps = latest(series.requestsPerSecond);
  const failed = [...series.failures].reduce((total, [, values]) => total + (latest(values) || 0), 0);
  $("details-summary").textContent = `${formatNumber(rps, 1)} requests/s, ${formatNumber(latest(series.inferencesPerSecond), 1)} inferences/s; `
    + `latency p50 ${percentile(series, "p50")} ms, p95 ${percentile(series, "p95")} ms, p99 ${percentile(series, "p99")} ms `
    + `(bucket bounds, last ${PERCENTILE_WINDOW_S} s); queue ${formatNumber(latest(series.queueMs))} ms, compute ${formatNumber(latest(series.computeMs))} ms per request; `
    + `${formatNumber(failed, 1)} failures/s.`;
  $("details-summary").dataset.requestsPerSecond = String(rps ?? 0);
  renderBatchSizes(model, served);
}

function renderBatchSizes(model, served) {
  const key = `${model.name}/${served.version}`;
  const now = state.snapshots[state.snapshots.length - 1];
  const rows = recentBatchSizes(modelEntry(now, key), modelEntry(snapshotBefore(now.time, BATCH_WINDOW_S), key),
                                served.max_batch_size);
  const total = rows.reduce((sum, r) => sum + r.count, 0);
  const list = $("batch-bars");
  list.replaceChildren(...rows.map((r) => {
    const li = document.createElement("li");
    const label = document.createElement("span");
    label.className = "bar-label";
    label.textContent = r.label;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${total ? (100 * r.count) / total : 0}%`;
    const count = document.createElement("span");
    count.className = "bar-count";
    count.textContent = `${r.count}`;
    li.append(label, bar, count);
    li.setAttribute("aria-label", `batch size ${r.label}: ${r.count} executions`);
    return li;
  }));
  $("batch-caption").textContent = `Batch sizes, executions in the last ${BATCH_WINDOW_S} s (${total} in all)`;
}

// --- server resources ----------------------------------------------------------------------

function formatBytes(bytes) {
  if (bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

function renderHost(snapshot) {
  const h = snapshot.host;
  const tiles = [
    ["CPU", h.nv_cpu_utilization !== undefined ? `${(h.nv_cpu_utilization * 100).toFixed(0)}%` : "–"],
    ["Memory", `${formatBytes(h.nv_cpu_memory_used_bytes)} / ${formatBytes(h.nv_cpu_memory_total_bytes)}`],
    ["Server process", formatBytes(h.ferry_process_resident_memory_bytes)],
  ];
  for (const gpu of snapshot.gpus) {
    tiles.push([`GPU ${gpu.gpu}`, `${gpu.nv_gpu_utilization !== undefined ? (gpu.nv_gpu_utilization * 100).toFixed(0) : "–"}% · `
      + `${formatBytes(gpu.nv_gpu_memory_used_bytes)} / ${formatBytes(gpu.nv_gpu_memory_total_bytes)}`]);
  }
  if (!snapshot.gpus.length) tiles.push(["GPU", "none found"]);
  $("host").replaceChildren(...tiles.flatMap(([name, value]) => {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value;
    div.append(dt, dd);
    return [div];
  }));
  const host = state.host;
  const series = [{ label: "CPU", values: host.cpu }, { label: "memory", values: host.memory }];
  for (const [index, g] of host.gpus) {
    series.push({ label: `GPU ${index}`, values: g.util }, { label: `GPU ${index} memory`, values: g.memory });
  }
  charts.host.update(host.t, series);
}

// --- polling -------------------------------------------------------------------------------

function setConnection(ok, message) {
  const pill = $("server-state");
  pill.textContent = ok ? "live" : message;
  pill.dataset.ok = String(ok);
}

/** Until the user picks one, show the model with the most requests per second. */
function followBusiest() {
  if (state.userSelected || !state.overview) return;
  let best = null;
  let bestRate = 0;
  for (const model of state.overview.models) {
    const served = servedVersion(model);
    const rate = served ? latest(state.series.get(`${model.name}/${served.version}`)?.requestsPerSecond || []) : null;
    if (rate !== null && rate > bestRate) [best, bestRate] = [model.name, rate];
  }
  if (best) state.selected = best;
}

async function refreshModels() {
  state.overview = await jsonOrError(await api("dashboard/api/models"));
  if (!state.selected || !state.overview.models.some((m) => m.name === state.selected && servedVersion(m))) {
    const first = state.overview.models.find((m) => servedVersion(m));
    state.selected = first ? first.name : null;
  }
  tryIt.setModels(state.overview.models);
  renderModels();
}

async function poll() {
  state.timer = null;
  try {
    if (!state.overview || state.polls % MODELS_EVERY === 0) await refreshModels();
    state.polls += 1;
    const snapshot = await jsonOrError(await api("dashboard/api/metrics"));
    ingest(snapshot);
    followBusiest();
    renderHost(snapshot);
    renderModels();
    renderSelected();
    setConnection(true);
    $("banner").hidden = true;
  } catch (error) {
    if (error instanceof AuthCancelled) {
      pause("The server needs a bearer token to show anything.");
      return;
    }
    setConnection(false, "unreachable");
    showBanner(`Cannot reach the server: ${error.message}. Retrying…`);
  }
  if (!state.paused) state.timer = setTimeout(poll, POLL_MS);
}

function showBanner(text, withTokenButton = false) {
  const banner = $("banner");
  const p = document.createElement("p");
  p.textContent = text;
  banner.replaceChildren(p);
  if (withTokenButton) banner.append(button("Enter token", resume));
  banner.hidden = false;
}

function pause(text) {
  state.paused = true;
  setConnection(false, "paused");
  showBanner(text, true);
}

function resume() {
  state.paused = false;
  $("banner").hidden = true;
  if (!state.timer) poll();
}

function renderTokenButton() {
  $("token-button").hidden = !currentToken();
}

// --- start ---------------------------------------------------------------------------------

const tryIt = new TryIt();

async function start() {
  const hash = new URLSearchParams(window.location.hash.slice(1));
  state.selected = hash.get("model");
  state.userSelected = Boolean(state.selected);
  createCharts();
  renderTokenButton();
  document.addEventListener("ferry-token", renderTokenButton);
  $("token-button").addEventListener("click", () => {
    forgetToken();
    $("action-status").textContent = "Token forgotten.";
  });
  try {
    const metadata = await jsonOrError(await api("v2"));
    $("server-version").textContent = `${metadata.name} ${metadata.version}`;
  } catch (error) {
    if (error instanceof AuthCancelled) return pause("The server needs a bearer token to show anything.");
  }
  poll();
}

start();
