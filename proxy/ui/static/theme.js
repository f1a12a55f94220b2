// Light or dark: the system's choice (`prefers-color-scheme`) unless the setting pins one. The
// colours are CSS variables (app.css); this only sets `<html data-theme>` (absent: follow the
// system) and keeps the choice in localStorage.

import { load, save } from "./prefs.js";

const CHOICES = ["system", "light", "dark"];

function apply(choice) {
  const root = document.documentElement;
  if (choice === "light" || choice === "dark") root.dataset.theme = choice;
  else delete root.dataset.theme;
}

export function init() {
  const select = document.getElementById("theme");
  let choice = load("theme", "system");
  if (!CHOICES.includes(choice)) choice = "system";
  apply(choice);
  select.value = choice;
  select.addEventListener("change", () => {
    const picked = CHOICES.includes(select.value) ? select.value : "system";
    save("theme", picked);
    apply(picked);
  });
}
