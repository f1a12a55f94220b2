// Addresses inside the page: `#<page>` or `#<page>/<argument>` (a model id, URL-encoded: ids may
// hold `/ : .`). main.js routes them; page modules link with these.

export function href(page, arg) {
  return arg === undefined || arg === null || arg === "" ? `#${page}` : `#${page}/${encodeURIComponent(arg)}`;
}

export function parse(hash) {
  const text = hash.replace(/^#/, "");
  const cut = text.indexOf("/");
  if (cut < 0) return { page: text, arg: "" };
  let arg = text.slice(cut + 1);
  try { arg = decodeURIComponent(arg); } catch { /* a hand-typed %: keep it as it is */ }
  return { page: text.slice(0, cut), arg };
}

export const modelHref = (id) => href("model", id);

// At phone width the tabs scroll sideways: the current one is scrolled into view, whole (the
// row's own scroll only; the page does not move). Again whenever the row changes (the GPUs tab
// appears once the daemon reports GPUs, and pushes the tabs after it along).
export function showCurrentTab() {
  const link = document.querySelector(".tabs a.active");
  if (!link) return;
  const tabs = link.parentElement;
  const left = link.offsetLeft - tabs.offsetLeft;
  if (left < tabs.scrollLeft) tabs.scrollLeft = left;
  else if (left + link.offsetWidth > tabs.scrollLeft + tabs.clientWidth) {
    tabs.scrollLeft = left + link.offsetWidth - tabs.clientWidth;
  }
}
