// The Activity page's request table: filters (model, status, route, text), sorting by any column,
// the columns shown (kept in localStorage), export of what the filters select (CSV, JSON), and
// the totals and speed histograms over the same rows (activity_stats.js).

import * as stats from "./activity_stats.js";
import { clock, download, el, epoch, labelled, ms, number, plural } from "./dom.js";
import { modelHref } from "./nav.js";
import { load, save } from "./prefs.js";

const MAX_SHOWN = 300;

function tokens(t) {
  if (!t) return "–";
  const a = t.input_tokens >= 0 ? t.input_tokens : "–";
  const b = t.output_tokens >= 0 ? t.output_tokens : "–";
  return `${a} / ${b}`;
}

function speed(t) {
  if (!t || t.tokens_per_second < 0) return "–";
  const gen = t.tokens_per_second.toFixed(1);
  return t.prompt_per_second >= 0 ? `${gen} (prompt ${t.prompt_per_second.toFixed(0)})` : gen;
}

const tok = (r, key) => (r.tokens && r.tokens[key] >= 0 ? r.tokens[key] : -1);

function modelCell(r, local) {
  const asked = r.model_asked && r.model_asked !== r.model ? ` (as ${r.model_asked})` : "";
  const name = local(r.model) ? el("a", { href: modelHref(r.model), text: r.model }) : r.model;
  return [name, asked];
}

// Each column: its label, how it sorts, its cell; `hidden`: off until chosen.
const COLUMNS = [
  { key: "id", label: "id", num: true, hidden: true, sort: (r) => r.id, cell: (r) => String(r.id) },
  { key: "when", label: "when", sort: (r) => epoch(r.timestamp), cell: (r) => clock(epoch(r.timestamp)) },
  { key: "model", label: "model", wrap: true, sort: (r) => r.model, cell: modelCell },
  { key: "route", label: "route", sort: (r) => r.route || "", cell: (r) => r.route || "" },
  { key: "request", label: "request", wrap: true, sort: (r) => r.req_path, cell: (r) => `${r.method || ""} ${r.req_path}` },
  { key: "status", label: "status", sort: (r) => r.resp_status_code, cell: (r) => String(r.resp_status_code) },
  { key: "duration", label: "duration", num: true, sort: (r) => r.duration_ms, cell: (r) => ms(r.duration_ms) },
  { key: "waited", label: "waited", num: true, sort: (r) => r.wait_ms, cell: (r) => (r.wait_ms > 0 ? ms(r.wait_ms) : "–") },
  { key: "ttfb", label: "first byte", num: true, hidden: true, sort: (r) => r.ttfb_ms, cell: (r) => ms(r.ttfb_ms) },
  { key: "tokens", label: "tokens in/out", num: true, sort: (r) => tok(r, "output_tokens"), cell: (r) => tokens(r.tokens) },
  { key: "cached", label: "cached", num: true, hidden: true, sort: (r) => tok(r, "cache_tokens"), cell: (r) => (tok(r, "cache_tokens") >= 0 ? String(tok(r, "cache_tokens")) : "–") },
  { key: "speed", label: "tok/s", num: true, sort: (r) => tok(r, "tokens_per_second"), cell: (r) => speed(r.tokens) },
  { key: "bytes", label: "bytes", num: true, hidden: true, sort: (r) => r.bytes || 0, cell: (r) => number(r.bytes || 0) },
  { key: "proxy", label: "proxy", hidden: true, sort: (r) => r.proxy_id || "", cell: (r) => r.proxy_id || "" },
  { key: "capture", label: "", always: true, cell: null },
];

const STATUS = {
  "": () => true,
  "2xx": (s) => s >= 200 && s < 300,
  "3xx": (s) => s >= 300 && s < 400,
  "4xx": (s) => s >= 400 && s < 500,
  "5xx": (s) => s >= 500,
  errors: (s) => s >= 400,
};

// One record as the export writes it: every field, flat, in the API's units.
const FIELDS = [
  ["id", (r) => r.id],
  ["timestamp", (r) => new Date(epoch(r.timestamp) * 1000).toISOString()],
  ["model", (r) => r.model],
  ["model_asked", (r) => r.model_asked || ""],
  ["route", (r) => r.route || ""],
  ["method", (r) => r.method || ""],
  ["req_path", (r) => r.req_path],
  ["resp_status_code", (r) => r.resp_status_code],
  ["resp_content_type", (r) => r.resp_content_type || ""],
  ["duration_ms", (r) => r.duration_ms],
  ["wait_ms", (r) => r.wait_ms],
  ["ttfb_ms", (r) => r.ttfb_ms],
  ["bytes", (r) => r.bytes],
  ["input_tokens", (r) => tok(r, "input_tokens")],
  ["cache_tokens", (r) => tok(r, "cache_tokens")],
  ["output_tokens", (r) => tok(r, "output_tokens")],
  ["prompt_per_second", (r) => tok(r, "prompt_per_second")],
  ["tokens_per_second", (r) => tok(r, "tokens_per_second")],
  ["error_msg", (r) => r.error_msg || ""],
  ["proxy_id", (r) => r.proxy_id || ""],
];

// A CSV cell (RFC 4180 quoting). A text starting with = + - @ is prefixed with ' so that a
// spreadsheet does not run a request path or an error message as a formula.
function csvCell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return String(value);
  let text = String(value);
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function toCSV(rows) {
  const lines = [FIELDS.map(([name]) => name).join(",")];
  for (const r of rows) lines.push(FIELDS.map(([, get]) => csvCell(get(r))).join(","));
  return `${lines.join("\r\n")}\r\n`;
}

export class ActivityTable {
  // `capture(r)`: the cell of the capture column; `local(id)`: whether a model has a page here.
  constructor({ capture, local }) {
    this.capture = capture;
    this.local = local;
    this.filters = { model: "", status: "", route: "", text: "" };
    this.sort = { key: "id", dir: "desc" };
    this.chosen = load("activity.columns", {});
    this.records = [];
    this.fresh = new Set();
    this.total = 0;
    this.table = document.getElementById("activity-table");
    this.buildTools();
    this.buildHead();
  }

  shown(c) {
    return c.always || (c.key in this.chosen ? this.chosen[c.key] : !c.hidden);
  }

  visible() {
    return COLUMNS.filter((c) => this.shown(c));
  }

  buildTools() {
    const tools = document.getElementById("activity-tools");
    const select = (name, label, options) => el(
      "select",
      { "data-filter": name, "aria-label": label, onchange: (e) => this.setFilter(name, e.target.value) },
      options.map(([value, text]) => el("option", { value, text })),
    );
    this.modelSelect = select("model", "model", [["", "all models"]]);
    this.routeSelect = select("route", "route", [["", "all routes"]]);
    const status = select("status", "status", [
      ["", "any status"], ["2xx", "2xx"], ["3xx", "3xx"], ["4xx", "4xx"], ["5xx", "5xx"], ["errors", "errors (≥ 400)"],
    ]);
    const text = el("input", {
      type: "search", placeholder: "path, model, error", "aria-label": "search the requests", "data-filter": "text",
      oninput: (e) => this.setFilter("text", e.target.value.trim().toLowerCase()),
    });
    const menu = el("div", { class: "menu" }, COLUMNS.filter((c) => !c.always).map((c) => el(
      "label", { class: "check" },
      el("input", {
        type: "checkbox", "data-column": c.key, checked: this.shown(c),
        onchange: (e) => this.choose(c.key, e.target.checked),
      }),
      c.label,
    )));
    const columns = el("details", { class: "columns" }, el("summary", { text: "Columns" }), menu);
    tools.replaceChildren(
      this.modelSelect, status, this.routeSelect, text,
      el("span", { class: "grow" }),
      columns,
      el("button", { "data-export": "csv", text: "Export CSV", onclick: () => this.export("csv") }),
      el("button", { "data-export": "json", text: "Export JSON", onclick: () => this.export("json") }),
    );
  }

  buildHead() {
    const cells = this.visible().map((c) => {
      const attrs = { class: c.num ? "num" : null, "data-col": c.key };
      if (!c.sort) return el("th", attrs);
      if (this.sort.key === c.key) attrs["aria-sort"] = this.sort.dir === "asc" ? "ascending" : "descending";
      return el("th", attrs, el("button", {
        class: "sort", "data-sort": c.key, text: c.label, title: `sort by ${c.label}`,
        onclick: () => this.sortBy(c.key),
      }));
    });
    this.table.tHead.replaceChildren(el("tr", {}, cells));
  }

  choose(key, on) {
    this.chosen = { ...this.chosen, [key]: on };
    save("activity.columns", this.chosen);
    this.buildHead();
    this.render();
  }

  sortBy(key) {
    this.sort = this.sort.key === key
      ? { key, dir: this.sort.dir === "asc" ? "desc" : "asc" }
      : { key, dir: ["when", "id"].includes(key) ? "desc" : "asc" };
    this.buildHead();
    this.render();
  }

  setFilter(name, value) {
    this.filters[name] = value;
    this.syncOptions();
    this.render();
  }

  // The records the filters keep, in the chosen order.
  selected() {
    const f = this.filters;
    const keep = this.records.filter((r) => (!f.model || r.model === f.model)
      && (!f.route || r.route === f.route)
      && STATUS[f.status](r.resp_status_code)
      && (!f.text || `${r.model} ${r.model_asked || ""} ${r.method || ""} ${r.req_path} ${r.error_msg || ""}`
        .toLowerCase().includes(f.text)));
    const column = COLUMNS.find((c) => c.key === this.sort.key) || COLUMNS[0];
    const sign = this.sort.dir === "asc" ? 1 : -1;
    return keep.sort((a, b) => {
      const x = column.sort(a);
      const y = column.sort(b);
      const order = typeof x === "string" ? x.localeCompare(y) : x - y;
      return order !== 0 ? sign * order : b.id - a.id;
    });
  }

  // The model and route choices: those the records name, and the one chosen (a link to a model's
  // activity may name one with no record yet).
  syncOptions() {
    const fill = (select, name, values, all) => {
      const want = ["", ...[...new Set([...values, this.filters[name]].filter(Boolean))].sort()];
      const have = [...select.options].map((o) => o.value);
      if (JSON.stringify(want) !== JSON.stringify(have)) {
        select.replaceChildren(...want.map((v) => el("option", { value: v, text: v || all })));
      }
      select.value = this.filters[name];
    };
    fill(this.modelSelect, "model", this.records.map((r) => r.model), "all models");
    fill(this.routeSelect, "route", this.records.map((r) => r.route), "all routes");
  }

  // `records`: every record read (in any order); `fresh`: ids to highlight; `total`: how many
  // the daemon keeps in all.
  update(records, fresh, total) {
    this.records = records;
    this.fresh = fresh;
    this.total = total;
    this.syncOptions();
    this.render();
  }

  row(r, columns) {
    const ok = r.resp_status_code < 400;
    return el(
      "tr",
      { class: this.fresh.has(r.id) ? "new" : null, "data-activity": r.id, "data-model": r.model },
      columns.map((c) => {
        if (c.key === "capture") return el("td", {}, this.capture(r));
        const attrs = { class: [c.num ? "num" : "", c.wrap ? "wrap" : ""].join(" ").trim() || null, "data-col": c.key };
        if (c.key === "speed") attrs["data-role"] = "speed";
        if (c.key === "status") {
          attrs.class = ok ? "status-ok" : "status-bad";
          attrs.title = r.error_msg || null;
        }
        const content = c.key === "model" ? c.cell(r, this.local) : c.cell(r);
        return el("td", attrs, content);
      }),
    );
  }

  render() {
    const rows = this.selected();
    const columns = this.visible();
    const body = this.table.tBodies[0];
    const filtered = rows.length !== this.records.length;
    if (rows.length === 0) {
      const text = this.records.length ? "no request matches the filters" : "no requests yet";
      body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: String(columns.length), text })));
    } else {
      body.replaceChildren(...rows.slice(0, MAX_SHOWN).map((r) => this.row(r, columns)));
      labelled(this.table);
    }
    const more = document.getElementById("activity-more");
    more.textContent = rows.length > MAX_SHOWN
      ? `showing ${MAX_SHOWN} of ${rows.length} matching requests; the export holds all of them`
      : "";
    const read = this.records.length;
    const kept = this.total > read ? ` (the daemon keeps ${number(this.total)}; the newest ${number(read)} were read)` : "";
    const caption = filtered
      ? `over the ${plural(rows.length, "request")} the filters select, of ${number(read)} read${kept}`
      : `over the ${plural(read, "request")} read${kept}`;
    document.getElementById("activity-summary").replaceChildren(...stats.view(stats.summarize(rows), caption));
  }

  export(kind) {
    const rows = this.selected();
    const stamp = new Date().toISOString().replace(/[:.]/g, "-");
    if (kind === "csv") download(`swapd-activity-${stamp}.csv`, "text/csv", toCSV(rows));
    else download(`swapd-activity-${stamp}.json`, "application/json", `${JSON.stringify(rows, null, 2)}\n`);
  }
}
