// The model page's "Learned" panel: what swapd learned of the model's traffic (`learned` in
// /api/status: who follows it and after how long, its pauses before it was asked again, the
// chance it is asked back soon while asleep, its last read-ahead) and how much of its weight
// files the page cache holds (`page_cache`, mincore). `learn: {enabled: false}`: says so.

import { bytes, el, seconds } from "./dom.js";

function fact(dt, ...dd) {
  return [el("dt", { text: dt }), el("dd", {}, ...dd)];
}

function percent(x) {
  return `${(x * 100).toFixed(0)} %`;
}

export function learnedFacts(st) {
  if (!st) return el("p", { class: "hint", text: "–" });
  const learned = st.learned;
  const cache = st.page_cache;
  const facts = [
    cache
      ? fact("in the page cache", el("span", { "data-role": "page-cache", "data-fraction": String(cache.fraction),
        text: `${percent(cache.fraction)} (${bytes(cache.cached)} of ${bytes(cache.size)}, ${cache.files} file(s))` }))
      : fact("in the page cache", "– (no weight files named: -m, --model, --mmproj or weights)"),
  ];
  if (learned === null || learned === undefined) {
    facts.push(fact("learning", "off (learn.enabled: false)"));
  } else {
    const followers = learned.followers.map((f) => `${f.model} (${f.count.toFixed(1)}×, ${percent(f.share)}, after ${seconds(f.median_gap)})`);
    facts.push(
      fact("followed by", followers.length ? followers.join(", ") : "nothing learned yet"),
      learned.likely_next ? fact("likely next", learned.likely_next) : null,
      learned.returns.length ? fact("asked again after", learned.returns.map((g) => seconds(g)).join(", ")) : null,
      learned.back_chance !== null && learned.back_chance !== undefined
        ? fact("asked back within stopAfter", percent(learned.back_chance)) : null,
      learned.prefetched_at ? fact("read ahead", `${bytes(learned.prefetched_bytes)} (likely next)`) : null,
    );
  }
  return el("dl", { class: "facts", "data-role": "learned-facts" }, facts.filter(Boolean).flat());
}
