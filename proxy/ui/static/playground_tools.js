// The Playground's other kinds: embeddings (`POST /v1/embeddings`: each input's vector, its size
// and norm) and transcription (`POST /v1/audio/transcriptions`, for models whose capabilities say
// they transcribe: an audio file in, its text out). Each shows how long the request took.

import { el, seconds } from "./dom.js";
import { errorOf, waitingLine } from "./playground_common.js";

function elapsed(started) {
  return seconds(performance.now() / 1000 - started);
}

async function post(model, path, init, out) {
  const waiting = waitingLine(model);
  out.replaceChildren(waiting.node);
  const started = performance.now() / 1000;
  try {
    const response = await fetch(path, init);
    if (!response.ok) throw new Error(await errorOf(response));
    return { data: await response.json(), took: elapsed(started) };
  } finally {
    waiting.stop();
  }
}

const finite = (v) => typeof v === "number" && Number.isFinite(v);

// A vector as the table shows it: its size, its norm and its first values. Whatever a server
// sends (a null, a string, a nested list in the vector, no list at all) is shown, never thrown
// on: a value that is not a number reads "?", and the norm of such a vector "–".
export function vectorSummary(embedding) {
  const vector = Array.isArray(embedding) ? embedding : [];
  const norm = vector.every(finite) ? Math.sqrt(vector.reduce((a, v) => a + v * v, 0)).toFixed(4) : "–";
  const head = vector.slice(0, 6).map((v) => (finite(v) ? v.toFixed(4) : "?")).join(", ");
  return { dims: vector.length, norm, head: vector.length > 6 ? `${head}, …` : head };
}

export function embeddings(model) {
  const input = el("textarea", { "data-role": "prompt", rows: "4", "aria-label": "inputs", placeholder: "One input per line" });
  const out = el("div", { class: "result", "data-role": "result" });
  const go = el("button", { class: "primary", "data-action": "send", text: "Embed" });
  go.addEventListener("click", async () => {
    const picked = model();
    const inputs = input.value.split("\n").map((l) => l.trim()).filter(Boolean);
    if (!picked || !inputs.length) return;
    go.disabled = true;
    try {
      const body = { model: picked, input: inputs.length === 1 ? inputs[0] : inputs };
      const { data, took } = await post(picked, "/v1/embeddings", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      }, out);
      const rows = (Array.isArray(data.data) ? data.data : []).map((item, i) => {
        const { index = i, embedding } = item && typeof item === "object" ? item : {};
        const shown = vectorSummary(embedding);
        return el("tr", { "data-embedding": String(index) },
          el("td", { class: "wrap", text: inputs[index] || "" }),
          el("td", { class: "num", "data-role": "dims", text: String(shown.dims) }),
          el("td", { class: "num", text: shown.norm }),
          el("td", { class: "wrap", text: shown.head }));
      });
      const usage = data.usage && data.usage.prompt_tokens >= 0 ? ` · ${data.usage.prompt_tokens} tokens` : "";
      out.replaceChildren(
        el("div", { class: "table-wrap" }, el("table", {},
          el("thead", {}, el("tr", {}, el("th", { text: "input" }), el("th", { class: "num", text: "dimensions" }),
            el("th", { class: "num", text: "norm" }), el("th", { text: "first values" }))),
          el("tbody", {}, rows))),
        el("div", { class: "timings", "data-role": "timings", text: `${took} in all${usage}` }),
      );
    } catch (err) {
      out.replaceChildren(el("div", { class: "error", "data-role": "error", text: err.message }));
    } finally {
      go.disabled = false;
    }
  });
  return {
    node: el("div", { class: "chat", "data-kind-view": "embeddings" }, input, el("div", { class: "actions" }, go), out),
    stop() {},
    focus: () => input.focus(),
  };
}

export function transcription(model) {
  const file = el("input", { type: "file", accept: "audio/*,video/*", "data-role": "file", "aria-label": "audio file" });
  const language = el("input", { type: "text", placeholder: "e.g. en (optional)", "aria-label": "language", size: "12" });
  const out = el("div", { class: "result", "data-role": "result" });
  const go = el("button", { class: "primary", "data-action": "send", text: "Transcribe" });
  go.addEventListener("click", async () => {
    const picked = model();
    const chosen = file.files && file.files[0];
    if (!picked || !chosen) return;
    go.disabled = true;
    try {
      const form = new FormData();
      form.append("model", picked);
      form.append("file", chosen, chosen.name);
      if (language.value.trim()) form.append("language", language.value.trim());
      const { data, took } = await post(picked, "/v1/audio/transcriptions", { method: "POST", body: form }, out);
      out.replaceChildren(
        el("article", { class: "msg assistant" }, el("div", { class: "text", "data-role": "text", text: data.text || JSON.stringify(data) })),
        el("div", { class: "timings", "data-role": "timings", text: `${took} in all for ${chosen.name}` }),
      );
    } catch (err) {
      out.replaceChildren(el("div", { class: "error", "data-role": "error", text: err.message }));
    } finally {
      go.disabled = false;
    }
  });
  return {
    node: el("div", { class: "chat", "data-kind-view": "transcription" },
      el("div", { class: "toolbar" }, el("label", { class: "field" }, "audio file", file),
        el("label", { class: "field" }, "language", language)),
      el("div", { class: "actions" }, go), out),
    stop() {},
    focus: () => file.focus(),
  };
}
