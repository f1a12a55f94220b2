// The Logs page: one of `/logs/stream` (combined), `/logs/stream/proxy`, `/logs/stream/upstream`
// or `/logs/stream/<model>`, streamed (its history first, then each new line as it is written),
// ANSI colours rendered, filtered as you type.

import { encode, stream } from "./api.js";
import { el } from "./dom.js";
import { AnsiState, render as ansi, strip } from "./ansi.js";
import { store, subscribe } from "./store.js";

const MAX_LINES = 5000;
let lines = [];
let partial = "";
let controller = null;
let state = new AnsiState();
let filter = "";
let current = null;

const view = () => document.getElementById("log");

function matches(line) {
  return !filter || strip(line).toLowerCase().includes(filter);
}

const PREFIX = /^\[([^\]]+)\] /;

// In the combined and all-models views a model's line starts with `[<model id>] `: that prefix
// is drawn as the line's source (the models' ids only: a proxy line starts with its stamp).
function source(line) {
  if (current !== "" && current !== "upstream") return null;
  const match = PREFIX.exec(line);
  if (!match || !store.table.some((m) => m.id === match[1])) return null;
  return match;
}

function append(line) {
  const match = source(line);
  const node = match
    ? el("div", { class: "line", "data-source": match[1] },
      el("span", { class: "src", text: match[0] }), ansi(line.slice(match[0].length), state))
    : el("div", { class: "line" }, ansi(line, state));
  view().append(node);
}

function redraw() {
  state = new AnsiState();
  view().replaceChildren();
  for (const line of lines) if (matches(line)) append(line);
  follow();
}

function follow() {
  if (document.getElementById("log-follow").checked) {
    const node = view();
    node.scrollTop = node.scrollHeight;
  }
}

function take(text) {
  const parts = (partial + text).split("\n");
  partial = parts.pop();
  for (const line of parts) {
    lines.push(line);
    if (matches(line)) append(line);
  }
  if (lines.length > MAX_LINES) {
    lines = lines.slice(-MAX_LINES);
    const node = view();
    while (node.childElementCount > MAX_LINES) node.firstChild.remove();
  }
  follow();
}

function open(which) {
  if (controller) controller.abort();
  controller = new AbortController();
  current = which;
  lines = [];
  partial = "";
  redraw();
  const path = which ? `/logs/stream/${encode(which)}` : "/logs/stream";
  const mine = controller;
  stream(path, take, mine.signal).catch((err) => {
    if (!mine.signal.aborted) take(`\n— log stream ended: ${err.message} —\n`);
  });
}

function sources() {
  const select = document.getElementById("log-source");
  const fixed = ["", "proxy", "upstream"];
  const models = store.table.filter((m) => !m.peerID).map((m) => m.id);
  const have = [...select.options].map((o) => o.value);
  const want = [...fixed, ...models];
  if (JSON.stringify(have) === JSON.stringify(want)) return;
  const value = select.value;
  for (const option of [...select.options]) if (!fixed.includes(option.value)) option.remove();
  for (const id of models) select.append(el("option", { value: id, text: `model ${id}` }));
  select.value = want.includes(value) ? value : "";
  // The lines already drawn were drawn without these ids: mark their sources now.
  if (current === "" || current === "upstream") redraw();
}

export function show() {
  if (current === null) open(document.getElementById("log-source").value);
}

export function init() {
  subscribe(sources);
  document.getElementById("log-source").addEventListener("change", (e) => open(e.target.value));
  document.getElementById("log-filter").addEventListener("input", (e) => {
    filter = e.target.value.trim().toLowerCase();
    redraw();
  });
  document.getElementById("log-clear").addEventListener("click", () => { lines = []; redraw(); });
}
