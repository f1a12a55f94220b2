// The Hardware page: the host (CPU, memory) and each GPU (memory, utilisation, temperature) over
// time, with which model holds what. `GET /api/hardware` once (what the machine is), then
// `GET /api/performance?after=<the newest sample's timestamp>` every sampling period while the
// page is shown (the daemon samples only while someone reads: docs/endpoints.md, "Performance
// and hardware"); the models on each GPU come from `/api/status`, as on the GPUs page.

import { getJSON } from "./api.js";
import { bytes, el, epoch, fill, number } from "./dom.js";
import { holders } from "./gpus.js";
import { noGpuWords } from "./measured.js";
import { modelHref } from "./nav.js";
import { refresh, store, subscribe } from "./store.js";
import { timeChart } from "./time_chart.js";

const KEEP_S = 3600; // the daemon keeps an hour of samples; so does the page
const DEFAULT_EVERY_S = 5;

const state = {
  hardware: null, // GET /api/hardware
  sys: [], // sys_stats entries, oldest first
  gpus: new Map(), // uuid -> gpu_stats entries, oldest first
  newest: "", // the newest sample's timestamp (RFC 3339), for `after`
  enabled: true,
  error: "",
};
let timer = 0;
let shown = false;
let reading = false;

const view = () => document.getElementById("hw-view");
const pct = (v) => `${Math.round(v)} %`;
const celsius = (v) => `${Math.round(v)} °C`;
const gib = (mb) => `${(mb / 1024).toFixed(1)} GiB`;
// On an axis: `80 GiB` for a whole number, `23.5 GiB` else, and a bare 0.
const gibAxis = (mb) => (mb === 0 ? "0" : gib(mb).replace(".0 GiB", " GiB"));

function every() {
  const p = store.status && store.status.performance;
  return Math.max(1, (p && p.every) || DEFAULT_EVERY_S);
}

function prune() {
  const newest = state.sys.length ? epoch(state.sys[state.sys.length - 1].timestamp) : 0;
  const old = (s) => epoch(s.timestamp) < newest - KEEP_S;
  while (state.sys.length && old(state.sys[0])) state.sys.shift();
  for (const list of state.gpus.values()) while (list.length && old(list[0])) list.shift();
}

async function read() {
  if (reading) return;
  reading = true;
  try {
    if (!state.hardware) {
      try { state.hardware = await getJSON("/api/hardware"); } catch { state.hardware = null; }
    }
    const after = state.newest ? `?after=${encodeURIComponent(state.newest)}` : "";
    let doc;
    try {
      doc = await getJSON(`/api/performance${after}`);
    } catch (err) {
      // 503 `{"enabled": false}`: `performance.disabled` in the config.
      state.enabled = err.status !== 503;
      state.error = state.enabled ? err.message : "";
      render();
      return;
    }
    state.enabled = doc.enabled !== false;
    state.error = "";
    for (const s of doc.sys_stats || []) {
      state.sys.push(s);
      if (s.timestamp > state.newest) state.newest = s.timestamp;
    }
    for (const g of doc.gpu_stats || []) {
      if (!state.gpus.has(g.uuid)) state.gpus.set(g.uuid, []);
      state.gpus.get(g.uuid).push(g);
      if (g.timestamp > state.newest) state.newest = g.timestamp;
    }
    prune();
    render();
  } finally {
    reading = false;
  }
}

function fact(dt, dd) {
  return [el("dt", { text: dt }), el("dd", {}, dd)];
}

function points(list, value) {
  return list.map((s) => [epoch(s.timestamp), value(s)]);
}

function average(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

function hostCard() {
  const hw = state.hardware || {};
  const cpu = hw.cpu || {};
  const os = hw.operating_system || {};
  const env = hw.environment || {};
  const last = state.sys[state.sys.length - 1];
  const threads = cpu.logical_thread_count;
  const cores = cpu.physical_core_count;
  const facts = [
    cpu.model ? fact("CPU", cpu.model) : null,
    threads || cores ? fact("cores", [cores ? `${cores} cores` : null, threads ? `${threads} threads` : null].filter(Boolean).join(", ")) : null,
    hw.memory && hw.memory.capacity_bytes ? fact("memory", bytes(hw.memory.capacity_bytes)) : null,
    os.name ? fact("system", [`${os.name}${os.version ? ` ${os.version}` : ""}`, os.kernel ? `kernel ${os.kernel}` : null].filter(Boolean).join(", ")) : null,
    hw.architecture && hw.architecture.name ? fact("architecture", hw.architecture.name) : null,
    env.kind && env.kind !== "unknown" ? fact("runs", env.kind === "native" ? "natively" : `in a ${env.kind.replace("_", " ")}${env.name ? ` (${env.name})` : ""}`) : null,
    last ? fact("load", `${last.load_avg_1.toFixed(2)} · ${last.load_avg_5.toFixed(2)} · ${last.load_avg_15.toFixed(2)} (1, 5, 15 min)`) : null,
    last && last.swap_total_mb ? fact("swap", `${gib(last.swap_used_mb)} of ${gib(last.swap_total_mb)}`) : null,
  ];
  const total = last ? last.mem_total_mb : 0;
  return el(
    "article",
    { class: "card hw-card", "data-hw": "host" },
    el("div", { class: "card-head" }, el("span", { class: "name", text: "Host" }),
      cpu.model ? el("span", { class: "desc", text: cpu.vendor || "" }) : null),
    el("dl", { class: "facts" }, facts),
    el("div", { class: "charts" },
      timeChart({
        role: "cpu", title: "CPU utilisation (all cores)", max: 100, format: pct,
        series: [
          { name: "average", cls: "s1", points: points(state.sys, (s) => average(s.cpu_util_per_core || [])) },
          { name: "busiest core", cls: "s2", points: points(state.sys, (s) => Math.max(0, ...(s.cpu_util_per_core || [0]))) },
        ],
      }),
      timeChart({
        role: "memory", title: total ? `memory used, of ${gib(total)}` : "memory used", max: total || null, format: gib, axis: gibAxis,
        series: [{ name: "used", cls: "s1", points: points(state.sys, (s) => s.mem_used_mb) }],
      })),
  );
}

// The GPU's entry in `/api/status` (its index, reserved bytes), for the models on it.
function statusGpu(uuid) {
  return ((store.status && store.status.gpus) || []).find((g) => g.uuid === uuid) || null;
}

function gpuCard(uuid, list) {
  const last = list[list.length - 1];
  const known = statusGpu(uuid) || { index: last.id, uuid };
  const on = holders(known);
  const hw = ((state.hardware && state.hardware.accelerators) || []).find((a) => a.index === last.id) || {};
  const facts = [
    fact("memory", `${gib(last.mem_used_mb)} of ${gib(last.mem_total_mb)} (${pct(last.mem_util_pct)})`),
    fact("utilisation", pct(last.gpu_util_pct)),
    fact("temperature", celsius(last.temp_c) + (last.vram_temp_c ? `, memory ${celsius(last.vram_temp_c)}` : "")),
    last.power_draw_w ? fact("power", `${Math.round(last.power_draw_w)} W${hw.power_limit_watts ? ` of ${Math.round(hw.power_limit_watts)} W` : ""}`) : null,
    last.fan_speed_pct ? fact("fan", pct(last.fan_speed_pct)) : null,
    hw.driver && hw.driver.version ? fact("driver", hw.driver.version) : null,
    fact("uuid", uuid),
  ];
  return el(
    "article",
    { class: "card hw-card", "data-hw-gpu": uuid },
    el("div", { class: "card-head" },
      el("span", { class: "name", text: `GPU ${last.id}` }),
      el("span", { class: "desc", text: last.name })),
    el("dl", { class: "facts" }, facts),
    on.length
      ? el("ul", { class: "holders", "aria-label": "models on it" }, on.map((h) => el(
        "li", { "data-holder": h.model },
        el("a", { href: modelHref(h.model), text: h.model }),
        ` (${h.state})${h.held ? `: ${bytes(h.held)}` : ""}`,
      )))
      : el("p", { class: "hint", text: "no model on it" }),
    el("div", { class: "charts" },
      timeChart({
        role: "gpu-memory", title: `memory used, of ${gib(last.mem_total_mb)}`, max: last.mem_total_mb || null, format: gib, axis: gibAxis,
        series: [{ name: "used", cls: "s1", points: points(list, (g) => g.mem_used_mb) }],
      }),
      timeChart({
        role: "gpu-util", title: "utilisation", max: 100, format: pct,
        series: [{ name: "utilisation", cls: "s2", points: points(list, (g) => g.gpu_util_pct) }],
      }),
      timeChart({
        role: "gpu-temp", title: "temperature", max: 100, format: celsius,
        series: [{ name: "temperature", cls: "s3", points: points(list, (g) => g.temp_c) }],
      })),
  );
}

function render() {
  if (!shown) return;
  const every_s = every();
  const intro = state.enabled
    ? `Sampled by the daemon every ${number(every_s)} s while someone reads (this page, /metrics); the page keeps the last hour.`
    : "Performance sampling is off (performance.disabled in the config): what the machine is, without figures over time.";
  const gpus = [...state.gpus.entries()].sort((a, b) => a[1][0].id - b[1][0].id);
  fill(
    view(),
    el("p", { class: "hint", "data-role": "hw-intro", text: intro }),
    state.error ? el("p", { class: "reason", text: `performance: ${state.error}` }) : null,
    el("div", { class: "cards hw-cards" },
      hostCard(),
      gpus.map(([uuid, list]) => gpuCard(uuid, list))),
    gpus.length ? null : el("p", { class: "hint", "data-role": "no-gpus", text: noGpuWords(store.status && store.status.gpu_backend) }),
  );
}

export function show() {
  shown = true;
  render();
  refresh(); // the models on each GPU, now
  read();
  clearInterval(timer);
  timer = setInterval(read, every() * 1000);
}

export function hide() {
  shown = false;
  clearInterval(timer);
  timer = 0;
}

export function init() {
  // A model started or stopped: who is on which GPU.
  subscribe(() => { if (shown) render(); });
}
