// The one server push: `/api/events` (llama-swap's event stream plus swapd's `swap`). Each
// message is `{type, data}` with `data` JSON text; listeners are called by type.

const listeners = new Map();

export function on(type, fn) {
  if (!listeners.has(type)) listeners.set(type, []);
  listeners.get(type).push(fn);
}

function dispatch(type, data) {
  for (const fn of listeners.get(type) || []) {
    try { fn(data); } catch (err) { console.error(`${type} listener failed`, err); }
  }
}

export function connect(status) {
  // EventSource reconnects by itself; the server sends a full snapshot to each new connection.
  const source = new EventSource("/api/events");
  source.onopen = () => { status(true); dispatch("open", null); };
  source.onerror = () => status(false);
  source.onmessage = (message) => {
    let envelope;
    try { envelope = JSON.parse(message.data); } catch { return; }
    let data = envelope.data;
    if (typeof data === "string") {
      try { data = JSON.parse(data); } catch { /* plain text */ }
    }
    dispatch(envelope.type, data);
  };
  return source;
}
