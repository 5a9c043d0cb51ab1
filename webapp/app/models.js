// The Models tab: the served model and its memory plan, the models in the local Hugging Face cache
// with whether each fits this machine's memory, and hub search with downloads whose progress the
// server reports (/v1/hub/downloads/{id}, polled while one runs).
import { getJson, postJson } from "./api.js";
import { bytes, el, fillGrid } from "./format.js";

const POLL_MS = 400;

export class Models {
  constructor() {
    this.jobs = new Map();  // id -> list item
    this.$ = (id) => document.getElementById(id);
    this.$("hub-search").addEventListener("submit", (e) => {
      e.preventDefault();
      this.search(this.$("hub-query").value.trim());
    });
  }

  showServed(info) {
    fillGrid(this.$("served-info"), [
      ["Model", info.model],
      ["Backend", info.backend],
      ["Context", info.context_size + " tokens"],
      ["KV codec", info.kv_codec],
      ["Expert store", info.expert_store],
    ]);
    const plan = info.memory_plan || {};
    const table = this.$("memory-plan");
    table.replaceChildren();
    const row = (cells, head = false) => {
      const tr = el("tr");
      for (const c of cells) tr.append(el(head ? "th" : "td", "", c));
      table.append(tr);
    };
    row(["", "per token", `at ${info.context_size} tokens`], true);
    row(["weights", "", bytes(plan.weights_bytes)]);
    for (const k of plan.kv || []) {
      row([`KV ${k.codec}${k.configured ? " (configured)" : ""}`, bytes(k.bytes_per_token), bytes(k.bytes_at_context)]);
    }
    if (plan.per_sequence_bytes) row(["+ per sequence (windows, state)", "", bytes(plan.per_sequence_bytes)]);
    row(["total (full context)", "", bytes(plan.total_bytes)]);
    if (plan.budget_bytes !== undefined) {
      row([plan.budget_source, "", bytes(plan.budget_bytes) + (plan.fits ? " — fits" : " — does NOT fit")]);
    }
  }

  async loadCache() {
    const list = this.$("cached-models");
    try {
      const cache = await getJson("/v1/hub/models");
      this.$("cache-dir").textContent = `${cache.cache_dir} · ${bytes(cache.memory_available_bytes)} of memory available`;
      list.replaceChildren();
      if (!cache.data.length) list.append(el("li", "hint", "No models in the cache yet: search the hub below."));
      for (const m of cache.data) list.append(this.cachedItem(m));
    } catch (e) {
      list.replaceChildren(el("li", "hint", "Cannot list the cache: " + e.message));
    }
  }

  cachedItem(m) {
    const li = el("li");
    li.dataset.model = m.id;
    const text = el("div", "grow");
    text.append(el("div", "name", m.id));
    const meta = `${m.commit ? m.commit.slice(0, 8) + " · " : ""}${bytes(m.disk_bytes)} on disk` +
      (m.needed_bytes ? ` · needs ≈ ${bytes(m.needed_bytes)}` : "");
    text.append(el("div", "meta", meta));
    li.append(text);
    if (!m.complete) li.append(el("span", "badge partial", "incomplete"));
    else if (m.needed_bytes) li.append(el("span", "badge " + (m.fits ? "fits" : "nofit"), m.fits ? "fits" : "does not fit"));
    if (m.served) li.append(el("span", "badge fits", "serving"));
    else li.append(el("code", "cmd", "sluice serve --model " + m.id));
    return li;
  }

  async search(query) {
    const list = this.$("hub-results");
    if (!query) return;
    list.replaceChildren(el("li", "hint", "Searching…"));
    try {
      const found = await getJson("/v1/hub/search?q=" + encodeURIComponent(query));
      list.replaceChildren();
      if (!found.data.length) list.append(el("li", "hint", "No model matches."));
      for (const m of found.data) {
        const li = el("li");
        li.dataset.model = m.id;
        const text = el("div", "grow");
        text.append(el("div", "name", m.id));
        const meta = [m.pipeline_tag, m.downloads !== undefined ? `${m.downloads} downloads` : "",
                      m.likes !== undefined ? `${m.likes} likes` : "", m.gated ? "gated" : ""].filter(Boolean).join(" · ");
        text.append(el("div", "meta", meta));
        const button = el("button", "download-button", "Download");
        button.addEventListener("click", () => this.download(m.id));
        li.append(text, button);
        list.append(li);
      }
    } catch (e) {
      list.replaceChildren(el("li", "hint", "Search failed: " + e.message));
    }
  }

  async download(model) {
    try {
      const job = await postJson("/v1/hub/downloads", { model });
      this.track(job);
    } catch (e) {
      const list = this.$("downloads");
      list.querySelector(".hint")?.remove();
      list.prepend(el("li", "hint", `${model}: ${e.message}`));
    }
  }

  track(job) {
    let li = this.jobs.get(job.id);
    if (!li) {
      const list = this.$("downloads");
      list.querySelector(".hint")?.remove();
      li = el("li", "download");
      li.dataset.job = job.id;
      const head = el("div", "row");
      head.append(el("span", "name", job.model), el("span", "meta status"));
      const bar = el("div", "progress");
      bar.append(el("div"));
      li.append(head, bar, el("div", "meta detail"));
      list.prepend(li);
      this.jobs.set(job.id, li);
    }
    this.render(li, job);
    if (job.phase !== "done" && job.phase !== "failed") {
      setTimeout(async () => {
        try {
          this.track(await getJson("/v1/hub/downloads/" + encodeURIComponent(job.id)));
        } catch (e) {
          li.querySelector(".detail").textContent = "Lost track of the download: " + e.message;
        }
      }, POLL_MS);
    } else if (job.phase === "done") {
      this.loadCache();
    }
  }

  render(li, job) {
    const pct = job.phase === "done" ? 100 : job.percent || 0;
    li.dataset.phase = job.phase;
    li.querySelector(".status").textContent = job.phase === "downloading" ? pct.toFixed(0) + " %" : job.phase;
    const bar = li.querySelector(".progress");
    bar.classList.toggle("done", job.phase === "done");
    bar.classList.toggle("failed", job.phase === "failed");
    bar.firstChild.style.width = pct + "%";
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-valuenow", String(Math.round(pct)));
    const detail = job.phase === "failed" ? job.error
      : `${bytes(job.bytes_done)} of ${bytes(job.bytes_total)} · ${job.files_done}/${job.files_total} files`;
    li.querySelector(".detail").textContent = detail;
  }
}
