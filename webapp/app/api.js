// Calls to the server's API: the base URL and the API key come from the settings. Errors carry the
// server's OpenAI-style message.
import { loadSettings } from "./settings_store.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function baseUrl() {
  const url = (loadSettings().server_url || "").trim().replace(/\/+$/, "");
  return url || window.location.origin;
}

function headers(extra = {}) {
  const key = (loadSettings().api_key || "").trim();
  const h = { ...extra };
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function errorFrom(response) {
  let message = response.status + " " + response.statusText;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch { /* not JSON: keep the status line */ }
  if (response.status === 401) window.dispatchEvent(new CustomEvent("sluice-unauthorized"));
  return new ApiError(response.status, message);
}

export async function getJson(path, { signal } = {}) {
  const response = await fetch(baseUrl() + path, { headers: headers(), signal });
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

export async function postJson(path, body, { signal } = {}) {
  const response = await fetch(baseUrl() + path, {
    method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body), signal,
  });
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

// POSTs a streaming request and calls onEvent(object) for each server-sent `data:` JSON event until
// [DONE]. Aborting `signal` ends it (the fetch rejects with an AbortError).
export async function postStream(path, body, onEvent, { signal } = {}) {
  const response = await fetch(baseUrl() + path, {
    method: "POST", headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body), signal,
  });
  if (!response.ok) throw await errorFrom(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    // Events end with a blank line; a chunk may hold several or part of one.
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        let event;
        try {
          event = JSON.parse(data);
        } catch {
          continue;
        }
        if (event.error) throw new ApiError(500, event.error.message || "the server reported an error");
        onEvent(event);
      }
    }
  }
}
