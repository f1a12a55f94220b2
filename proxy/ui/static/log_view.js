// A streamed log in a <pre>: one of `/logs/stream[/<source>]` (its history first, then each new
// line as it is written), ANSI colours rendered, the last `maxLines` kept. Used by the Logs page
// and by each model's page.

import { stream } from "./api.js";
import { el } from "./dom.js";
import { AnsiState, render as ansi, strip } from "./ansi.js";

export class LogView {
  // `follow()`: whether to keep the view at the newest line (default: while the reader has not
  // scrolled up); `keep(line)`: the filter; `prefix(line)`: a regexp match of the line's
  // `[source] ` prefix to draw apart, or null; `onLine(line)`: every line, as it comes.
  constructor(node, options = {}) {
    this.node = node;
    this.maxLines = options.maxLines || 5000;
    this.follow = options.follow || null;
    this.keep = options.keep || (() => true);
    this.prefix = options.prefix || (() => null);
    this.onLine = options.onLine || null;
    this.lines = [];
    this.partial = "";
    this.state = new AnsiState();
    this.controller = null;
  }

  atEnd() {
    const n = this.node;
    return n.scrollHeight - n.scrollTop - n.clientHeight < 24;
  }

  toEnd() {
    this.node.scrollTop = this.node.scrollHeight;
  }

  draw(line) {
    const match = this.prefix(line);
    const node = match
      ? el("div", { class: "line", "data-source": match[1] },
        el("span", { class: "src", text: match[0] }), ansi(line.slice(match[0].length), this.state))
      : el("div", { class: "line" }, ansi(line, this.state));
    this.node.append(node);
  }

  redraw() {
    this.state = new AnsiState();
    this.node.replaceChildren();
    for (const line of this.lines) if (this.keep(line)) this.draw(line);
    if (!this.follow || this.follow()) this.toEnd();
  }

  take(text) {
    const stick = this.follow ? this.follow() : this.atEnd();
    const parts = (this.partial + text).split("\n");
    this.partial = parts.pop();
    for (const line of parts) {
      this.lines.push(line);
      if (this.onLine) this.onLine(line);
      if (this.keep(line)) this.draw(line);
    }
    if (this.lines.length > this.maxLines) {
      this.lines = this.lines.slice(-this.maxLines);
      while (this.node.childElementCount > this.maxLines) this.node.firstChild.remove();
    }
    if (stick) this.toEnd();
  }

  open(path) {
    this.close();
    const controller = new AbortController();
    this.controller = controller;
    this.lines = [];
    this.partial = "";
    this.redraw();
    stream(path, (text) => this.take(text), controller.signal).catch((err) => {
      if (!controller.signal.aborted) this.take(`\n— log stream ended: ${err.message} —\n`);
    });
  }

  close() {
    if (this.controller) this.controller.abort();
    this.controller = null;
  }

  clear() {
    this.lines = [];
    this.redraw();
  }
}

export { strip };
