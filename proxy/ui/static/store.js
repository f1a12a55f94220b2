// What the Models and GPUs pages show: the model list of `modelStatus` events (ids, names,
// peers) and the daemon's status document (`GET /api/status`: pid, port, GPUs, TTL, memory),
// fetched again whenever an event says a model changed. In-flight counts come from the
// `inflight` events, which cover every proxy process.

import { coalesced, getJSON } from "./api.js";
import * as events from "./events.js";
import { now } from "./dom.js";

export const store = {
  table: [],          // modelStatus items
  status: null,       // GET /api/status
  fetchedAt: 0,       // epoch seconds of that answer
  inflight: new Map(), // id -> in-flight request
};

const subscribers = [];

// `fn(store)` on every change; the answer stops it.
export function subscribe(fn) {
  subscribers.push(fn);
  return () => {
    const at = subscribers.indexOf(fn);
    if (at >= 0) subscribers.splice(at, 1);
  };
}

function changed() { for (const fn of subscribers) fn(store); }

export const refresh = coalesced(async () => {
  try {
    store.status = await getJSON("/api/status");
    store.fetchedAt = now();
  } catch (err) {
    console.warn("status", err);
  }
}, changed);

export function modelStatus(id) {
  if (!store.status) return null;
  return store.status.models.find((m) => m.model === id) || null;
}

// A model's state as swapd names it. `modelStatus` items carry llama-swap's `state` (which has no
// `failed` or `draining`) and, where the proxy sends it, swapd's own as `swapd_state`.
export function stateOf(item) {
  return (item && (item.swapd_state || item.state)) || "stopped";
}

export function tableItem(id) {
  return store.table.find((m) => m.id === id) || null;
}

export function inflightOf(id) {
  let n = 0;
  for (const r of store.inflight.values()) if (r.model === id) n += 1;
  return n;
}

events.on("modelStatus", (models) => {
  store.table = Array.isArray(models) ? models : [];
  changed();
  refresh();
});
events.on("inflight", (msg) => {
  if (msg.operation === "snapshot") {
    store.inflight = new Map((msg.requests || []).map((r) => [r.id, r]));
  } else if (msg.operation === "upsert" && msg.request) {
    store.inflight.set(msg.request.id, msg.request);
  } else if (msg.operation === "remove") {
    store.inflight.delete(msg.id);
  }
  changed();
});
