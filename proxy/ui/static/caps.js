// A model's capabilities as tags (from its `/v1/models` entry: llama-swap's `capabilities` flags
// and `context_length`), and which Playground kinds it can be tried with.

import { el } from "./dom.js";

const LABELS = [
  ["vision", "vision"],
  ["function_calling", "tools"],
  ["audio_transcriptions", "transcription"],
  ["audio_speech", "speech"],
  ["image_generation", "image generation"],
  ["image_to_image", "image to image"],
  ["reranker", "reranker"],
];

// 131072 -> "131K", 1000000 -> "1M": how context windows are usually spoken of.
export function contextLabel(tokens) {
  if (!tokens || tokens <= 0) return "";
  if (tokens >= 1_000_000) {
    const m = tokens / 1_000_000;
    return `${Number.isInteger(m) ? m : m.toFixed(1)}M`;
  }
  if (tokens >= 1_000) return `${Math.round(tokens / 1_000)}K`;
  return String(tokens);
}

export function flags(entry) {
  const caps = (entry && entry.capabilities) || {};
  return LABELS.filter(([key]) => caps[key]).map(([key, label]) => ({ key, label }));
}

export function tags(entry) {
  if (!entry) return null;
  const items = flags(entry).map(({ key, label }) =>
    el("span", { class: "tag", "data-cap": key, text: label }));
  const ctx = contextLabel(entry.context_length);
  if (ctx) {
    items.push(el("span", {
      class: "tag ctx", "data-cap": "context", title: `${entry.context_length} tokens of context`, text: `${ctx} ctx`,
    }));
  }
  return items.length ? el("div", { class: "tags" }, items) : null;
}

// The Playground's kinds this model can be tried with. Without configured capabilities nothing is
// known, so the text kinds are offered (a server without the route answers with its error); the
// others only where the capabilities say so.
export function kinds(entry) {
  const caps = (entry && entry.capabilities) || {};
  const arch = (entry && entry.architecture) || {};
  const outs = arch.output_modalities;
  const text = !outs || outs.includes("text");
  const out = [];
  if (text && !caps.audio_transcriptions) out.push("chat", "completion");
  if (text && !caps.audio_transcriptions && !caps.reranker) out.push("embeddings");
  if (caps.audio_transcriptions) out.push("transcription");
  return out.length ? out : ["chat"];
}
