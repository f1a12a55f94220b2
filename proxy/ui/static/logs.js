// The Logs page: one of `/logs/stream` (combined), `/logs/stream/proxy`, `/logs/stream/upstream`
// or `/logs/stream/<model>`, streamed (its history first, then each new line as it is written),
// ANSI colours rendered, filtered as you type.

import { encode } from "./api.js";
import { el } from "./dom.js";
import { LogView, strip } from "./log_view.js";
import { store, subscribe } from "./store.js";

let filter = "";
let current = null;
let view = null;

const PREFIX = /^\[([^\]]+)\] /;

// In the combined and all-models views a model's line starts with `[<model id>] `: that prefix
// is drawn as the line's source (the models' ids only: a proxy line starts with its stamp).
function source(line) {
  if (current !== "" && current !== "upstream") return null;
  const match = PREFIX.exec(line);
  if (!match || !store.table.some((m) => m.id === match[1])) return null;
  return match;
}

function open(which) {
  current = which;
  view.open(which ? `/logs/stream/${encode(which)}` : "/logs/stream");
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
  if (current === "" || current === "upstream") view.redraw();
}

export function show() {
  if (current === null) open(document.getElementById("log-source").value);
  else if (document.getElementById("log-follow").checked) view.toEnd();
}

export function init() {
  const follow = document.getElementById("log-follow");
  view = new LogView(document.getElementById("log"), {
    follow: () => follow.checked,
    keep: (line) => !filter || strip(line).toLowerCase().includes(filter),
    prefix: source,
  });
  subscribe(sources);
  document.getElementById("log-source").addEventListener("change", (e) => open(e.target.value));
  document.getElementById("log-filter").addEventListener("input", (e) => {
    filter = e.target.value.trim().toLowerCase();
    view.redraw();
  });
  document.getElementById("log-clear").addEventListener("click", () => view.clear());
}
