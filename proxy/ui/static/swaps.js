// The Swaps page: the daemon's swap records (`GET /api/swaps` once, then `swap` events), newest
// first, each with what it was (a start, a swap, a stop, a sleep, a wake, a crash), its phases as
// a bar and in numbers, its cause, and how long its request waited in all; the stops a swap
// folded in (`folded`) are its row, not rows of their own.

import { getJSON } from "./api.js";
import { clock, el, labelled, seconds } from "./dom.js";
import * as events from "./events.js";

const MAX_ROWS = 200;
// Every phase a record may carry (`/api/swaps`), in the order they run: a wake's own is `wake`,
// a sleep's (or a swap's evicted model put to sleep) `sleep`.
export const PHASES = ["drain", "stop", "sleep", "start", "health", "wake", "verify"];
const records = new Map(); // id -> record
const subscribers = [];

// The records read so far (the model pages show theirs), and a call on every change.
export function all() { return [...records.values()]; }
export function subscribe(fn) { subscribers.push(fn); }

export function what(r) {
  const evicted = r.evicted && r.evicted.length ? `${r.evicted.join(", ")} → ` : "";
  if (r.kind === "swap") return `${evicted}${r.model}`;
  if (r.kind === "start") return `start ${r.model}`;
  if (r.kind === "wake") return `${evicted}wake ${r.model}`;
  if (r.kind === "sleep") return `sleep ${r.model}`;
  if (r.kind === "crash") return `${r.model} crashed`;
  return `stop ${r.model}`;
}

function cause(r) {
  switch (r.cause) {
    case "request": return r.for_model ? `a request for ${r.for_model}` : `a request for ${r.model}`;
    case "swap": return `a request for ${r.for_model}`;
    case "unload": return "manual unload";
    case "ttl": return "TTL";
    case "load": return "explicit load";
    case "preload": return "preload hook";
    case "adopted": return "adopted after a daemon restart";
    case "reload": return "config changed";
    case "shutdown": return "shutdown";
    case "crash": return "crash";
    case "sleep": return "manual sleep";
    case "asleep_ttl": return "asleep past its stopAfter";
    case "sleep_failed": return "its sleep failed";
    case "wake_failed": return "its wake failed";
    case "wake_unverified": return "its wake was not verified";
    default: return r.reason || r.cause;
  }
}

function phases(r) {
  const total = PHASES.reduce((a, p) => a + (r.phases[p] || 0), 0);
  const bar = el("div", { class: "phases", title: PHASES.filter((p) => p in r.phases).join(" · ") });
  const text = [];
  for (const p of PHASES) {
    if (!(p in r.phases)) continue;
    const part = el("span", { class: `ph-${p}`, title: `${p} ${seconds(r.phases[p])}` });
    part.style.width = `${total > 0 ? (100 * r.phases[p]) / total : 0}%`;
    bar.append(part);
    text.push(`${p} ${seconds(r.phases[p])}`);
  }
  return el("div", { class: "phase-cell" }, bar, el("div", { class: "phase-text", text: text.join(" · ") || "–" }));
}

// How long the request behind a start or swap waited for it (`waited`, seconds, from its
// arrival to the end) and what the swap waited for before its phases began (`waited_for`), where
// that is more than the phases themselves: a swap that waited for a busy model took far longer
// for its client than its phases add up to.
const WAIT_SHOWN_S = 0.5;
function waited(r) {
  const before = r.waited_for || [];
  if (typeof r.waited !== "number" || r.waited <= 0) return null;
  if (!before.length && r.waited - (r.ended - r.began) < WAIT_SHOWN_S) return null;
  return [
    el("span", { class: "sub", "data-role": "waited", text: `request waited ${seconds(r.waited)}` }),
    before.length ? el("span", { class: "sub wrap-sub", "data-role": "waited-for", text: `for: ${before.join("; ")}` }) : null,
  ];
}

// The ids of the stop records a swap folded in (its evicted models' drain and stop are its own
// phases): not rows of their own.
function folded() {
  const ids = new Set();
  for (const r of records.values()) for (const id of r.folded || []) ids.add(id);
  return ids;
}

// The records to show, newest first: what `all()` gives, less the folded stops.
export function shown() {
  const hide = folded();
  return [...records.values()].filter((r) => !hide.has(r.id)).sort((a, b) => b.id - a.id);
}

export function row(r, fresh) {
  const bad = r.result !== "ok";
  return el(
    "tr",
    { class: fresh ? "new" : null, "data-kind": r.kind, "data-model": r.model, "data-swap": r.id },
    el("td", { text: clock(r.began) }),
    el("td", { class: "wrap", text: what(r) }),
    el("td", { class: "wrap", text: cause(r) }),
    el("td", {}, phases(r)),
    // One block in the cell: at phone width a cell is a row of its label and its content.
    el("td", { class: "num" }, el("div", {}, seconds(r.ended - r.began), waited(r))),
    el("td", { class: `wrap ${bad ? "status-bad" : "status-ok"}`, text: bad ? `${r.result}: ${r.reason}` : "ok" }),
  );
}

function render(freshId) {
  for (const fn of subscribers) fn(freshId);
  const body = document.querySelector("#swap-table tbody");
  const sorted = shown().slice(0, MAX_ROWS);
  if (sorted.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: "6", text: "no swaps yet" })));
    return;
  }
  body.replaceChildren(...sorted.map((r) => row(r, r.id === freshId)));
  labelled(document.getElementById("swap-table"));
}

async function load() {
  try {
    const data = await getJSON("/api/swaps");
    records.clear(); // ids start again at 1 when the daemon restarts
    for (const r of data.swaps || []) records.set(r.id, r);
  } catch (err) {
    console.warn("swaps", err);
  }
  render(null);
}

export function init() {
  events.on("swap", (r) => { records.set(r.id, r); render(r.id); });
  // A new connection (a daemon or proxy restart): the ring may hold records we missed.
  events.on("open", load);
  render(null);
}
