// What the Playground's kinds share: the request options (kept in localStorage), a request's
// error as text, the line of timings under an answer, and the "waiting for the model" line that
// shows a model's state (from the event stream) while a request waits for it.

import * as catalog from "./catalog.js";
import { el, seconds } from "./dom.js";
import { load, save } from "./prefs.js";
import { modelStatus, stateOf, subscribe, tableItem } from "./store.js";
import { requestWaitText } from "./waits.js";

const DEFAULTS = { system: "", max_tokens: 512, temperature: "", extra: "" };

export function options() {
  return { ...DEFAULTS, ...load("playground.options", {}) };
}

export function setOption(key, value) {
  save("playground.options", { ...options(), [key]: value });
}

// The options' fields for a request body (the system prompt is the chat's first message, not a
// field). `extra` is a JSON object merged in last (a server's own parameters: `top_k`,
// `ignore_eos`, ...); it is checked before anything is sent.
export function bodyOptions() {
  const o = options();
  const body = {};
  const max = Number.parseInt(o.max_tokens, 10);
  if (max > 0) body.max_tokens = max;
  const temperature = Number.parseFloat(o.temperature);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  if (o.extra.trim()) {
    let extra;
    try { extra = JSON.parse(o.extra); } catch (err) { throw new Error(`extra parameters: not JSON (${err.message})`); }
    if (!extra || typeof extra !== "object" || Array.isArray(extra)) throw new Error("extra parameters: not a JSON object");
    Object.assign(body, extra);
  }
  return body;
}

function input(key, label, attrs) {
  const node = el(attrs.rows ? "textarea" : "input", {
    ...attrs, "data-option": key, value: attrs.rows ? null : String(options()[key]),
    oninput: (e) => {
      setOption(key, e.target.value);
      // The other kinds' panels show the same options.
      for (const other of document.querySelectorAll(`[data-option="${key}"]`)) {
        if (other !== e.target) other.value = e.target.value;
      }
    },
  });
  if (attrs.rows) node.value = options()[key];
  return el("label", { class: "field" }, label, node);
}

// The options panel; `kind` "chat" has the system prompt too.
export function optionsPanel(kind) {
  return el(
    "details",
    { class: "settings" },
    el("summary", { text: "Options" }),
    el("div", { class: "grid" },
      kind === "chat" ? input("system", "system prompt", { rows: 2, placeholder: "none" }) : null,
      input("max_tokens", "max tokens", { type: "number", min: "1" }),
      input("temperature", "temperature", { type: "number", min: "0", max: "2", step: "0.05", placeholder: "the server's" }),
      input("extra", "extra parameters (JSON object)", { rows: 2, placeholder: '{"top_k": 40}' })),
  );
}

// An answer that is not OK, as text: swapd's and OpenAI's JSON error shape, else the body.
export async function errorOf(response) {
  let text = "";
  try { text = await response.text(); } catch { /* gone */ }
  try {
    const data = JSON.parse(text);
    const error = data.error || data;
    const message = typeof error === "string" ? error : error.message || text;
    return `${response.status}: ${message}`;
  } catch {
    return `${response.status}: ${text.trim() || response.statusText}`;
  }
}

// "first token 0.42 s · 16 tokens at 48.3 tok/s · prompt 12 tokens at 250 tok/s · 0.8 s in all"
// `finish`: the answer's finish_reason (`stop`, `length`, ...), "" when a finished stream carried
// none (an OpenAI client could not tell such an answer from one cut short), null when it was
// stopped or failed.
export function timingsLine(s, finish = null) {
  const parts = [];
  if (s.loading !== null) parts.push(el("span", { "data-role": "loading-time", text: `loading ${seconds(s.loading)}` }));
  if (s.ttft !== null) {
    // After a load, how long the model itself took to its first token says more.
    const own = s.loading !== null && s.ttft >= s.loading ? `, ${seconds(s.ttft - s.loading)} after loading` : "";
    parts.push(el("span", { "data-role": "ttft", text: `first token ${seconds(s.ttft)}${own}` }));
  }
  if (s.tokens !== null) {
    const rate = s.tps !== null ? ` at ${s.tps.toFixed(1)} tok/s` : "";
    parts.push(el("span", {
      "data-role": "tps", "data-tps": s.tps === null ? null : String(s.tps), "data-from": s.tpsFrom || null,
      title: s.tpsFrom === "server" ? "the server's own timings" : s.tpsFrom === "measured" ? "measured in this page" : null,
      text: `${s.tokens} tokens${rate}`,
    }));
  }
  if (s.prompt !== null) {
    const rate = s.promptTps !== null ? ` at ${s.promptTps.toFixed(0)} tok/s` : "";
    const cached = s.cached ? `, ${s.cached} cached` : "";
    parts.push(el("span", { "data-role": "prompt-tokens", text: `prompt ${s.prompt} tokens${rate}${cached}` }));
  }
  parts.push(el("span", { "data-role": "total", text: `${seconds(s.total)} in all` }));
  if (finish !== null) {
    parts.push(el("span", {
      "data-role": "finish", "data-finish": finish,
      text: finish ? `finished: ${finish}` : "no finish reason: the answer may have been cut short",
    }));
  }
  return parts.flatMap((p, i) => (i ? [" · ", p] : [p]));
}

// The model a name stands for, where this page can tell (a model id or an alias of one).
function modelOf(name) {
  if (tableItem(name)) return name;
  const entry = catalog.entry(name);
  return entry ? entry.id : null;
}

// A line that says what the request waits for while no answer has come: the model's state now,
// and for how long (a cold start, a swap). `stop()` ends it.
export function waitingLine(name) {
  const node = el("div", { class: "waiting", "data-role": "waiting" });
  const id = modelOf(name);
  let stopped = false;
  const draw = () => {
    if (stopped) return;
    const item = id ? tableItem(id) : null;
    const state = item ? stateOf(item) : "";
    const st = id ? modelStatus(id) : null;
    // What the daemon says its swap waits for (a busy model, the queue, ...), else its state.
    node.textContent = requestWaitText(id, item ? state : "", st) || "waiting for the answer…";
  };
  draw();
  const timer = setInterval(draw, 500);
  const unsubscribe = subscribe(draw);
  return {
    node,
    stop() { stopped = true; clearInterval(timer); unsubscribe(); node.remove(); },
  };
}
