// An OpenAI-style streamed answer (server-sent events) read event by event, and the request's
// timings: from the upstream's own figures where it sends them (llama.cpp's `timings`, OpenAI's
// `usage`), else measured here from when the chunks arrived.

// Each `data:` payload of an SSE response, parsed as JSON (`[DONE]` ends it; a payload that is
// not JSON is given as `{text}`).
export async function* sse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    // CR LF and CR count as LF; a CR at the very end may be half of a CR LF still on its way.
    const cut = buffer.endsWith("\r") ? buffer.length - 1 : buffer.length;
    buffer = buffer.slice(0, cut).replace(/\r\n?/g, "\n") + buffer.slice(cut);
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data === "[DONE]") return;
      if (data) {
        try { yield JSON.parse(data); } catch { yield { text: data }; }
      }
      end = buffer.indexOf("\n\n");
    }
  }
}

const clock = () => performance.now() / 1000;

export class Timing {
  constructor() {
    this.sent = clock();
    this.head = null; // the response's head
    this.loadingEnd = null; // the last loading-progress chunk (swapd's sendLoadingState)
    this.first = null; // the first token
    this.last = null;
    this.chunks = 0; // chunks that carried tokens
    this.usage = null;
    this.timings = null;
    this.end = null;
  }

  response() { this.head = clock(); }

  loading() { this.loadingEnd = clock(); }

  token() {
    const t = clock();
    if (this.first === null) this.first = t;
    this.last = t;
    this.chunks += 1;
  }

  figures(event) {
    if (event.usage) this.usage = event.usage;
    if (event.timings) this.timings = event.timings;
  }

  done() { if (this.end === null) this.end = clock(); }

  // What the answer's timings line shows. Speeds are the server's where it reports them.
  summary() {
    const t = this.timings || {};
    const u = this.usage || {};
    const out = {
      total: (this.end === null ? clock() : this.end) - this.sent,
      loading: this.loadingEnd === null ? null : this.loadingEnd - this.sent,
      ttft: this.first === null ? null : this.first - this.sent,
      tokens: null, tokensFrom: "",
      tps: null, tpsFrom: "",
      prompt: null, promptTps: null, cached: null,
    };
    if (t.predicted_n >= 0) { out.tokens = t.predicted_n; out.tokensFrom = "server"; }
    else if (u.completion_tokens >= 0) { out.tokens = u.completion_tokens; out.tokensFrom = "usage"; }
    else if (this.chunks) { out.tokens = this.chunks; out.tokensFrom = "chunks"; }
    if (t.predicted_per_second > 0) { out.tps = t.predicted_per_second; out.tpsFrom = "server"; }
    else if (out.tokens > 1 && this.last > this.first) {
      // The first token came at `first`; the others over the time after it.
      out.tps = (out.tokens - 1) / (this.last - this.first);
      out.tpsFrom = "measured";
    }
    if (t.prompt_n >= 0) out.prompt = t.prompt_n;
    else if (u.prompt_tokens >= 0) out.prompt = u.prompt_tokens;
    if (t.prompt_per_second > 0) out.promptTps = t.prompt_per_second;
    if (t.cache_n > 0) out.cached = t.cache_n;
    else if (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens > 0) out.cached = u.prompt_tokens_details.cached_tokens;
    return out;
  }
}
