// The app's start: tabs, the server's description (/v1/server) shared by the tabs, and a banner when
// the server wants an API key the settings do not hold.
import { getJson } from "./api.js";
import { Chat } from "./chat.js";
import { Models } from "./models.js";
import { Settings } from "./settings.js";

let served = null;
const chat = new Chat(() => (served ? served.model : undefined));
const models = new Models();
const settings = new Settings(() => refresh());

function showTab(name) {
  for (const tab of document.querySelectorAll("[role=tab]")) {
    const on = tab.dataset.tab === name;
    tab.setAttribute("aria-selected", String(on));
    document.getElementById("panel-" + tab.dataset.tab).hidden = !on;
  }
  document.body.dataset.tab = name;
  if (name === "models") models.loadCache();
  if (location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
}

for (const tab of document.querySelectorAll("[role=tab]")) tab.addEventListener("click", () => showTab(tab.dataset.tab));

function banner(text, action) {
  const b = document.getElementById("banner");
  if (!text) {
    b.hidden = true;
    return;
  }
  b.replaceChildren(document.createTextNode(text));
  if (action) {
    const button = document.createElement("button");
    button.textContent = action[0];
    button.addEventListener("click", action[1]);
    b.append(button);
  }
  b.hidden = false;
}

window.addEventListener("sluice-unauthorized", () => {
  banner("This server needs an API key (it was started with --api-key).", ["Enter it in Settings", () => {
    showTab("settings");
    document.querySelector('#settings-form input[name="api_key"]').focus();
  }]);
});

async function refresh() {
  try {
    served = await getJson("/v1/server");
    banner(null);
    document.getElementById("served-model").textContent = `${served.model} · ${served.backend}`;
    models.showServed(served);
    settings.showServer(served);
    document.body.dataset.ready = "true";
  } catch (e) {
    if (e.status !== 401) banner("Cannot reach the server: " + e.message, ["Retry", () => refresh()]);
  }
}

showTab(["chat", "models", "settings"].includes(location.hash.slice(1)) ? location.hash.slice(1) : "chat");
refresh();
