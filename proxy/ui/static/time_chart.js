// A small line chart over time (the Hardware page's): each series a line through its
// `[epoch seconds, value]` points, its y axis from 0 to `max` (or the highest value), its x axis
// from the first sample to the last. Drawn with svg() from dom.js: attributes and text only.

import { clock, el, svg } from "./dom.js";

// The chart's own units (it scales to its panel's width).
const W = 320;
const H = 104;
const PAD = { top: 8, right: 8, bottom: 18, left: 60 };

function extent(values) {
  let low = Infinity;
  let high = -Infinity;
  for (const v of values) {
    if (v < low) low = v;
    if (v > high) high = v;
  }
  return [low, high];
}

// `role`: the chart's name (`data-chart`); `title`: what it shows; `max`: the top of the y axis
// (null: the highest value); `format(v)`: a value as text (its unit included), `axis(v)` the
// same, short, for the axis (default: `format`); `series`: [{name, cls, points}].
export function timeChart({ role, title, max = null, format, axis = format, series }) {
  const all = series.flatMap((s) => s.points);
  const [t0, t1] = extent(all.map((p) => p[0]));
  const [, highest] = extent(all.map((p) => p[1]));
  const top = max !== null ? max : Math.max(highest, 1);
  const width = W - PAD.left - PAD.right;
  const height = H - PAD.top - PAD.bottom;
  const x = (t) => PAD.left + (t1 > t0 ? ((t - t0) / (t1 - t0)) * width : width);
  const y = (v) => PAD.top + height - (Math.max(0, Math.min(v, top)) / top) * height;
  const base = PAD.top + height;
  const lines = series.map((s) => {
    if (s.points.length === 1) {
      const [t, v] = s.points[0];
      return svg("circle", { class: `line ${s.cls}`, cx: x(t), cy: y(v), r: 2.5 }, svg("title", { text: s.name }));
    }
    const points = s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    return svg("polyline", { class: `line ${s.cls}`, points }, svg("title", { text: s.name }));
  });
  const chart = all.length
    ? svg(
      "svg",
      { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, "data-chart": role, "data-points": String(all.length) },
      svg("line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: PAD.top, y2: PAD.top }),
      svg("line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: PAD.top + height / 2, y2: PAD.top + height / 2 }),
      svg("line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: base, y2: base }),
      svg("text", { x: PAD.left - 4, y: PAD.top + 9, "text-anchor": "end", text: axis(top) }),
      svg("text", { x: PAD.left - 4, y: base, "text-anchor": "end", text: axis(0) }),
      svg("text", { x: PAD.left, y: H - 4, text: clock(t0) }),
      svg("text", { x: W - PAD.right, y: H - 4, "text-anchor": "end", text: clock(t1) }),
      lines,
    )
    : el("p", { class: "hint", text: "no samples yet" });
  // The last value of each series, and its highest, under the chart.
  const legend = series.filter((s) => s.points.length).map((s) => {
    const last = s.points[s.points.length - 1][1];
    const [, peak] = extent(s.points.map((p) => p[1]));
    return el("span", { class: `key ${s.cls}`, "data-series": s.name },
      `${s.name} ${format(last)}`, peak > last ? el("span", { class: "peak", text: ` (peak ${format(peak)})` }) : null);
  });
  return el("figure", { class: "chart", "data-figure": role },
    el("figcaption", { text: title }), chart, legend.length ? el("div", { class: "legend" }, legend) : null);
}
