// A page per model (`#model/<id>`): everything swapd knows about it, from `/api/status` (state,
// pid, port, GPUs and memory, TTL, busyCheck), `/v1/models` (name, capabilities, context length,
// aliases, metadata), `/running` (its command, where the proxy lists it) and its log (the command
// it was last started with, on swapd's own marker line); its log, streamed; its recent activity
// with the daemon's totals and speed histograms for it; and its swaps. A model with a sleep
// setting has a Sleep button and a Sleep panel: what it still holds asleep (its residual, NVML's
// reading once its memory dropped), its last sleep and wake, when `stopAfter` stops it. The
// Learned panel (learned.js): who follows it, its page cache share.
// reading once its memory dropped), its last sleep and wake, when `stopAfter` stops it. A model
// with `kvCache` shows what is saved of its conversations and how its restores went.

import { captureButton } from "./activity.js";
import * as stats from "./activity_stats.js";
import { encode, getJSON, send } from "./api.js";
import * as caps from "./caps.js";
import { heldWords, NOT_MEASURED } from "./measured.js";
import * as catalog from "./catalog.js";
import { bytes, clock, el, epoch, fill, labelled, ms, now, plural, seconds, toast } from "./dom.js";
import * as events from "./events.js";
import { learnedFacts } from "./learned.js";
import { LogView } from "./log_view.js";
import { href } from "./nav.js";
import { inflightOf, modelStatus, refresh, stateOf, store, subscribe, tableItem } from "./store.js";
import * as swaps from "./swaps.js";
import * as waits from "./waits.js";

const RECENT = 20;
const ACTIVITY_EVERY_MS = 1000;
// swapd's marker line at the start of each run in a model's log (daemon/machinery/lifecycle.py).
const MARKER = /^--- swapd [0-9-]+ [0-9:]+: starting (.+?): (.*)$/;

let current = null; // the model id shown, or null
let parts = null; // the page's containers
let log = null;
let command = { text: "", from: "" };
let running = null; // this model's `/running` entry
let activityTimer = 0;
let activityAgain = false;

const view = () => document.getElementById("model-view");

function fact(dt, ...dd) {
  return [el("dt", { text: dt }), el("dd", {}, ...dd)];
}

function sum(values) {
  return Object.values(values || {}).reduce((a, b) => a + b, 0);
}

function perGpu(map) {
  return Object.entries(map || {}).map(([gpu, n]) => `${gpu}: ${bytes(n)}`).join(", ");
}

function panel(title, role, ...children) {
  return el("section", { class: "panel", "data-part": role }, el("h3", { text: title }), ...children);
}

function skeleton(id) {
  const back = el("a", { href: href("models"), text: "← Models" });
  parts = {
    head: el("div", { class: "model-head" }),
    sub: el("div", { class: "desc", "data-role": "description" }),
    facts: el("dl", { class: "facts", "data-role": "facts" }),
    command: el("div", { "data-role": "command" }),
    busy: el("div", { "data-role": "busy" }),
    sleep: el("div", { "data-role": "sleep" }),
    learned: el("div", { "data-role": "learned" }),
    kv: el("div", { "data-role": "kv" }),
    log: el("pre", { class: "log short", "data-role": "log" }),
    activity: el("div", { class: "summary", "data-role": "activity" }),
    recent: el("div", { "data-role": "recent" }),
    swaps: el("div", { "data-role": "swaps" }),
  };
  view().replaceChildren(
    el("div", { class: "toolbar" }, back),
    parts.head,
    parts.sub,
    el(
      "div",
      { class: "model-grid" },
      panel("Details", "details", parts.facts),
      el("div", { class: "stack-panels" },
        panel("Command", "command", parts.command),
        panel("Busy", "busy", parts.busy),
        el("section", { class: "panel slot", "data-slot": "sleep" }, el("h3", { text: "Sleep" }), parts.sleep),
        panel("Learned", "learned", parts.learned),
        panel("Conversation cache", "kv", parts.kv)),
    ),
    panel("Log", "log", parts.log),
    el("h2", { text: "Activity" }),
    parts.activity,
    parts.recent,
    el("h2", { text: "Swaps" }),
    parts.swaps,
  );
  log = new LogView(parts.log, {
    maxLines: 2000,
    onLine: (line) => {
      const m = MARKER.exec(line);
      if (m && m[1] === id) {
        command = { text: m[2], from: "the command line swapd logged at its last start" };
        renderCommand();
      }
    },
  });
}

function head(item, entry) {
  const state = stateOf(item);
  const st = modelStatus(current);
  const remote = Boolean(item && item.peerID);
  const loaded = ["starting", "ready", "draining", "stopping", "sleeping", "waking"].includes(state);
  // Asleep, its process runs: Unload stops it, Load wakes it.
  const running = loaded || state === "asleep";
  // Load is the explicit load (it answers once the model is ready, or with why it failed);
  // Unload answers once it stopped.
  const button = (action, label, path, disabled) => {
    const node = el("button", { class: action === "load" ? "primary" : null, "data-action": action, disabled, text: label });
    node.addEventListener("click", async () => {
      node.disabled = true;
      try {
        await send("POST", path);
      } catch (err) {
        toast(`${action} failed: ${err.message}`);
      } finally {
        refresh();
      }
    });
    return node;
  };
  const load = button("load", state === "asleep" ? "Wake" : "Load", `/api/models/load/${encode(current)}`, loaded);
  const unload = button("unload", "Unload", `/api/models/unload/${encode(current)}`, !running);
  // Sleep: only for a model with a sleep setting, while it is ready.
  const sleeps = (item && item.sleepMode === "enable") || Boolean(st && st.sleep);
  const sleep = sleeps ? button("sleep", "Sleep", `/api/models/sleep/${encode(current)}`, state !== "ready") : null;
  const name = (item && item.name) || (entry && entry.name) || "";
  const description = (item && item.description) || (entry && entry.description) || "";
  fill(
    parts.head,
    el("h2", { text: current }),
    el("span", { class: `badge state-${state}`, "data-role": "state", text: state }),
    // How long it has been in its state, beside the state (not after the busy badge, where it
    // read as how long it had been busy); the busy badge says its own.
    st && st.since && state !== "stopped" ? el("span", { class: "hint", "data-role": "state-for" }, "for ", el("span", { "data-since": String(st.since), text: seconds(now() - st.since) })) : null,
    st && st.busy && st.busy.busy ? el("span", { class: "badge busy", "data-role": "busy-for" }, "busy", st.busy.since ? [" for ", el("span", { "data-since": String(st.busy.since), text: seconds(now() - st.busy.since) })] : null) : null,
    st && st.waiting ? el("span", { class: "badge wait", text: "waiting" }) : null,
    remote ? el("span", { class: "badge remote", text: "remote" }) : null,
    el("span", { class: "grow" }),
    el("a", { href: href("playground", current), "data-action": "playground", text: "Try in the Playground" }),
    remote ? null : load,
    remote || !sleep ? null : sleep,
    remote ? null : unload,
  );
  fill(parts.sub, name && name !== current ? el("strong", { text: name }) : null, description ? ` ${description}` : null);
}

function ttl(st, state) {
  if (!st) return null;
  if (st.ttl <= 0) return "never unloads";
  if (state !== "ready") return `${st.ttl} s after its last request`;
  if (st.ttl_left !== null && st.ttl_left !== undefined) {
    const deadline = store.fetchedAt + st.ttl_left;
    return [el("span", { "data-until": String(deadline), text: seconds(deadline - now()) }), ` left of ${st.ttl} s`];
  }
  return `${st.ttl} s (${waits.ttlHeld(st, inflightOf(current))})`;
}

function renderFacts(item, entry) {
  const st = modelStatus(current);
  const state = stateOf(item);
  const meta = catalog.meta(entry);
  const facts = [];
  if (item && item.peerID) facts.push(fact("peer", item.peerID));
  const aliases = (item && item.aliases) || meta.aliases || [];
  if (aliases.length) facts.push(fact("aliases", aliases.join(", ")));
  if (entry && entry.context_length) facts.push(fact("context", `${entry.context_length} tokens (${caps.contextLabel(entry.context_length)})`));
  const tags = caps.tags(entry);
  if (tags) facts.push(fact("capabilities", tags));
  if (entry && entry.architecture && entry.architecture.modality) facts.push(fact("modality", entry.architecture.modality));
  if (st && st.upstream) facts.push(fact("upstream", st.upstream));
  if (st && st.pid) facts.push(fact("pid", String(st.pid)));
  if (st && st.port) facts.push(fact("port", String(st.port)));
  if (st && st.gpus && st.gpus.length) facts.push(fact("GPUs", st.gpus.join(", ")));
  if (st && sum(st.footprint)) facts.push(fact("GPU memory", `${perGpu(st.footprint)} (${st.footprint_source || "learned"})`));
  if (st && sum(st.reserved)) facts.push(fact("reserved", perGpu(st.reserved)));
  if (st && st.placed_by_memory) facts.push(fact("placement", "by measured memory (gpus: auto)"));
  const t = ttl(st, state);
  if (t) facts.push(fact("TTL", t));
  const estimate = state === "ready" ? null : waits.estimate(st, state);
  if (estimate) {
    const [dt, dd] = fact(...estimate);
    dd.dataset.role = "estimate";
    facts.push([dt, dd]);
  }
  if (st && st.waiting) {
    const [dt, dd] = fact("a swap waits", ...waits.waitingParts(st.waiting));
    dd.dataset.role = "waiting";
    facts.push([dt, dd]);
  }
  if (!(item && item.peerID)) facts.push(fact("in flight", String(inflightOf(current))));
  if (st && st.last_activity) facts.push(fact("last request", clock(st.last_activity)));
  if (item && item.unlisted) facts.push(fact("listed", "no (unlisted in /v1/models)"));
  if (st && st.reason) facts.push(fact(state === "failed" ? "failed" : "why", el("span", { class: state === "failed" ? "reason" : null, text: st.reason })));
  if (st && st.lingering) facts.push(fact("port still in use", st.lingering.message || `port ${st.lingering.port}`));
  for (const g of (st && st.gpu_lingering) || []) {
    facts.push(fact("still on GPU", `pid ${g.pid} on ${g.gpu}${g.used_bytes ? `: ${bytes(g.used_bytes)}` : ""}`));
  }
  for (const [key, value] of Object.entries(meta)) {
    if (["type", "aliases"].includes(key)) continue;
    facts.push(fact(key, typeof value === "string" ? value : JSON.stringify(value)));
  }
  if (!st && !item) facts.push(fact("state", "not known yet"));
  parts.facts.replaceChildren(...facts.flat());
}

function renderCommand() {
  if (!parts) return;
  const text = (running && running.cmd) || command.text;
  const from = running && running.cmd ? "as /running lists it" : command.from;
  fill(parts.command, text
    ? [el("pre", { class: "cmd", "data-role": "cmd", text }), el("p", { class: "hint", text: from })]
    : el("p", { class: "hint", text: "not started since its log began" }));
}

function renderBusy() {
  const st = modelStatus(current);
  const b = (st && st.busy) || (running && running.busy) || null;
  if (!b) {
    parts.busy.replaceChildren(el("p", { class: "hint", text: "no busyCheck reading (none configured, or the model is not ready)" }));
    return;
  }
  const holds = waits.holdParts(b);
  const facts = [
    fact("now", b.busy ? "busy" : "idle"),
    b.words ? fact("reports", b.words) : null,
    b.since ? fact(b.busy ? "busy since" : "idle since", clock(b.since), " (", waits.since(b.since), " ago)") : null,
    b.checked_at ? fact("last poll", clock(b.checked_at)) : null,
    b.error ? fact("last check failed", b.error) : null,
    holds ? fact("holds back", ...holds) : null,
    b.busy ? fact("its TTL", "does not run out while it is busy; counts again from when it is idle") : null,
  ];
  parts.busy.replaceChildren(el("dl", { class: "facts", "data-busy": b.busy ? "busy" : "idle" }, facts.filter(Boolean).flat()));
}

function secondsText(value) {
  return value === null || value === undefined ? "–" : `${value.toFixed(2)} s`;
}

function renderSleep() {
  const st = modelStatus(current);
  const sleep = st ? st.sleep : undefined;
  if (sleep === undefined || sleep === null) {
    parts.sleep.replaceChildren(el("p", { class: "hint", text: "no sleep setting: it is stopped, never put to sleep" }));
    return;
  }
  const asleep = st.state === "asleep";
  const facts = [
    fact("setting", sleep.preset ? `preset ${sleep.preset}` : "written out"),
    asleep ? fact("holds asleep", heldWords(sleep.residual, perGpu)) : null,
    sleep.held_before === null
      ? fact("held before its last sleep", NOT_MEASURED)
      : sum(sleep.held_before) ? fact("held before its last sleep", perGpu(sleep.held_before)) : null,
    fact("last sleep", secondsText(sleep.last_sleep_s)),
    fact("last wake", secondsText(sleep.last_wake_s)),
    fact("sleeps / wakes", `${sleep.sleeps} / ${sleep.wakes}`),
    sleep.verified ? fact("wakes verified", `${sleep.verified} (its wakeProbe answered as it must)`) : null,
    fact("stopped after", sleep.stop_after > 0 ? `${sleep.stop_after} s asleep and unused` : "never (stays asleep)"),
    asleep && sleep.stop_left !== null && sleep.stop_left !== undefined
      ? fact("stopped in", el("span", { "data-until": String(store.fetchedAt + sleep.stop_left), text: seconds(sleep.stop_left) }))
      : null,
    asleep && sleep.stop_after > 0 && sleep.websockets
      ? fact("stopped in", `not while ${sleep.websockets} websocket(s) to it are open`)
      : null,
    sleep.serves_asleep ? fact("asleep, its server", "still answers its page, websocket and polls") : null,
    sleep.serves_asleep && sleep.wake_on && sleep.wake_on.length ? fact("woken by", sleep.wake_on.join(", ")) : null,
    sleep.last_failure ? fact("last failure", el("span", { class: "reason", text: sleep.last_failure })) : null,
  ];
  parts.sleep.replaceChildren(el("dl", { class: "facts", "data-sleep": asleep ? "asleep" : "awake" }, facts.filter(Boolean).flat()));
}

// `kvCache`: what swapd keeps of its server's conversation caches, and how its restores went.
function renderKv() {
  const st = modelStatus(current);
  const kv = st ? st.kv : undefined;
  if (kv === undefined || kv === null) {
    parts.kv.replaceChildren(el("p", { class: "hint", text: "no kvCache setting: its conversations are prefilled again after a swap" }));
    return;
  }
  const saved = kv.saved_at > 0;
  const facts = [
    fact("setting", kv.preset ? `preset ${kv.preset}` : "written out"),
    fact("saved", saved ? `slots ${kv.slots.join(", ")}: ${kv.tokens} tokens, ${(kv.bytes / 1048576).toFixed(1)} MiB` : "nothing"),
    saved ? fact("saved at", new Date(kv.saved_at * 1000).toLocaleString()) : null,
    fact("saves / restores", `${kv.saves} / ${kv.restores}`),
    kv.restores ? fact("last restore", `${kv.restored_tokens} tokens back; the first request reused ${kv.first_cache_n < 0 ? "–" : kv.first_cache_n}`) : null,
    kv.short ? fact("short", el("span", { class: "reason", text: "it brought back less than was saved (a sliding-window model needs --swa-full)" })) : null,
    kv.failures ? fact("failures", String(kv.failures)) : null,
    kv.last_failure ? fact("last failure", el("span", { class: "reason", text: kv.last_failure })) : null,
  ];
  parts.kv.replaceChildren(el("dl", { class: "facts" }, facts.filter(Boolean).flat()));
}

function renderSwaps() {
  if (!parts) return;
  const mine = swaps.shown()
    .filter((r) => r.model === current || (r.evicted || []).includes(current) || r.for_model === current)
    .slice(0, RECENT);
  if (!mine.length) {
    parts.swaps.replaceChildren(el("p", { class: "hint", text: "no start, swap or stop of it among the daemon's recent swaps" }));
    return;
  }
  const table = el(
    "table",
    { class: "stack", "data-role": "swap-table" },
    el("thead", {}, el("tr", {}, ["when", "what", "cause", "phases", "total", "result"].map((h) => el("th", { class: h === "total" ? "num" : null, text: h })))),
    el("tbody", {}, mine.map((r) => swaps.row(r, false))),
  );
  parts.swaps.replaceChildren(el("div", { class: "table-wrap" }, table));
  labelled(table);
}

function recentTable(list) {
  if (!list.length) return el("p", { class: "hint", text: "no requests for it in the activity log" });
  const speed = (t) => (t && t.tokens_per_second > 0 ? t.tokens_per_second.toFixed(1) : "–");
  const table = el(
    "table",
    { class: "stack", "data-role": "recent-table" },
    el("thead", {}, el("tr", {}, ["when", "request", "status", "duration", "waited", "tokens in/out", "tok/s", ""].map((h) =>
      el("th", { class: ["duration", "waited", "tokens in/out", "tok/s"].includes(h) ? "num" : null, text: h })))),
    el("tbody", {}, list.map((r) => el(
      "tr",
      { "data-activity": r.id },
      el("td", { text: clock(epoch(r.timestamp)) }),
      el("td", { class: "wrap", text: `${r.method || ""} ${r.req_path}` }),
      el("td", { class: r.resp_status_code < 400 ? "status-ok" : "status-bad", title: r.error_msg || null, text: String(r.resp_status_code) }),
      el("td", { class: "num", text: ms(r.duration_ms) }),
      el("td", { class: "num", text: r.wait_ms > 0 ? ms(r.wait_ms) : "–" }),
      el("td", { class: "num", text: `${r.tokens && r.tokens.input_tokens >= 0 ? r.tokens.input_tokens : "–"} / ${r.tokens && r.tokens.output_tokens >= 0 ? r.tokens.output_tokens : "–"}` }),
      el("td", { class: "num", "data-role": "speed", text: speed(r.tokens) }),
      el("td", {}, captureButton(r)),
    ))),
  );
  labelled(table);
  return el("div", { class: "table-wrap" }, table);
}

async function loadActivity() {
  const id = current;
  if (!id) return;
  try {
    const [summary, page] = await Promise.all([
      getJSON(`/api/metrics/stats?model=${encode(id)}`),
      getJSON(`/api/metrics/activity?model=${encode(id)}&limit=${RECENT}`),
    ]);
    if (id !== current) return;
    const caption = `over the ${plural(summary.total_requests, "request")} for it that the daemon keeps`;
    parts.activity.replaceChildren(...stats.view(summary, caption));
    parts.recent.replaceChildren(
      recentTable(page.data || []),
      el("p", {}, el("a", { href: href("activity", id), "data-action": "all-activity", text: "all of its requests, with filters and export" })),
    );
  } catch (err) {
    parts.activity.replaceChildren(el("p", { class: "hint", text: `activity not available (${err.message})` }));
  }
}

// At most one reading per ACTIVITY_EVERY_MS while the page is shown, however many requests end.
function activityChanged() {
  if (!current) return;
  if (activityTimer) { activityAgain = true; return; }
  loadActivity();
  activityTimer = setTimeout(() => {
    activityTimer = 0;
    if (activityAgain) { activityAgain = false; activityChanged(); }
  }, ACTIVITY_EVERY_MS);
}

async function loadRunning() {
  const id = current;
  try {
    const data = await getJSON("/running");
    if (id !== current) return;
    running = (data.running || []).find((r) => r.model === id) || null;
  } catch {
    running = null;
  }
  renderCommand();
  renderBusy();
}

let lastState = null;
// A busyCheck's poll changes nothing that is broadcast unless its finding changes: while the page
// shows a model with one, its status is read again every few seconds (the last poll, the counts).
const BUSY_REREAD_MS = 5000;
let busyTimer = 0;

function rereadWhileBusy() {
  const st = modelStatus(current);
  const wanted = Boolean(current && st && (st.busy || st.waiting));
  if (wanted && !busyTimer) busyTimer = setInterval(refresh, BUSY_REREAD_MS);
  if (!wanted && busyTimer) { clearInterval(busyTimer); busyTimer = 0; }
}

function render() {
  if (!current || !parts) return;
  const item = tableItem(current);
  const entry = catalog.entry(current);
  if (!item && !entry && store.table.length) {
    parts.head.replaceChildren(el("h2", { text: current }), el("span", { class: "reason", "data-role": "missing", text: "no model by this name in the config" }));
    return;
  }
  head(item, entry);
  renderFacts(item, entry);
  renderBusy();
  renderSleep();
  parts.learned.replaceChildren(learnedFacts(modelStatus(current)));
  renderKv();
  rereadWhileBusy();
  const state = stateOf(item);
  if (state !== lastState) {
    lastState = state;
    loadRunning(); // a start or stop changes what /running lists
  }
}

export function show(id) {
  if (!id) { location.hash = href("models"); return; }
  if (id === current) return;
  hide();
  current = id;
  command = { text: "", from: "" };
  running = null;
  lastState = null;
  skeleton(id);
  render();
  renderCommand();
  renderSwaps();
  const item = tableItem(id);
  if (item && item.peerID) {
    parts.log.textContent = "a peer's model: its log is on the peer";
  } else {
    log.open(`/logs/stream/${encode(id)}`);
  }
  loadActivity();
  loadRunning();
  document.title = `${id} · swapd`;
}

export function hide() {
  if (log) log.close();
  clearInterval(busyTimer);
  busyTimer = 0;
  current = null;
  parts = null;
  document.title = "swapd";
}

export function init() {
  subscribe(render);
  catalog.subscribe(render);
  swaps.subscribe(renderSwaps);
  events.on("activity", activityChanged);
}
