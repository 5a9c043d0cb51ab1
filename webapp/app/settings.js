// The Settings tab: sampling defaults (empty: the server's), the API key and the server URL, kept in
// localStorage; what the server runs with (KV codec, expert store, defaults) shown beside them.
import { fillGrid } from "./format.js";
import { loadSettings, saveSettings, SAMPLING_FIELDS } from "./settings_store.js";

export class Settings {
  constructor(onSaved) {
    this.form = document.getElementById("settings-form");
    this.onSaved = onSaved;
    this.fill(loadSettings());
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.save();
    });
    document.getElementById("settings-reset").addEventListener("click", () => {
      const kept = loadSettings();
      for (const f of SAMPLING_FIELDS) delete kept[f];
      saveSettings(kept);
      this.fill(kept);
      this.say("Sampling reset to the server's defaults.");
    });
  }

  fill(settings) {
    for (const input of this.form.querySelectorAll("input[name]")) input.value = settings[input.name] ?? "";
  }

  save() {
    const settings = {};
    for (const input of this.form.querySelectorAll("input[name]")) {
      const value = input.value.trim();
      if (value !== "") settings[input.name] = value;
    }
    saveSettings(settings);
    this.say("Saved.");
    this.onSaved();
  }

  say(text) {
    const out = document.getElementById("settings-saved");
    out.textContent = text;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => (out.textContent = ""), 3000);
  }

  // The server's own defaults as placeholders, and what it runs with.
  showServer(info) {
    const d = info.defaults || {};
    for (const name of SAMPLING_FIELDS) {
      const input = this.form.querySelector(`input[name="${name}"]`);
      if (input && d[name] !== undefined && d[name] !== null) input.placeholder = String(d[name]);
    }
    fillGrid(document.getElementById("server-settings"), [
      ["Model", info.model],
      ["Backend", info.backend],
      ["KV codec", info.kv_codec],
      ["Expert store", info.expert_store],
      ["Context", info.context_size + " tokens"],
      ["Parallel sequences", info.parallel],
      ["Thinking default", info.thinking],
      ["API key required", info.api_key_required ? "yes" : "no"],
      ["Version", info.version],
    ]);
  }
}
