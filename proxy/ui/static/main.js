// The page's entry: tabs (the URL's #fragment), the event stream, and each page's module.

import * as activity from "./activity.js";
import * as events from "./events.js";
import * as gpus from "./gpus.js";
import * as logs from "./logs.js";
import * as models from "./models.js";
import { refresh } from "./store.js";
import * as swaps from "./swaps.js";

const PAGES = ["models", "swaps", "logs", "activity", "gpus"];
const hooks = { logs, gpus };
let shown = null;

function showTab() {
  // `#activity`, or the path llama-swap's UI gives its pages (`/ui/models`: `GET /upstream` goes there).
  const wanted = location.hash.replace("#", "") || location.pathname.replace(/^\/ui\/?/, "");
  const tab = PAGES.includes(wanted) ? wanted : "models";
  if (tab === shown) return;
  if (shown && hooks[shown] && hooks[shown].hide) hooks[shown].hide();
  shown = tab;
  for (const page of PAGES) {
    document.getElementById(`page-${page}`).hidden = page !== tab;
  }
  for (const link of document.querySelectorAll(".tabs a")) {
    link.classList.toggle("active", link.dataset.tab === tab);
  }
  if (hooks[tab] && hooks[tab].show) hooks[tab].show();
}

function connection(live) {
  const node = document.getElementById("conn");
  node.textContent = live ? "live" : "reconnecting…";
  node.classList.toggle("live", live);
}

models.init();
swaps.init();
logs.init();
activity.init();
gpus.init();
window.addEventListener("hashchange", showTab);
showTab();
events.on("open", refresh);
events.connect(connection);
