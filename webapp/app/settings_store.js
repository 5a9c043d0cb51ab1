// The user's settings, kept in this browser's localStorage: sampling defaults the Chat tab sends,
// the API key, and the server's URL (empty: the server that served this page).
const KEY = "sluice.settings.v1";
export const SAMPLING_FIELDS = ["temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_tokens", "seed"];
const INTEGER_FIELDS = new Set(["top_k", "max_tokens", "seed"]);

export function loadSettings() {
  try {
    const stored = JSON.parse(localStorage.getItem(KEY) || "{}");
    return typeof stored === "object" && stored !== null ? stored : {};
  } catch {
    return {};
  }
}

export function saveSettings(settings) {
  localStorage.setItem(KEY, JSON.stringify(settings));
}

// The sampling fields the user set, as numbers, for a request body; unset fields are left to the server.
export function samplingParams(settings = loadSettings()) {
  const out = {};
  for (const name of SAMPLING_FIELDS) {
    const raw = settings[name];
    if (raw === undefined || raw === null || raw === "") continue;
    const value = Number(raw);
    if (!Number.isFinite(value)) continue;
    out[name] = INTEGER_FIELDS.has(name) ? Math.trunc(value) : value;
  }
  return out;
}
