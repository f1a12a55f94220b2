// Activity at a glance: totals and the prompt-processing and generation speed distributions, as
// `GET /api/metrics/stats` computes them (the model page shows the daemon's), or computed here
// by the same rule over the rows the Activity page's filters select.

import { el, ms, number, plural, svg } from "./dom.js";

function percentile(ordered, p) {
  if (ordered.length === 1) return ordered[0];
  const rank = (p / 100) * (ordered.length - 1);
  const low = Math.floor(rank);
  const high = Math.min(low + 1, ordered.length - 1);
  return ordered[low] + (ordered[high] - ordered[low]) * (rank - low);
}

// The daemon's histogram (daemon/observe/activity_query.py, after llama-swap's): 5 to 20 bins by
// Sturges' rule, with p50, p95 and p99; null when there is no value.
export function histogram(values) {
  if (!values.length) return null;
  const ordered = [...values].sort((a, b) => a - b);
  const low = ordered[0];
  const high = ordered[ordered.length - 1];
  const shape = {
    min: low, max: high,
    p50: percentile(ordered, 50), p95: percentile(ordered, 95), p99: percentile(ordered, 99),
  };
  if (low === high) return { bins: [values.length], binSize: 0, ...shape };
  const count = Math.min(20, Math.max(5, Math.ceil(Math.log2(values.length)) + 1));
  const size = (high - low) / count;
  const bins = new Array(count).fill(0);
  for (const v of values) bins[Math.min(Math.floor((v - low) / size), count - 1)] += 1;
  return { bins, binSize: size, ...shape };
}

const positive = (n) => (typeof n === "number" && n > 0 ? n : 0);

// `/api/metrics/stats`' shape, plus what the page adds (errors, time spent) over `records`.
export function summarize(records) {
  const tokens = (r) => r.tokens || {};
  const durations = records.map((r) => r.duration_ms).filter((d) => d >= 0).sort((a, b) => a - b);
  return {
    total_requests: records.length,
    errors: records.filter((r) => r.resp_status_code >= 400).length,
    total_input_tokens: records.reduce((a, r) => a + positive(tokens(r).input_tokens), 0),
    total_cache_tokens: records.reduce((a, r) => a + positive(tokens(r).cache_tokens), 0),
    total_output_tokens: records.reduce((a, r) => a + positive(tokens(r).output_tokens), 0),
    median_ms: durations.length ? percentile(durations, 50) : -1,
    waited_ms: records.reduce((a, r) => a + positive(r.wait_ms), 0),
    prompt_histogram: histogram(records.map((r) => tokens(r).prompt_per_second).filter((v) => v > 0)),
    gen_histogram: histogram(records.map((r) => tokens(r).tokens_per_second).filter((v) => v > 0)),
  };
}

// The chart's own units (it scales to the panel's width): about the size it is drawn at on a
// desktop, so that its text stays readable.
const W = 420;
const H = 130;
const PAD = { top: 8, right: 8, bottom: 20, left: 30 };

function chart(data, unit) {
  const width = W - PAD.left - PAD.right;
  const height = H - PAD.top - PAD.bottom;
  const most = Math.max(...data.bins);
  const span = data.max - data.min;
  const x = (v) => PAD.left + (span > 0 ? ((v - data.min) / span) * width : width / 2);
  // One value only (every speed the same): one narrow bar in the middle, not a wall.
  const single = data.bins.length === 1;
  const barW = single ? width / 8 : width / data.bins.length;
  const bars = data.bins.map((count, i) => {
    const h = most > 0 ? (count / most) * height : 0;
    const from = data.min + i * data.binSize;
    const to = from + data.binSize;
    const left = single ? PAD.left + (width - barW) / 2 : PAD.left + i * barW + 0.5;
    const range = single ? `${from.toFixed(1)}` : `${from.toFixed(1)}–${to.toFixed(1)}`;
    return svg("rect", {
      class: "bar", x: left, y: PAD.top + height - h,
      width: Math.max(barW - 1, 1), height: h, "data-count": count,
    }, svg("title", { text: `${range} ${unit}: ${count}` }));
  });
  const marks = ["p50", "p95", "p99"].map((p) => svg("line", {
    class: "pct", x1: x(data[p]), x2: x(data[p]), y1: PAD.top, y2: PAD.top + height,
  }, svg("title", { text: `${p} ${data[p].toFixed(1)} ${unit}` })));
  const base = PAD.top + height;
  return svg(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `distribution of ${unit}` },
    svg("line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: base, y2: base }),
    svg("line", { class: "axis", x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: base }),
    svg("text", { x: PAD.left - 4, y: PAD.top + 10, "text-anchor": "end", text: String(most) }),
    svg("text", { x: PAD.left - 4, y: base, "text-anchor": "end", text: "0" }),
    bars,
    marks,
    single
      ? svg("text", { x: PAD.left + width / 2, y: H - 6, "text-anchor": "middle", text: data.min.toFixed(1) })
      : [
        svg("text", { x: PAD.left, y: H - 6, text: data.min.toFixed(1) }),
        svg("text", { x: W - PAD.right, y: H - 6, "text-anchor": "end", text: data.max.toFixed(1) }),
      ],
  );
}

function histogramPanel(title, data, unit, kind) {
  const count = data ? data.bins.reduce((a, b) => a + b, 0) : 0;
  return el(
    "div",
    { class: `panel histogram ${kind}`, "data-histogram": kind, "data-count": String(count) },
    el("h3", { text: title }),
    data
      ? [
        chart(data, unit),
        el("p", {
          class: "legend",
          text: `p50 ${data.p50.toFixed(1)} · p95 ${data.p95.toFixed(1)} · p99 ${data.p99.toFixed(1)} ${unit} · ${plural(count, "request")}`,
        }),
      ]
      : el("p", { class: "hint", text: "no speeds reported yet" }),
  );
}

function total(label, value, role) {
  return el("div", { "data-total": role }, el("dt", { text: label }), el("dd", { text: value }));
}

// The totals and the two histograms; `caption` says what they are over.
export function view(stats, caption) {
  const totals = [
    total("requests", number(stats.total_requests), "requests"),
    stats.errors !== undefined ? total("errors", number(stats.errors), "errors") : null,
    total("prompt tokens", number(stats.total_input_tokens), "input"),
    total("cached tokens", number(stats.total_cache_tokens), "cached"),
    total("generated tokens", number(stats.total_output_tokens), "output"),
    stats.median_ms !== undefined ? total("median duration", ms(stats.median_ms), "median") : null,
    stats.waited_ms !== undefined ? total("waited for starts", ms(stats.waited_ms), "waited") : null,
  ];
  return [
    el("div", { class: "panel" },
      el("h3", { text: "Totals" }),
      caption ? el("p", { class: "hint", "data-role": "caption", text: caption }) : null,
      el("dl", { class: "totals" }, totals)),
    histogramPanel("Prompt processing", stats.prompt_histogram, "tokens/s", "prompt"),
    histogramPanel("Generation", stats.gen_histogram, "tokens/s", "gen"),
  ];
}
