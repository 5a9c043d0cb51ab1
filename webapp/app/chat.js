// The Chat tab: a conversation streamed from /v1/chat/completions. Answers render as Markdown (built
// as DOM nodes, never as HTML), thinking (`reasoning_content`) shows apart in a folded block, Stop
// aborts the request (the server cancels the generation when the connection closes), and the speed
// line reports tokens per second.
import { postStream } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { samplingParams } from "./settings_store.js";

const SYSTEM_KEY = "sluice.system_prompt";

export class Chat {
  constructor(getModel) {
    this.getModel = getModel;
    this.history = [];           // {role, content, reasoning?}
    this.controller = null;      // the streaming request's AbortController
    this.$ = (id) => document.getElementById(id);
    this.messages = this.$("messages");
    this.prompt = this.$("prompt");
    this.system = this.$("system-prompt");
    this.system.value = localStorage.getItem(SYSTEM_KEY) || "";
    if (this.system.value) this.$("system-box").open = true;
    this.system.addEventListener("input", () => localStorage.setItem(SYSTEM_KEY, this.system.value));
    this.$("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    this.prompt.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    this.$("stop").addEventListener("click", () => this.stop());
    this.$("regenerate").addEventListener("click", () => this.regenerate());
    this.$("clear-chat").addEventListener("click", () => this.clear());
  }

  get busy() { return this.controller !== null; }

  send() {
    const text = this.prompt.value.trim();
    if (!text || this.busy) return;
    this.prompt.value = "";
    this.history.push({ role: "user", content: text });
    this.addBubble("user").textContent = text;
    this.generate();
  }

  stop() {
    if (this.controller) this.controller.abort();
  }

  regenerate() {
    if (this.busy) return;
    while (this.history.length && this.history[this.history.length - 1].role !== "user") this.history.pop();
    // The answer (or error) bubbles after the last question go.
    for (let last = this.messages.lastElementChild; last && last.classList.contains("msg") && !last.classList.contains("user");
         last = this.messages.lastElementChild) last.remove();
    if (this.history.length) this.generate();
  }

  clear() {
    this.stop();
    this.history = [];
    this.messages.replaceChildren(this.$("chat-empty") || document.createElement("p"));
    this.$("chat-empty").hidden = false;
    this.$("speed").textContent = "";
    this.$("regenerate").disabled = true;
  }

  addBubble(role) {
    const empty = this.$("chat-empty");
    if (empty) empty.hidden = true;
    const bubble = document.createElement("div");
    bubble.className = "msg " + role;
    this.messages.append(bubble);
    this.scrollDown(true);
    return bubble;
  }

  scrollDown(force) {
    const m = this.messages;
    // Follows the answer unless the reader scrolled up to read.
    if (force || m.scrollHeight - m.scrollTop - m.clientHeight < 80) m.scrollTop = m.scrollHeight;
  }

  requestBody() {
    const messages = [];
    const system = this.system.value.trim();
    if (system) messages.push({ role: "system", content: system });
    for (const m of this.history) messages.push({ role: m.role, content: m.content });
    return {
      model: this.getModel(),
      messages,
      stream: true,
      stream_options: { include_usage: true },
      ...samplingParams(),
    };
  }

  setBusy(busy) {
    this.$("send").hidden = busy;
    this.$("stop").hidden = !busy;
    this.$("regenerate").disabled = busy || this.history.length === 0;
  }

  async generate() {
    const bubble = this.addBubble("assistant");
    const answer = { role: "assistant", content: "", reasoning: "" };
    const view = new AnswerView(bubble);
    const speed = new SpeedMeter(this.$("speed"));
    this.controller = new AbortController();
    this.setBusy(true);
    let stopped = false;
    let failure = null;
    let finish = null;
    try {
      await postStream("/v1/chat/completions", this.requestBody(), (event) => {
        const choice = event.choices && event.choices[0];
        if (choice && choice.finish_reason) finish = choice.finish_reason;
        const delta = choice && choice.delta;
        if (delta) {
          if (delta.reasoning_content) answer.reasoning += delta.reasoning_content;
          if (delta.content) answer.content += delta.content;
          if (delta.content || delta.reasoning_content) speed.token();
          view.update(answer);
          this.scrollDown(false);
        }
        if (event.usage) speed.usage(event.usage, event.timings);
      }, { signal: this.controller.signal });
    } catch (e) {
      if (e.name === "AbortError") stopped = true;
      else failure = e;
    }
    this.controller = null;
    speed.finish(stopped);
    view.update(answer, true);
    if (failure) {
      bubble.classList.add("error");
      bubble.replaceChildren(document.createTextNode(failure.message));  // Regenerate asks again
    } else {
      if (stopped) view.note("stopped");
      else if (finish === "length") view.note("cut at the token limit (max tokens in Settings, or the context)");
      this.history.push({ role: "assistant", content: answer.content });
    }
    this.setBusy(false);
    this.prompt.focus();
  }
}

// One assistant bubble: the folded thinking block (when there is thinking) and the rendered answer,
// re-rendered at most once a frame while tokens arrive.
class AnswerView {
  constructor(bubble) {
    this.bubble = bubble;
    this.pending = null;
    this.thinking = null;
    this.body = document.createElement("div");
    this.body.className = "answer";
    bubble.append(this.body);
  }

  update(answer, now = false) {
    this.pending = { content: answer.content, reasoning: answer.reasoning };
    if (now) return this.render();
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  render() {
    this.frame = 0;
    const a = this.pending;
    if (!a) return;
    if (a.reasoning) {
      if (!this.thinking) {
        this.thinking = document.createElement("details");
        this.thinking.className = "thinking";
        this.thinking.open = true;
        const summary = document.createElement("summary");
        summary.textContent = "Thinking";
        this.thinkingBody = document.createElement("div");
        this.thinkingBody.className = "body";
        this.thinking.append(summary, this.thinkingBody);
        this.bubble.insertBefore(this.thinking, this.body);
      }
      this.thinkingBody.textContent = a.reasoning;
      if (a.content && this.thinking.open && !this.folded) {
        this.thinking.open = false;  // the answer began: fold the thinking once
        this.folded = true;
      }
    }
    this.body.replaceChildren(renderMarkdown(a.content));
  }

  note(text) {
    const n = document.createElement("div");
    n.className = "note";
    n.textContent = text;
    this.bubble.append(n);
  }
}

// Tokens per second over the decode and the time to the first token: measured here while tokens arrive,
// then the server's own figures (usage and timings in the last event), which do not depend on how the
// network grouped the events.
class SpeedMeter {
  constructor(out) {
    this.out = out;
    this.start = performance.now();
    this.first = 0;
    this.last = 0;
    this.count = 0;
    this.reported = 0;
    out.textContent = "waiting for the first token…";
  }

  token() {
    const now = performance.now();
    if (!this.first) this.first = now;
    this.last = now;
    this.count++;
    if (now - this.shown > 250 || !this.shown) this.show();
  }

  usage(u, timings) {
    if (u && Number.isFinite(u.completion_tokens)) this.reported = u.completion_tokens;
    if (timings && Number.isFinite(timings.predicted_per_second) && timings.predicted_per_second > 0)
      this.serverRate = timings.predicted_per_second;
  }

  show(done = false, stopped = false) {
    this.shown = performance.now();
    const tokens = this.reported || this.count;
    if (!this.first) {
      this.out.textContent = stopped ? "stopped before the first token" : done ? "no tokens" : "waiting for the first token…";
      return;
    }
    const span = (this.last - this.first) / 1000;
    // Under a quarter second the events' grouping dominates what is measured here.
    const rate = this.serverRate ? this.serverRate.toFixed(1) : tokens > 1 && span > 0.25 ? ((tokens - 1) / span).toFixed(1) : "–";
    const ttft = Math.round(this.first - this.start);
    this.out.textContent = `${tokens} tokens · ${rate} tok/s · first token ${ttft} ms${stopped ? " · stopped" : ""}`;
  }

  finish(stopped) { this.show(true, stopped); }
}
