// Small helpers for building the page: elements from data (never HTML from data), and formats.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function seconds(s) {
  if (s === null || s === undefined || s < 0 || Number.isNaN(s)) return "–";
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function ms(v) {
  return v === null || v === undefined || v < 0 ? "–" : seconds(v / 1000);
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function clock(epochSeconds) {
  if (!epochSeconds) return "–";
  const d = new Date(epochSeconds * 1000);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === today.toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

// A timestamp: epoch seconds (in-flight events) or RFC 3339 (activity records, from the API).
export function epoch(ts) {
  return typeof ts === "number" ? ts : Date.parse(ts) / 1000;
}

export function now() {
  return Date.now() / 1000;
}

let toastTimer = 0;
export function toast(text) {
  const node = document.getElementById("toast");
  node.textContent = text;
  node.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { node.hidden = true; }, 4000);
}

// Each cell's column name (`data-label`), for the phone layout, where a row is a stack of
// labelled cells instead of a line of columns.
export function labelled(table) {
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((td, i) => { if (names[i]) td.dataset.label = names[i]; });
  }
}

const SVG = "http://www.w3.org/2000/svg";

// An SVG element (charts), with the same rules as el(): attributes and text, never markup.
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Hands `text` to the browser as a file to save (an object URL of a Blob made here: nothing
// leaves the page).
export function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = el("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function number(n) {
  return n === null || n === undefined || Number.isNaN(n) ? "–" : n.toLocaleString("en-US");
}

// `node.replaceChildren` with el()'s rules for children: nested lists flattened, null and false
// left out.
export function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

// "1 request", "3 requests".
export function plural(n, one, many = `${one}s`) {
  return `${number(n)} ${n === 1 ? one : many}`;
}
