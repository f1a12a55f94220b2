// Why a model is held and what a swap waits for, in the same words on the Models cards, the page
// per model and the Playground's waiting line: from a model's `busy` (its busyCheck's reading)
// and `waiting` (what a swap to it waits for) in `/api/status`. Counting parts are spans with
// `data-since` / `data-until`, which the Models page's ticker updates every second.

import { clock, el, now, seconds } from "./dom.js";

export function since(at) {
  return el("span", { "data-since": String(at), text: seconds(now() - at) });
}

export function until(deadline) {
  return el("span", { "data-until": String(deadline), text: seconds(Math.max(0, deadline - now())) });
}

// Why the TTL of a ready model with no `ttl_left` does not count: busy, requests in flight, or
// neither known here.
export function ttlHeld(st, inflight) {
  if (st.busy && st.busy.busy) return "not counting: busy";
  if (inflight > 0 || st.in_flight > 0) return "not counting: requests in flight";
  return "not counting";
}

// `for 12s: upstream reports 1 running job`, or the failed check.
export function busyParts(b) {
  if (b.error) return [`check failed (${b.error}), counted as idle`];
  if (!b.busy) return null;
  return ["for ", since(b.since), b.words ? `: ${b.words}` : ""];
}

// `the swap to llm, until 12:03:04 (9m 48s left)`.
export function holdParts(b) {
  if (!b.holding || !b.holding.length) return null;
  const who = `the swap${b.holding.length > 1 ? "s" : ""} to ${b.holding.join(", ")}`;
  if (!b.hold_until) return [who];
  return [`${who}, until ${clock(b.hold_until)} (`, until(b.hold_until), " left)"];
}

// `for 12s: comfyui_auto is busy; at most 9m 48s more`, or the scheduler's own words.
export function waitingParts(w) {
  const head = ["for ", since(w.since), ": "];
  if (w.holding && w.holding.length) {
    const who = w.holding.join(", ");
    const what = `${who} ${w.holding.length > 1 ? "are" : "is"} busy (busyCheck)`;
    return w.until ? [...head, what, "; at most ", until(w.until), " more"] : [...head, what];
  }
  return [...head, w.reason];
}

// The same as plain text (the Playground's line is redrawn twice a second).
export function waitingText(w) {
  return waitingParts(w).map((p) => (typeof p === "string" ? p : p.textContent)).join("");
}
