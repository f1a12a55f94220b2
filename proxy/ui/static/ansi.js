// ANSI SGR colour codes in log text rendered to spans (classes for the 16 colours, inline
// CSSOM colours for 256-colour and true-colour codes); every other escape sequence is dropped.

const SGR = /\x1b\[([0-9;]*)m|\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;
const CUBE = [0, 95, 135, 175, 215, 255];

function color256(n) {
  if (n < 16) {
    const base = [
      "#000", "#c33", "#3a3", "#cc3", "#36c", "#c3c", "#3cc", "#ccc",
      "#666", "#f66", "#6f6", "#ff6", "#69f", "#f6f", "#6ff", "#fff",
    ];
    return base[n];
  }
  if (n < 232) {
    const i = n - 16;
    return `rgb(${CUBE[Math.floor(i / 36)]},${CUBE[Math.floor(i / 6) % 6]},${CUBE[i % 6]})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g},${g},${g})`;
}

export class AnsiState {
  constructor() { this.reset(); }

  reset() {
    this.fg = null; this.bg = null; this.fgColor = null; this.bgColor = null;
    this.bold = false; this.dim = false; this.italic = false; this.underline = false;
  }

  apply(params) {
    const codes = params === "" ? [0] : params.split(";").map((p) => Number(p || 0));
    for (let i = 0; i < codes.length; i += 1) {
      const c = codes[i];
      if (c === 0) this.reset();
      else if (c === 1) this.bold = true;
      else if (c === 2) this.dim = true;
      else if (c === 3) this.italic = true;
      else if (c === 4) this.underline = true;
      else if (c === 22) { this.bold = false; this.dim = false; }
      else if (c === 23) this.italic = false;
      else if (c === 24) this.underline = false;
      else if ((c >= 30 && c <= 37) || (c >= 90 && c <= 97)) { this.fg = c; this.fgColor = null; }
      else if (c === 39) { this.fg = null; this.fgColor = null; }
      else if ((c >= 40 && c <= 47) || (c >= 100 && c <= 107)) { this.bg = c; this.bgColor = null; }
      else if (c === 49) { this.bg = null; this.bgColor = null; }
      else if (c === 38 || c === 48) {
        let value = null;
        if (codes[i + 1] === 5) { value = color256(codes[i + 2] || 0); i += 2; }
        else if (codes[i + 1] === 2) {
          value = `rgb(${codes[i + 2] || 0},${codes[i + 3] || 0},${codes[i + 4] || 0})`;
          i += 4;
        }
        if (c === 38) { this.fg = null; this.fgColor = value; } else { this.bg = null; this.bgColor = value; }
      }
    }
  }

  plain() {
    return !this.fg && !this.bg && !this.fgColor && !this.bgColor && !this.bold && !this.dim
      && !this.italic && !this.underline;
  }

  span(text) {
    if (this.plain()) return document.createTextNode(text);
    const node = document.createElement("span");
    const classes = [];
    if (this.fg) classes.push(`fg-${this.fg}`);
    if (this.bg) classes.push(`bg-${this.bg > 99 ? this.bg - 60 : this.bg}`);
    if (this.bold) classes.push("ansi-bold");
    if (this.dim) classes.push("ansi-dim");
    if (this.italic) classes.push("ansi-italic");
    if (this.underline) classes.push("ansi-underline");
    node.className = classes.join(" ");
    if (this.fgColor) node.style.color = this.fgColor;
    if (this.bgColor) node.style.background = this.bgColor;
    node.textContent = text;
    return node;
  }
}

// One line of text as nodes; `state` carries colours across lines, as a terminal does.
export function render(line, state) {
  const nodes = [];
  let last = 0;
  SGR.lastIndex = 0;
  for (let m = SGR.exec(line); m !== null; m = SGR.exec(line)) {
    if (m.index > last) nodes.push(state.span(line.slice(last, m.index)));
    if (m[1] !== undefined) state.apply(m[1]);
    last = SGR.lastIndex;
  }
  if (last < line.length) nodes.push(state.span(line.slice(last)));
  return nodes;
}

export function strip(line) {
  return line.replace(SGR, "");
}
