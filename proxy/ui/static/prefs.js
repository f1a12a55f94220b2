// Settings kept in the browser (localStorage, under `swapd.`): the theme, the activity table's
// columns, the Playground's model and options. Storage may be off or full: then the page keeps
// working with the defaults.

const PREFIX = "swapd.";

export function load(key, fallback) {
  try {
    const raw = localStorage.getItem(PREFIX + key);
    return raw === null ? fallback : JSON.parse(raw);
  } catch {
    return fallback;
  }
}

export function save(key, value) {
  try {
    localStorage.setItem(PREFIX + key, JSON.stringify(value));
  } catch {
    // storage off or full: the setting lasts as long as the page
  }
}
