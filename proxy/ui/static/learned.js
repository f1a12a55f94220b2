// The model page's "Learned" panel: what swapd learned of the model's traffic (`learned` in
// /api/status: who follows it and after how long, its pauses before it was asked again, the
// chance it is asked back soon while asleep, its last read-ahead) and how much of its weight
// files the page cache holds (`page_cache`, mincore). `learn: {enabled: false}`: says so.
// `learnedWords` is the words, `learnedFacts` the panel's elements.

import { bytes, el, seconds } from "./dom.js";

function percent(x) {
  return `${(x * 100).toFixed(0)} %`;
}

// [label, text] pairs for a model's status entry.
export function learnedWords(st) {
  if (!st) return [];
  const cache = st.page_cache;
  const words = [[
    "in the page cache",
    cache
      ? `${percent(cache.fraction)} (${bytes(cache.cached)} of ${bytes(cache.size)}, ${cache.files} file(s))`
      : "– (no weight file named: -m, --model, --mmproj or weights)",
  ]];
  const learned = st.learned;
  if (learned === null || learned === undefined) {
    words.push(["learning", "off (learn.enabled: false)"]);
    return words;
  }
  const followers = learned.followers.map(
    (f) => `${f.model} (${f.count.toFixed(1)} times, ${percent(f.share)}, after ${seconds(f.median_gap)})`);
  words.push(["followed by", followers.length ? followers.join(", ") : "nothing learned yet"]);
  if (learned.likely_next) words.push(["likely next", `${learned.likely_next} (its weights read ahead while this one runs)`]);
  if (learned.returns.length) words.push(["asked again after", learned.returns.map((g) => seconds(g)).join(", ")]);
  if (learned.back_chance !== null && learned.back_chance !== undefined) {
    words.push(["asked back within stopAfter", percent(learned.back_chance)]);
  }
  if (learned.prefetched_at) words.push(["read ahead", `${bytes(learned.prefetched_bytes)} (as the likely next model)`]);
  return words;
}

export function learnedFacts(st) {
  const items = learnedWords(st).flatMap(([dt, dd]) => [
    el("dt", { text: dt }),
    el("dd", { text: dd, "data-role": dt === "in the page cache" ? "page-cache" : null }),
  ]);
  return el("dl", { class: "facts", "data-role": "learned-facts" }, items);
}
