// The Activity page: requests under way (the `inflight` events, every proxy process's) with a
// cancel button, and the request log (activity_table.js: totals, speed histograms, filters,
// sorting, columns, export); a capture viewer for records that have one. The log is read from
// `GET /api/metrics/activity`: once when the event stream (re)connects, then the records newer
// than those shown whenever `activity` events (llama-swap's `{id}`) announce some, at most once
// every REFRESH_MS, as llama-swap's page does.

import { ActivityTable } from "./activity_table.js";
import { encode, getJSON, send } from "./api.js";
import { bytes, clock, el, epoch, labelled, seconds, toast } from "./dom.js";
import * as events from "./events.js";
import { modelStatus, stateOf, store, subscribe, tableItem } from "./store.js";
import { requestWaitText } from "./waits.js";

// The newest records read and kept here (the activity API's largest page).
const MAX_RECORDS = 999;
const REFRESH_MS = 250;
const records = new Map();
let newest = 0; // the newest record read
let announced = 0; // the newest an `activity` event named
let previous = 0; // the last `activity` event's id
let timer = null;
let reading = false;
let total = 0; // records the daemon keeps in all
let table = null;

// A body as the capture holds it (base64 in llama-swap's JSON): text when it is UTF-8, pretty
// when it is JSON, else its size.
function bodyText(b64) {
  if (b64 === null || b64 === undefined) return "(not captured)";
  let bytes;
  try { bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)); } catch { return String(b64); }
  let text;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch {
    return `(${bytes.length} bytes of binary data)`;
  }
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

function headerText(headers) {
  return Object.entries(headers || {}).map(([k, v]) => `${k}: ${v}`).join("\n") || "(none)";
}

function part(name, title, headers, body) {
  return el(
    "section",
    { class: "capture-part", "data-part": name },
    el("h4", { text: title }),
    el("pre", { class: "headers", text: headerText(headers) }),
    el("pre", { class: "body", text: bodyText(body) }),
  );
}

export async function showCapture(r) {
  const dialog = document.getElementById("capture");
  const title = document.getElementById("capture-title");
  const body = document.getElementById("capture-body");
  title.textContent = `${r.method || ""} ${r.req_path} → ${r.resp_status_code} · ${r.model} · #${r.id}`;
  body.replaceChildren(el("p", { class: "hint", text: "loading…" }));
  dialog.showModal();
  try {
    const c = await getJSON(`/api/captures/${encode(r.id)}`);
    body.replaceChildren(
      part("request", "Request", c.req_headers, c.req_body),
      part("response", "Response", c.resp_headers, c.resp_body),
    );
  } catch (err) {
    body.replaceChildren(el("p", { class: "hint", text: `capture ${r.id} is not available (${err.message})` }));
  }
}

// The capture column's cell: a button that opens the viewer, where the record has a capture.
export function captureButton(r) {
  return r.has_capture
    ? el("button", { "data-action": "capture", text: "capture", onclick: () => showCapture(r) })
    : null;
}

function renderActivity(fresh) {
  table.update([...records.values()], fresh, total);
}

// The newest MAX_RECORDS records, read `after` the newest shown (0: from scratch).
async function read(after) {
  const since = after > 0 ? `&min_id=${after + 1}` : "";
  const page = await getJSON(`/api/metrics/activity?limit=${MAX_RECORDS}${since}`);
  if (after === 0) {
    records.clear();
    total = page.total || 0;
  }
  const fresh = new Set();
  for (const r of page.data || []) {
    if (after > 0 && !records.has(r.id)) total += 1;
    records.set(r.id, r);
    if (after > 0) fresh.add(r.id);
    if (r.id > newest) newest = r.id;
  }
  for (const id of [...records.keys()].sort((a, b) => b - a).slice(MAX_RECORDS)) records.delete(id);
  renderActivity(fresh);
}

async function refresh() {
  timer = null;
  reading = true;
  try {
    await read(newest);
  } catch (err) {
    console.warn("activity", err);
    announced = newest; // the next event tries again
  } finally {
    reading = false;
  }
  if (announced > newest) later();
}

function later() {
  if (timer === null && !reading) timer = setTimeout(refresh, REFRESH_MS);
}

async function cancel(button, id) {
  button.disabled = true;
  try {
    await send("POST", `/api/inflight/${encode(id)}/cancel`);
  } catch (err) {
    toast(`cancel failed: ${err.message}`);
    button.disabled = false;
  }
}

// The client's User-Agent among an in-flight entry's request headers (one value per name, as
// the client spelled the name).
function userAgent(f) {
  for (const [name, value] of Object.entries(f.req_headers || {})) {
    if (name.toLowerCase() === "user-agent") return value;
  }
  return "";
}

// What an in-flight request waits for before its response's head came: a swap to its model and
// what that waits for, or its model's start (the words of the Playground's waiting line); ""
// once its model is ready or its answer began.
function waitsFor(f) {
  if (f.resp_headers && Object.keys(f.resp_headers).length) return "";
  const item = tableItem(f.model);
  return requestWaitText(f.model, item ? stateOf(item) : "", modelStatus(f.model)) || "";
}

function renderInflight() {
  const body = document.querySelector("#inflight tbody");
  const flights = [...store.inflight.values()].sort((a, b) => epoch(a.timestamp) - epoch(b.timestamp));
  // An entry is upserted again as its response streams (every 250 ms): the same requests keep
  // their rows (a Cancel button under the pointer stays where it is), only the bytes sent change.
  const shown = [...body.querySelectorAll("tr[data-inflight]")].map((tr) => tr.dataset.inflight);
  if (shown.length === flights.length && flights.every((f, i) => f.id === shown[i])) {
    for (const f of flights) {
      const row = body.querySelector(`tr[data-inflight="${CSS.escape(f.id)}"]`);
      const cell = row && row.querySelector('[data-role="sent"]');
      if (cell) cell.textContent = bytes(f.resp_bytes || 0);
      const waits = row && row.querySelector('[data-role="waiting"]');
      if (waits) waits.textContent = waitsFor(f);
    }
    return;
  }
  if (flights.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: "7", text: "nothing in flight" })));
    return;
  }
  body.replaceChildren(...flights.map((f) => {
    const button = el("button", { class: "danger", text: "Cancel" });
    button.addEventListener("click", () => cancel(button, f.id));
    const at = epoch(f.timestamp);
    return el(
      "tr",
      { "data-inflight": f.id },
      el("td", { text: clock(at) }),
      el("td", { text: f.model }),
      el("td", { class: "wrap" }, `${f.method} ${f.req_path}`, el("div", { class: "sub waits", "data-role": "waiting", text: waitsFor(f) })),
      el("td", { class: "wrap ua", "data-role": "client", title: f.remote_ip ? `from ${f.remote_ip}` : null, text: userAgent(f) || f.remote_ip || "–" }),
      el("td", { class: "num", "data-role": "sent", text: bytes(f.resp_bytes || 0) }),
      el("td", { class: "num" }, el("span", { "data-since": String(at), text: seconds(Date.now() / 1000 - at) })),
      el("td", {}, button),
    );
  }));
  labelled(document.getElementById("inflight"));
}

async function load() {
  newest = 0;
  try {
    await read(0);
  } catch (err) {
    console.warn("activity", err);
    renderActivity(new Set());
  }
}

// `#activity/<model>`: the log of that model only (the model filter set).
export function show(arg) {
  if (arg) table.setFilter("model", arg);
}

export function init() {
  table = new ActivityTable({
    capture: captureButton,
    local: (id) => store.table.some((m) => m.id === id && !m.peerID),
  });
  events.on("activity", (a) => {
    if (!a) return;
    const renumbered = a.id <= previous;
    previous = a.id;
    if (renumbered) {
      // The events' ids only grow: this is the daemon numbering again from 1 (restarted
      // without `store.path`), so the log is read from scratch.
      announced = a.id;
      load();
      return;
    }
    if (a.id > announced) announced = a.id;
    if (announced > newest) later();
  });
  events.on("open", () => {
    previous = 0;
    load();
  });
  subscribe(renderInflight);
  renderActivity(new Set());
  renderInflight();
}
