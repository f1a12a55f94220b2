// The GPUs page (shown when the daemon's GPU backend reports GPUs): memory per GPU, what the
// models placed by memory reserve there, and which model holds what. From `GET /api/status`,
// fetched again on every model change; GPU memory itself has no event, so while this page is
// open it is read again every few seconds.

import { bytes, el } from "./dom.js";
import { showCurrentTab } from "./nav.js";
import { refresh, store, subscribe } from "./store.js";

const REREAD_MS = 5000;
let timer = 0;

// The models running on `gpu` (an `/api/status` GPU: `index`, `uuid`), each with the bytes it
// holds there where swapd knows them (reserved by placement, else learned). The Hardware page
// shows them too.
export function holders(gpu) {
  const out = [];
  for (const m of (store.status && store.status.models) || []) {
    if (m.state === "stopped" || m.state === "failed") continue;
    const ids = (m.gpus || []).map(String);
    if (!ids.includes(String(gpu.index)) && !ids.includes(gpu.uuid)) continue;
    const held = (m.reserved || {})[gpu.uuid] || (m.footprint || {})[gpu.uuid];
    out.push({ model: m.model, state: m.state, held });
  }
  return out;
}

function card(gpu) {
  const total = gpu.total_bytes || 1;
  const used = el("span", { class: "gpu-used", title: `used ${bytes(gpu.used_bytes)}` });
  used.style.width = `${(100 * gpu.used_bytes) / total}%`;
  const extra = Math.max(0, (gpu.reserved_bytes || 0) - gpu.used_bytes);
  const reserved = el("span", { class: "gpu-reserved", title: `reserved ${bytes(gpu.reserved_bytes)}` });
  reserved.style.width = `${(100 * extra) / total}%`;
  const list = holders(gpu);
  return el(
    "article",
    { class: "card", "data-gpu": gpu.uuid },
    el("div", { class: "card-head" },
      el("span", { class: "name", text: `GPU ${gpu.index}` }),
      el("span", { class: "desc", text: gpu.name })),
    el("div", { class: "gpu-bar" }, used, reserved),
    el("dl", { class: "facts" },
      el("dt", { text: "used" }), el("dd", { text: `${bytes(gpu.used_bytes)} of ${bytes(gpu.total_bytes)}` }),
      el("dt", { text: "free" }), el("dd", { text: bytes(gpu.free_bytes) }),
      el("dt", { text: "reserved" }), el("dd", { text: bytes(gpu.reserved_bytes || 0) }),
      el("dt", { text: "uuid" }), el("dd", { text: gpu.uuid })),
    list.length
      ? el("ul", { class: "holders" }, list.map((h) =>
        el("li", { "data-holder": h.model, text: `${h.model} (${h.state})${h.held ? `: ${bytes(h.held)}` : ""}` })))
      : el("div", { class: "desc", text: "no model on it" }),
  );
}

function render() {
  const gpus = (store.status && store.status.gpus) || [];
  const tab = document.getElementById("gpus-tab");
  if (tab.hidden !== (gpus.length === 0)) {
    tab.hidden = gpus.length === 0;
    showCurrentTab();
  }
  const backend = store.status ? store.status.gpu_backend : "";
  document.getElementById("gpu-backend").textContent = backend ? `GPU backend: ${backend}` : "";
  document.getElementById("gpu-cards").replaceChildren(...gpus.map(card));
}

export function show() {
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REREAD_MS);
}

export function hide() {
  clearInterval(timer);
  timer = 0;
}

export function init() {
  subscribe(render);
}
