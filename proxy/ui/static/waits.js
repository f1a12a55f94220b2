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

// `for 12s: comfyui_auto is busy; at most 9m 48s more`, `for 1s: serving gemma-a's queue first;
// at most 4s more` (collation, `maxWait`), or the scheduler's own words.
export function waitingParts(w) {
  const head = ["for ", since(w.since), ": "];
  if (w.holding && w.holding.length) {
    const who = w.holding.join(", ");
    const what = `${who} ${w.holding.length > 1 ? "are" : "is"} busy (busyCheck)`;
    return w.until ? [...head, what, "; at most ", until(w.until), " more"] : [...head, what];
  }
  if (w.cause === "collation" && w.serving && w.serving.length) {
    const what = `serving ${w.serving.join(", ")}'s queue first`;
    return w.until ? [...head, what, "; at most ", until(w.until), " more"] : [...head, what];
  }
  if (w.cause === "unwatched" && w.serving && w.serving.length) {
    return [...head, `a load nobody waits for; ${w.serving.join(", ")} in use`];
  }
  return [...head, w.reason];
}

// The same as plain text (the Playground's line is redrawn twice a second).
export function waitingText(w) {
  return waitingParts(w).map((p) => (typeof p === "string" ? p : p.textContent)).join("");
}

// What a request for model `id` (swapd's `state` now, its `/api/status` entry `st`) waits for
// while no answer has come: what a swap to it waits for, else its state and for how long; null
// once it is ready (then it waits for the model's own answer).
export function requestWaitText(id, state, st) {
  if (st && st.waiting) return `waiting ${waitingText(st.waiting)}`;
  if (!state || state === "ready") return null;
  const since = st && st.state === state && st.since ? ` for ${seconds(now() - st.since)}` : "";
  return `waiting: ${id} is ${state}${since}`;
}

// `about 12 s` (tenths below 10 s), as the loading progress says it.
export function about(s) {
  return `about ${s >= 10 ? s.toFixed(0) : s.toFixed(1)} s`;
}

// How long a load (or, asleep or waking, a wake) of the model took lately, from its own last
// ones (`load_estimate`, `wake_estimate`): [label, text], or null before its first.
export function estimate(st, state) {
  if (!st) return null;
  const dozing = ["asleep", "sleeping", "waking"].includes(state);
  const s = dozing ? st.wake_estimate : st.load_estimate;
  if (typeof s !== "number") return null;
  return [dozing ? "a wake takes" : "a load takes", about(s)];
}
