// The proxy's HTTP API, same origin: the browser sends the Basic credentials it was asked for.

export async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    const error = new Error(`${path}: ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

export async function send(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) {
    const message = data && data.error ? data.error.message || data.error : response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return data;
}

// A streamed text response (the logs): `onText` gets each chunk as it arrives, until `signal`
// aborts it or the server ends it.
export async function stream(path, onText, signal) {
  const response = await fetch(path, { signal });
  if (!response.ok || !response.body) throw new Error(`${path}: ${response.status}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
}

export const encode = encodeURIComponent;

// `read` (an async function that handles its own errors) made into a refresh: one read at a time;
// a call while one runs asks for one more read after it, however many calls came, and gets the
// running one's promise. `after` runs once the reads are done.
export function coalesced(read, after) {
  let running = null;
  let again = false;
  return function refresh() {
    if (running) { again = true; return running; }
    running = (async () => {
      try {
        do {
          again = false;
          await read();
        } while (again);
      } finally {
        running = null;
      }
      after();
    })();
    return running;
  };
}
