// The Models page's selectors (`selectors` in the config, as `/v1/models` lists them): each
// one's strategy and targets, every local target linked to its page with its state now.

import * as catalog from "./catalog.js";
import { el, labelled } from "./dom.js";
import { modelHref } from "./nav.js";
import { stateOf, subscribe, tableItem } from "./store.js";

const STRATEGIES = {
  pin: "pin: always the first target",
  warm: "warm: a ready target, else a starting one, else the first",
  spillover: "spillover: the next target once the others are full",
};

function target(id) {
  const item = tableItem(id);
  if (!item) return el("span", { class: "tag", "data-target": id, text: id });
  const state = stateOf(item);
  return el("span", { "data-target": id },
    el("a", { href: modelHref(id), text: id }), " ",
    el("span", { class: `badge state-${state}`, text: state }));
}

function row(entry) {
  const meta = catalog.meta(entry);
  const strategy = meta.strategy || "";
  const spill = strategy === "spillover" && meta.spillover ? ` (${meta.spillover} each)` : "";
  const targets = (meta.targets || []).map((t, i) => [i ? " · " : null, target(t)]);
  // Which targets run now (live, from the model states; a peer's models are not known here).
  const up = (meta.targets || []).filter((t) => ["ready", "starting"].includes(stateOf(tableItem(t))));
  return el(
    "tr",
    { "data-selector": entry.id },
    el("td", { class: "wrap" },
      el("strong", { text: entry.id }),
      entry.name && entry.name !== entry.id ? el("span", { class: "sub", text: entry.name }) : null,
      entry.description ? el("span", { class: "sub", text: entry.description }) : null),
    el("td", { title: STRATEGIES[strategy] || null, text: `${strategy}${spill}` }),
    el("td", { class: "wrap" }, targets),
    el("td", { class: "wrap", "data-role": "up", text: up.length ? `up: ${up.join(", ")}` : "none up" }),
  );
}

function render() {
  const list = catalog.selectors();
  document.getElementById("selectors-box").hidden = list.length === 0;
  const body = document.querySelector("#selectors tbody");
  body.replaceChildren(...list.map(row));
  labelled(document.getElementById("selectors"));
}

export function init() {
  catalog.subscribe(render);
  subscribe(render);
}
