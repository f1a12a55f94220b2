// What `/v1/models` says about each name (the model catalog): names, descriptions, capabilities,
// context length, aliases, and the selectors, profile pins and peers' models. Read on the first
// `modelStatus` event of each event-stream connection (every connection starts with one), and
// again when one shows another set of models or other facts about them (a reload); a state
// change alone does not change the catalog.

import { coalesced, getJSON } from "./api.js";
import * as events from "./events.js";

const subscribers = [];
let entries = [];
let loaded = false;
let lastShape = "";

export function subscribe(fn) { subscribers.push(fn); }

export function isLoaded() { return loaded; }

export function all() { return entries; }

export function typeOf(entry) {
  return (entry && entry.meta && entry.meta.llamaswap && entry.meta.llamaswap.type) || "model";
}

export function meta(entry) {
  return (entry && entry.meta && entry.meta.llamaswap) || {};
}

// The catalog entry of a model id (or of an alias of one), or null (unlisted, or not loaded yet).
export function entry(id) {
  const own = entries.find((e) => e.id === id && typeOf(e) === "model");
  if (own) return own;
  return entries.find((e) => typeOf(e) === "model" && (meta(e).aliases || []).includes(id)) || null;
}

export function selectors() { return entries.filter((e) => typeOf(e) === "selector"); }

export const refresh = coalesced(async () => {
  try {
    const data = await getJSON("/v1/models");
    entries = Array.isArray(data.data) ? data.data : [];
    loaded = true;
  } catch (err) {
    console.warn("catalog", err);
  }
}, () => { for (const fn of subscribers) fn(); });

// A model list's facts, less the states (which change without a reload).
function shape(models) {
  return JSON.stringify((models || []).map((m) => {
    const rest = { ...m };
    delete rest.state;
    delete rest.swapd_state;
    return rest;
  }));
}

export function init() {
  events.on("open", () => { lastShape = ""; });
  events.on("modelStatus", (models) => {
    const now = shape(models);
    if (now === lastShape) return;
    lastShape = now;
    refresh();
  });
}
