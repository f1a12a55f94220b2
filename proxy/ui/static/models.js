// The Models page: a card per model with its live state, Load / Unload (and Sleep for a model
// with a sleep setting), Unload all, and the active profile (hidden when the proxy has no
// `/api/profiles`).

import { encode, getJSON, send } from "./api.js";
import * as caps from "./caps.js";
import * as catalog from "./catalog.js";
import { bytes, el, now, seconds, toast } from "./dom.js";
import * as events from "./events.js";
import { heldWords } from "./measured.js";
import { modelHref } from "./nav.js";
import { inflightOf, modelStatus, refresh, store, subscribe } from "./store.js";
import * as waits from "./waits.js";

const cards = new Map(); // id -> {node, signature}
// `GET /api/profiles`, with `active` kept current by `profileChanged` events.
const profiles = { active: null, list: [] };
const tails = new Map(); // failed model id -> its log tail (text)
const root = () => document.getElementById("model-cards");

function sum(values) {
  return Object.values(values || {}).reduce((a, b) => a + b, 0);
}

function fact(dt, dd) {
  return [el("dt", { text: dt }), el("dd", {}, dd)];
}

// A fact's <dd> marked for tests and styles (`data-role`).
function role(pair, name) {
  pair[1].dataset.role = name;
  return pair;
}

// A text that counts (elapsed time since `at`, or the time left until `deadline`): the ticker
// below updates it every second without re-rendering the card.
function since(at) {
  return el("span", { "data-since": String(at), text: seconds(now() - at) });
}
function until(deadline) {
  return el("span", { "data-until": String(deadline), text: seconds(deadline - now()) });
}

function memory(st) {
  const learned = sum(st.footprint);
  const reserved = sum(st.reserved);
  const parts = [];
  if (learned) parts.push(`${bytes(learned)} ${st.footprint_source || "learned"}`);
  if (reserved) parts.push(`${bytes(reserved)} reserved`);
  return parts.join(", ");
}

// How many lines of a failed model's log its card shows, and how long to gather the history:
// the stream's history may come in several chunks, and an empty log sends none.
const TAIL_LINES = 40;
const HISTORY_QUIET_MS = 300;
const EMPTY_LOG_MS = 3000;

// The newest lines of the model's log: the history `/logs/stream/<model>` starts with, read until
// the stream goes quiet (the live lines after it are not wanted here).
async function loadTail(id) {
  if (tails.has(id)) return;
  tails.set(id, "");
  const controller = new AbortController();
  let text = "";
  let timer = setTimeout(() => controller.abort(), EMPTY_LOG_MS);
  try {
    const response = await fetch(`/logs/stream/${encode(id)}`, { signal: controller.signal });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(), HISTORY_QUIET_MS);
    }
  } catch (err) {
    if (!controller.signal.aborted) text = `(no log: ${err.message})`;
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  const lines = text.split("\n").filter((l) => l.trim());
  tails.set(id, lines.length ? lines.slice(-TAIL_LINES).join("\n") : "(its log is empty)");
  render();
}

async function act(button, what, path) {
  button.disabled = true;
  try {
    await send("POST", path);
  } catch (err) {
    toast(`${what} failed: ${err.message}`);
  } finally {
    button.disabled = false;
    refresh();
  }
}

// The active profile's pin for a name: "" (off), a target, or undefined (not pinned).
function pinOf(id) {
  const profile = profiles.list.find((p) => p.id === profiles.active);
  return profile && profile.pins ? profile.pins[id] : undefined;
}

function pinBadge(id) {
  const pin = pinOf(id);
  if (pin === undefined) return null;
  const off = !pin;
  return el("span", {
    class: off ? "badge pin-off" : "badge pin",
    "data-pin": off ? "off" : pin,
    title: `profile ${profiles.active}`,
    text: off ? "off in profile" : `→ ${pin}`,
  });
}

function card(item) {
  const st = modelStatus(item.id);
  const remote = Boolean(item.peerID);
  // `state` is llama-swap's (its UI reads it); swapd's own (failed, draining) is `swapd_state`.
  let state = item.swapd_state || item.state || "stopped";
  const detail = st && st.state === state ? st : null;
  const inflight = inflightOf(item.id);
  const facts = [];
  if (remote) facts.push(fact("peer", item.peerID));
  if (detail && state === "starting" && detail.since) facts.push(fact("starting for", since(detail.since)));
  // How long its load (or wake) took lately, from its own last ones; nothing before the first.
  const estimate = state === "ready" ? null : waits.estimate(st, state);
  if (estimate) facts.push(role(fact(...estimate), "estimate"));
  if (detail && state === "ready" && detail.since) facts.push(fact("up", since(detail.since)));
  if (detail && detail.pid) facts.push(fact("pid", String(detail.pid)));
  if (detail && state !== "stopped") {
    if (detail.port) facts.push(fact("port", String(detail.port)));
    else if (detail.upstream) facts.push(fact("upstream", detail.upstream));
  }
  if (detail && detail.gpus && detail.gpus.length) facts.push(fact("GPUs", detail.gpus.join(", ")));
  if (detail && state === "ready") {
    if (detail.ttl_left !== null && detail.ttl_left !== undefined && detail.ttl > 0) {
      facts.push(fact("TTL left", until(store.fetchedAt + detail.ttl_left)));
    } else if (detail.ttl > 0) {
      facts.push(fact("TTL", `${detail.ttl} s (${waits.ttlHeld(detail, inflight)})`));
    } else {
      facts.push(fact("TTL", "never unloads"));
    }
  }
  // Why it is held (its busyCheck) and whose swap it holds back; what a swap to it waits for.
  const busy = detail && detail.busy ? waits.busyParts(detail.busy) : null;
  if (busy) facts.push(role(fact("busy", busy), "busy"));
  const holds = detail && detail.busy ? waits.holdParts(detail.busy) : null;
  if (holds) facts.push(role(fact("holds back", holds), "holds"));
  const waiting = st && st.waiting ? waits.waitingParts(st.waiting) : null;
  if (waiting) facts.push(role(fact("a swap waits", waiting), "waiting"));
  if (!remote) facts.push(fact("in flight", String(inflight)));
  if (detail && memory(detail)) facts.push(fact("GPU memory", memory(detail)));
  if (detail && state === "asleep" && detail.sleep) {
    facts.push(fact("holds asleep", heldWords(detail.sleep.residual, (held) => bytes(sum(held)))));
  }
  if (item.aliases && item.aliases.length) facts.push(fact("aliases", item.aliases.join(", ")));

  const failed = state === "failed";
  if (failed && !tails.has(item.id)) loadTail(item.id);
  if (!failed) tails.delete(item.id);
  const loaded = ["starting", "ready", "draining", "stopping", "sleeping", "waking"].includes(state);
  const running = loaded || state === "asleep";
  // A name the active profile turns off answers 404 to any request, Load's included.
  const off = pinOf(item.id) === "";
  const load = el("button", {
    class: "primary", "data-action": "load", disabled: loaded || off, text: state === "asleep" ? "Wake" : "Load",
    title: off ? `off in profile ${profiles.active}` : null,
  });
  // The explicit load: it answers once the model is ready (or with why its start failed), whatever
  // the model serves at its root.
  load.addEventListener("click", () => act(load, "load", `/api/models/load/${encode(item.id)}`));
  const unload = el("button", { "data-action": "unload", disabled: !running, text: "Unload" });
  unload.addEventListener("click", () => act(unload, "unload", `/api/models/unload/${encode(item.id)}`));
  // Sleep: its process stays, its GPU memory is given back; its next request wakes it.
  let sleep = null;
  if (item.sleepMode === "enable") {
    sleep = el("button", { "data-action": "sleep", disabled: state !== "ready", text: "Sleep" });
    sleep.addEventListener("click", () => act(sleep, "sleep", `/api/models/sleep/${encode(item.id)}`));
  }
  return el(
    "article",
    { class: "card", "data-model": item.id, "data-state": state },
    el(
      "div",
      { class: "card-head" },
      el("a", { class: "name", href: modelHref(item.id), title: "its page", text: item.id }),
      el("span", { class: `badge state-${state}`, "data-role": "state", text: state }),
      detail && detail.busy && detail.busy.busy ? el("span", { class: "badge busy", "data-role": "busy-badge", text: "busy" }) : null,
      st && st.waiting ? el("span", { class: "badge wait", "data-role": "waiting-badge", text: "waiting" }) : null,
      remote ? el("span", { class: "badge remote", text: "remote" }) : null,
      pinBadge(item.id),
    ),
    item.name && item.name !== item.id ? el("div", { class: "desc", text: item.name }) : null,
    item.description ? el("div", { class: "desc", text: item.description }) : null,
    caps.tags(catalog.entry(item.id)),
    el("dl", { class: "facts" }, facts),
    detail && detail.reason && (failed || state === "stopped" || state === "asleep")
      ? el("div", { class: failed ? "reason" : "desc", "data-role": "reason", text: detail.reason })
      : null,
    failed && tails.get(item.id) ? el("pre", { class: "tail", text: tails.get(item.id) }) : null,
    remote ? null : el("div", { class: "actions" }, load, sleep, unload),
  );
}

function signature(item) {
  const st = modelStatus(item.id);
  const pin = [profiles.active, pinOf(item.id)];
  const listed = catalog.entry(item.id);
  return JSON.stringify([
    item, st, inflightOf(item.id), tails.get(item.id), st ? store.fetchedAt : 0, pin, listed,
  ]);
}

export function render() {
  const container = root();
  const seen = new Set();
  const drawn = [];
  let previous = null;
  for (const item of store.table) {
    seen.add(item.id);
    const sig = signature(item);
    let entry = cards.get(item.id);
    if (!entry || entry.signature !== sig) {
      const node = card(item);
      if (entry) entry.node.replaceWith(node);
      entry = { node, signature: sig };
      drawn.push(node);
      cards.set(item.id, entry);
    }
    const expected = previous ? previous.nextSibling : container.firstChild;
    if (expected !== entry.node) container.insertBefore(entry.node, expected);
    previous = entry.node;
  }
  for (const [id, entry] of cards) {
    if (!seen.has(id)) { entry.node.remove(); cards.delete(id); }
  }
  // A failed model's log opens at its newest line (the cause is usually last), once in the page.
  for (const node of drawn) {
    const tail = node.querySelector("pre.tail");
    if (tail) tail.scrollTop = tail.scrollHeight;
  }
}

export function show() {
  // Drawn while the page was hidden, a tail could not be scrolled: open each at its newest line.
  for (const tail of root().querySelectorAll("pre.tail")) tail.scrollTop = tail.scrollHeight;
}

function tick() {
  const t = now();
  for (const node of document.querySelectorAll("[data-since]")) {
    node.textContent = seconds(t - Number(node.dataset.since));
  }
  for (const node of document.querySelectorAll("[data-until]")) {
    node.textContent = seconds(Math.max(0, Number(node.dataset.until) - t));
  }
}

function showProfile() {
  const select = document.getElementById("profile");
  const profile = profiles.list.find((p) => p.id === profiles.active);
  select.value = profile ? profile.id : "";
  select.dataset.active = profiles.active || "";
  const pins = Object.entries((profile && profile.pins) || {})
    .map(([name, target]) => (target ? `${name} → ${target}` : `${name} off`));
  document.getElementById("profile-pins").textContent = pins.join(", ");
  render();
}

async function loadProfiles() {
  const box = document.getElementById("profile-box");
  const select = document.getElementById("profile");
  let data;
  try {
    data = await getJSON("/api/profiles");
  } catch {
    box.hidden = true; // no profiles on this proxy (404): no control
    box.dataset.loaded = "404";
    return;
  }
  box.dataset.loaded = "200";
  profiles.list = data.profiles || [];
  profiles.active = data.active || null;
  select.replaceChildren(
    el("option", { value: "", text: "(none)" }),
    ...profiles.list.map((p) =>
      el("option", { value: p.id, text: p.description ? `${p.id} — ${p.description}` : p.id })),
  );
  box.hidden = profiles.list.length === 0;
  showProfile();
}

export function init() {
  subscribe(render);
  catalog.subscribe(render);
  setInterval(tick, 1000);
  document.getElementById("unload-all").addEventListener("click", (e) =>
    act(e.currentTarget, "unload all", "/api/models/unload"));
  document.getElementById("profile").addEventListener("change", async (e) => {
    try {
      await send("PUT", "/api/profiles/active", { name: e.target.value || null });
    } catch (err) {
      toast(`profile: ${err.message}`);
    }
    loadProfiles();
  });
  // Every new event-stream connection starts with a `profileChanged`, and another comes when
  // anyone switches it (this page, another client, another proxy process): show it at once,
  // then re-read the list (a reload may have changed the profiles themselves).
  events.on("profileChanged", (data) => {
    profiles.active = (data && data.active) || null;
    showProfile();
    loadProfiles();
  });
}
