// The Playground (`#playground` or `#playground/<model>`): try any model the config names (its
// models, aliases' models, selectors, peers' models) with the kinds of request it serves: chat and
// text completion (streamed, with the loading progress and the timings), embeddings,
// transcription (where its capabilities say it transcribes). The model picked and the kind are
// kept in localStorage; each kind's view lives as long as the page, so switching kinds or models
// keeps a conversation.
//
// Kinds not offered yet (images, speech, rerank) slot in as one more entry of KINDS, a view
// function of the same shape, and its flag in caps.js' kinds().

import * as caps from "./caps.js";
import * as catalog from "./catalog.js";
import { el } from "./dom.js";
import { href } from "./nav.js";
import { completion, chat } from "./playground_chat.js";
import { embeddings, transcription } from "./playground_tools.js";
import { load, save } from "./prefs.js";
import { stateOf, store, subscribe, tableItem } from "./store.js";

const KINDS = {
  chat: { label: "Chat", view: chat },
  completion: { label: "Completion", view: completion },
  embeddings: { label: "Embeddings", view: embeddings },
  transcription: { label: "Transcription", view: transcription },
};

let built = false;
let wanted = load("playground.model", ""); // the user's choice
let picked = ""; // what is picked now: the choice, while the config has it
let kind = load("playground.kind", "chat");
const views = new Map(); // kind -> its view
const parts = {};

// Every name a request can use, grouped: models (unlisted ones too: they answer), selectors,
// peers' models.
function choices() {
  const models = new Map();
  for (const item of store.table) {
    if (!item.peerID) models.set(item.id, item.name && item.name !== item.id ? `${item.id} — ${item.name}` : item.id);
  }
  const groups = { models: [], selectors: [], peers: [] };
  for (const entry of catalog.all()) {
    const type = catalog.typeOf(entry);
    if (type === "model" && !models.has(entry.id)) models.set(entry.id, entry.id);
    if (type === "selector") groups.selectors.push([entry.id, `${entry.id} (selector)`]);
    if (type === "peer") groups.peers.push([entry.id, entry.id]);
  }
  for (const item of store.table) if (item.peerID && !groups.peers.some(([id]) => id === item.id)) groups.peers.push([item.id, item.id]);
  groups.models = [...models.entries()];
  return groups;
}

function fillPicker() {
  const groups = choices();
  const flat = [...groups.models, ...groups.selectors, ...groups.peers].map(([id]) => id);
  const select = parts.picker;
  const have = [...select.querySelectorAll("option")].map((o) => o.value);
  if (JSON.stringify(have) !== JSON.stringify(flat)) {
    const group = (label, list) => (list.length
      ? el("optgroup", { label }, list.map(([id, text]) => el("option", { value: id, text })))
      : null);
    select.replaceChildren(...[
      group("models", groups.models), group("selectors", groups.selectors), group("peers", groups.peers),
    ].filter(Boolean));
  }
  picked = flat.includes(wanted) ? wanted : flat[0] || "";
  select.value = picked;
  parts.empty.hidden = flat.length > 0;
}

function entryOf(name) {
  return catalog.entry(name) || catalog.all().find((e) => e.id === name) || null;
}

function drawModel() {
  const entry = entryOf(picked);
  const item = tableItem(picked);
  const state = item ? stateOf(item) : "";
  parts.about.replaceChildren(...[
    state ? el("span", { class: `badge state-${state}`, "data-role": "state", text: state }) : null,
    caps.tags(entry),
    item && !item.peerID ? el("a", { href: href("model", picked), text: "its page" }) : null,
  ].filter(Boolean));
  const offered = caps.kinds(entry);
  if (!offered.includes(kind)) kind = offered[0];
  parts.kinds.replaceChildren(...offered.map((k) => el("button", {
    "data-kind": k, "aria-pressed": k === kind ? "true" : "false", text: KINDS[k].label,
    onclick: () => pickKind(k),
  })));
  for (const [k, v] of views) v.node.hidden = k !== kind;
  if (!views.has(kind)) {
    const v = KINDS[kind].view(() => picked);
    views.set(kind, v);
    parts.body.append(v.node);
  }
}

function pickKind(k) {
  kind = k;
  save("playground.kind", k);
  drawModel();
  views.get(k).focus();
}

function pick(name) {
  wanted = name;
  save("playground.model", name);
  fillPicker();
  drawModel();
}

function build() {
  built = true;
  parts.picker = el("select", { id: "pg-model", "aria-label": "model", onchange: (e) => pick(e.target.value) });
  parts.about = el("span", { class: "actions", "data-role": "about" });
  parts.kinds = el("div", { class: "kinds", role: "group", "aria-label": "kind of request" });
  parts.body = el("div", { "data-role": "kind-body" });
  parts.empty = el("p", { class: "hint", text: "no models in the config", hidden: true });
  document.getElementById("playground-view").replaceChildren(
    el("div", { class: "pg-head" }, el("label", { for: "pg-model", text: "Model" }), parts.picker, parts.about),
    parts.empty,
    parts.kinds,
    parts.body,
  );
  const redraw = () => { fillPicker(); drawModel(); };
  subscribe(redraw);
  catalog.subscribe(redraw);
}

// `arg`: a model to pick (a link from its page).
export function show(arg) {
  if (!built) build();
  if (arg) {
    wanted = arg;
    save("playground.model", arg);
  }
  fillPicker();
  drawModel();
}

export function init() {}
