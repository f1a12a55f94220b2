// The page's entry: the router (the URL's #fragment: `#<page>` or `#<page>/<argument>`), the
// event stream, and each page's module. A page module has `init()` (once), and may have
// `show(argument)` (each time it is shown, or shown with another argument) and `hide()`. A new
// page is one module, one entry in PAGES and one tab link in index.html.

import * as activity from "./activity.js";
import * as catalog from "./catalog.js";
import * as events from "./events.js";
import * as gpus from "./gpus.js";
import * as hardware from "./hardware.js";
import * as logs from "./logs.js";
import * as modelPage from "./model.js";
import * as models from "./models.js";
import { parse, showCurrentTab } from "./nav.js";
import * as playground from "./playground.js";
import * as selectors from "./selectors.js";
import { refresh } from "./store.js";
import * as swaps from "./swaps.js";
import * as theme from "./theme.js";

// page name -> its module and the tab it lights up
const PAGES = {
  models: { module: models, tab: "models" },
  model: { module: modelPage, tab: "models" },
  playground: { module: playground, tab: "playground" },
  activity: { module: activity, tab: "activity" },
  swaps: { module: swaps, tab: "swaps" },
  logs: { module: logs, tab: "logs" },
  gpus: { module: gpus, tab: "gpus" },
  hardware: { module: hardware, tab: "hardware" },
};
let shown = null;
let shownArg = null;

function route() {
  // A page opens at its top (no element's id is a page's name, so the fragment names none for
  // the browser to scroll to).
  window.scrollTo(0, 0);
  // `#activity`, or a path as llama-swap's UI names its pages (`/ui/models`), where the proxy
  // serves the page there.
  let { page, arg } = parse(location.hash || location.pathname.replace(/^\/ui\/?/, ""));
  if (!PAGES[page]) { page = "models"; arg = ""; }
  if (page === shown && arg === shownArg) return;
  const before = shown ? PAGES[shown].module : null;
  if (before && page !== shown && before.hide) before.hide();
  shown = page;
  shownArg = arg;
  for (const name of Object.keys(PAGES)) {
    document.getElementById(`page-${name}`).hidden = name !== page;
  }
  for (const link of document.querySelectorAll(".tabs a")) {
    const active = link.dataset.tab === PAGES[page].tab;
    link.classList.toggle("active", active);
    if (active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  showCurrentTab();
  const { module } = PAGES[page];
  if (module.show) module.show(arg);
}

function connection(live) {
  const node = document.getElementById("conn");
  node.textContent = live ? "live" : "reconnecting…";
  node.classList.toggle("live", live);
}

theme.init();
catalog.init();
for (const { module } of Object.values(PAGES)) module.init();
selectors.init();
window.addEventListener("hashchange", route);
if ("scrollRestoration" in history) history.scrollRestoration = "manual";
route();
window.addEventListener("load", () => {
  window.scrollTo(0, 0);
  // Laid out now (styles and fonts in): the current tab in view at phone width.
  showCurrentTab();
});
events.on("open", refresh);
events.connect(connection);
