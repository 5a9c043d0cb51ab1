// The web chat app in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core) against a
// running `sluice serve --api-key` and the test hub. run_browser_test.py starts both and passes:
//   SLUICE_URL          the server's origin
//   SLUICE_API_KEY      its key (the app must ask for it)
//   CHROMIUM            the browser binary
//   SCREENSHOT_DIR      where each tab's screenshots go (desktop 1280x800, phone 390x844)
//   SLUICE_THINKING_URL a second server whose prompt opens <think>: its answers stream as reasoning_content
// Each step prints `ok - ...`; the first failure throws (exit 1) with what was seen.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const url = process.env.SLUICE_URL;
const thinkingUrl = process.env.SLUICE_THINKING_URL;
const key = process.env.SLUICE_API_KEY;
const shots = process.env.SCREENSHOT_DIR;
assert.ok(url && thinkingUrl && key && process.env.CHROMIUM && shots, "SLUICE_URL, SLUICE_API_KEY, CHROMIUM and SCREENSHOT_DIR are required");

const DESKTOP = { width: 1280, height: 800 };
// Only the size: changing isMobile would make puppeteer reload the page (and lose the conversation).
const PHONE = { width: 390, height: 844 };
const T = 60000;  // a step's wait: an upper bound (a loaded 2-core CI runner once took over 20 s for one step)

let step = "starting Chromium";
const ok = (what) => {
  console.log("ok - " + what);
  step = "after: " + what;
};
// A hung browser call should fail the test with where it stood, before ctest's timeout kills it silently.
setTimeout(() => {
  console.error(`not ok - timed out (120 s); last step: ${step}`);
  process.exit(1);
}, 120000).unref();

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  protocolTimeout: 60000,  // one DevTools call; the default (180 s) outlasts the test's own limit
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"],
});
let failed = false;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(T);
  await page.setViewport(DESKTOP);
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  const chatRequests = [];
  page.on("request", (r) => {
    if (r.url().endsWith("/v1/chat/completions") && r.method() === "POST") chatRequests.push(r);
  });

  // --- The key: the page loads without it, its API calls ask for it. -------------------------------
  await page.goto(url + "/", { waitUntil: "domcontentloaded" });
  await page.waitForSelector("#banner:not([hidden])", { timeout: T });
  const bannerText = await page.$eval("#banner", (b) => b.textContent);
  assert.match(bannerText, /API key/);
  await page.click("#banner button");
  await page.waitForSelector("#panel-settings:not([hidden])");
  await page.type('#settings-form input[name="api_key"]', key);
  await page.click('#settings-form button[type="submit"]');
  await page.waitForSelector("body[data-ready=true]", { timeout: T });
  assert.match(await page.$eval("#served-model", (e) => e.textContent), /tiny-code-qwen2/);
  assert.equal(await page.$eval("#banner", (b) => b.hidden), true);
  ok("the app asks for the API key and works once it is saved");

  // The server's defaults and what it runs with, in Settings.
  const serverSettings = await page.$eval("#server-settings", (e) => e.textContent);
  assert.match(serverSettings, /KV codec\s*f16/);
  assert.match(serverSettings, /Expert store\s*resident/);
  assert.equal(await page.$eval('input[name="temperature"]', (e) => e.placeholder), "0.6");
  ok("settings show the server's KV codec, expert store and sampling defaults");

  // --- Markdown from the model is rendered as DOM nodes, never parsed as HTML. ---------------------
  const rendered = await page.evaluate(async () => {
    const { renderMarkdown } = await import("/app/markdown.js");
    const box = document.createElement("div");
    box.append(renderMarkdown([
      "# Title", "Some **bold**, *italic* and `x < y` text <img src=x onerror=alert(1)>.",
      "```python", "def f():\n    return '<script>alert(1)</script>'", "```",
      "- one", "- [safe](https://example.com) and [bad](javascript:alert(1))", "", "> quoted", "```js", "let open = 1;",
    ].join("\n")));
    return {
      tags: [...box.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()),
      code: box.querySelector("pre code.language-python")?.textContent,
      inline: box.querySelector("p code")?.textContent,
      links: [...box.querySelectorAll("a")].map((a) => a.getAttribute("href")),
      text: box.textContent,
      unclosed: box.querySelectorAll("pre")[1]?.textContent,
    };
  });
  assert.ok(!rendered.tags.includes("img") && !rendered.tags.includes("script"), "HTML in model text must stay text: " + rendered.tags);
  for (const tag of ["h3", "strong", "em", "pre", "ul", "li", "blockquote"]) assert.ok(rendered.tags.includes(tag), tag);
  assert.equal(rendered.code, "def f():\n    return '<script>alert(1)</script>'");
  assert.equal(rendered.inline, "x < y");
  assert.deepEqual(rendered.links, ["https://example.com"]);  // javascript: is shown as text, not linked
  assert.match(rendered.text, /<img src=x onerror=alert\(1\)>/);
  assert.match(rendered.unclosed, /let open = 1;/);  // a fence still streaming renders as code
  ok("markdown renders headings, emphasis, lists, quotes, code and web links; HTML stays text");

  // --- Chat: a streamed answer. --------------------------------------------------------------------
  await page.click("#tab-chat");
  await page.click("#system-box summary");
  await page.type("#system-prompt", "You write Python.");
  // Counts the distinct lengths the answer passes through while it streams.
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const a = document.querySelector(".msg.assistant .answer");
      if (a) window.__lengths.add(a.textContent.length);
    }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  });
  const settingsBefore = chatRequests.length;
  await page.type("#prompt", "def add(a, b):");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector(".msg.assistant .answer")?.textContent.length > 0, { timeout: T });
  await page.waitForSelector("#send:not([hidden])", { timeout: 60000 });  // the stream ended
  const lengths = await page.evaluate(() => window.__lengths.size);
  assert.ok(lengths >= 3, `the answer should grow as tokens arrive; it took ${lengths} distinct lengths`);
  const first = JSON.parse(chatRequests[settingsBefore].postData());
  assert.equal(first.stream, true);
  assert.equal(first.model, "tiny-code-qwen2");
  assert.deepEqual(first.messages, [{ role: "system", content: "You write Python." }, { role: "user", content: "def add(a, b):" }]);
  assert.match(await page.$eval("#speed", (e) => e.textContent), /^\d+ tokens · [\d.]+ tok\/s · first token \d+ ms$/);
  assert.equal(await page.$$eval(".msg.user", (m) => m.length), 1);
  ok(`a message streams its answer (${lengths} updates) with the token speed shown`);

  // --- Stop mid-stream: the request is aborted and the server cancels the generation. --------------
  const metric = async (name) => {
    const text = await (await fetch(url + "/metrics")).text();
    const line = text.split("\n").find((l) => l.startsWith(name + " "));
    return line ? Number(line.split(" ")[1]) : NaN;
  };
  const cancelsBefore = await metric("sluice_disconnect_cancels_total");
  await page.type("#prompt", "class Stack:");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant .answer")[1]?.textContent.length > 20, { timeout: T });
  assert.equal(await page.$eval("#stop", (b) => b.hidden), false);
  await page.click("#stop");
  await page.waitForSelector("#send:not([hidden])", { timeout: T });
  const stoppedAt = await page.$$eval(".msg.assistant .answer", (a) => a[1].textContent.length);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await page.$$eval(".msg.assistant .answer", (a) => a[1].textContent.length), stoppedAt, "text kept coming after Stop");
  assert.equal(await page.$$eval(".msg.assistant", (m) => m[1].querySelector(".note")?.textContent), "stopped");
  assert.match(await page.$eval("#speed", (e) => e.textContent), /stopped$/);
  let cancels = cancelsBefore;
  for (let i = 0; i < 50 && cancels === cancelsBefore; i++) {
    await new Promise((r) => setTimeout(r, 100));
    cancels = await metric("sluice_disconnect_cancels_total");
  }
  assert.equal(cancels, cancelsBefore + 1, "the server should count the stopped generation as cancelled");
  ok(`Stop ends the stream at ${stoppedAt} characters and the server cancels the generation`);

  // --- A sampling setting changed in Settings goes with the next request. ---------------------------
  await page.click("#tab-settings");
  for (const [name, value] of [["temperature", "0.25"], ["top_k", "7"], ["max_tokens", "24"], ["seed", "42"]]) {
    await page.$eval(`input[name="${name}"]`, (e) => (e.value = ""));
    await page.type(`input[name="${name}"]`, value);
  }
  await page.click('#settings-form button[type="submit"]');
  await page.click("#tab-chat");
  const beforeRegenerate = chatRequests.length;
  await page.click("#regenerate");
  await page.waitForSelector("#send:not([hidden])", { timeout: T });
  await page.waitForFunction(() => /tok\/s/.test(document.getElementById("speed").textContent), { timeout: T });
  const regenerated = JSON.parse(chatRequests[beforeRegenerate].postData());
  assert.equal(regenerated.temperature, 0.25);
  assert.equal(regenerated.top_k, 7);
  assert.equal(regenerated.max_tokens, 24);
  assert.equal(regenerated.seed, 42);
  assert.equal(regenerated.top_p, undefined, "fields left empty are the server's to choose");
  assert.equal(regenerated.messages.at(-1).content, "class Stack:");  // Regenerate asks the last question again
  assert.equal(regenerated.messages.filter((m) => m.role === "assistant").length, 1);  // without the stopped answer
  assert.match(await page.$eval("#speed", (e) => e.textContent), /^24 tokens/);
  assert.equal(await page.$$eval(".msg.assistant", (m) => m.length), 2);
  assert.match(await page.$$eval(".msg.assistant", (m) => m[1].querySelector(".note")?.textContent ?? ""), /^cut at the token limit/);
  ok("sampling settings (temperature, top_k, max_tokens, seed) travel with the request; Regenerate replaces the answer");
  await page.screenshot({ path: path.join(shots, "chat-desktop.png") });

  // --- Models: the served model's plan; search the hub, download, watch the progress. -------------
  await page.click("#tab-models");
  await page.waitForFunction(() => /does not fit|fits/.test(document.getElementById("memory-plan").textContent), { timeout: T });
  assert.match(await page.$eval("#memory-plan", (e) => e.textContent), /f16 \(configured\)/);
  await page.waitForFunction(() => /No models in the cache/.test(document.getElementById("cached-models").textContent), { timeout: T });
  await page.type("#hub-query", "tiny");
  await page.click("#hub-search button");
  await page.waitForSelector('#hub-results li[data-model="sluice-test/tiny-code-qwen2"] button', { timeout: T });
  // Samples the progress bar as the page shows it.
  await page.evaluate(() => {
    window.__progress = [];
    window.__sampler = setInterval(() => {
      const li = document.querySelector("#downloads li[data-job]");
      if (li) window.__progress.push([li.dataset.phase, Number(li.querySelector(".progress").getAttribute("aria-valuenow"))]);
    }, 30);
  });
  await page.click('#hub-results li[data-model="sluice-test/tiny-code-qwen2"] button');
  await page.waitForSelector('#downloads li[data-phase="done"]', { timeout: 45000 });
  const progress = await page.evaluate(() => (clearInterval(window.__sampler), window.__progress));
  const middle = progress.filter(([phase, v]) => phase === "downloading" && v > 0 && v < 100);
  assert.ok(middle.length >= 2, "progress should be seen between 0 and 100 %: " + JSON.stringify(progress.slice(0, 40)));
  const values = progress.map(([, v]) => v);
  assert.deepEqual(values, [...values].sort((a, b) => a - b), "progress never goes back");
  assert.equal(await page.$eval('#downloads li[data-phase="done"] .progress', (e) => e.getAttribute("aria-valuenow")), "100");
  await page.waitForSelector('#cached-models li[data-model="sluice-test/tiny-code-qwen2"] .badge.fits', { timeout: T });
  ok(`a download started from the Models tab shows its progress (${middle.length} steps seen) to completion, then the cache lists it as fitting`);
  await new Promise((r) => setTimeout(r, 300));  // the bar's width transition ends
  await page.screenshot({ path: path.join(shots, "models-desktop.png"), fullPage: true });

  await page.click("#tab-settings");
  await page.screenshot({ path: path.join(shots, "settings-desktop.png"), fullPage: true });

  // --- Thinking (reasoning_content deltas) shows apart from the answer. -----------------------------
  const thinking = await browser.newPage();
  await thinking.setViewport(DESKTOP);
  thinking.on("pageerror", (e) => pageErrors.push(String(e)));
  await thinking.goto(thinkingUrl + "/", { waitUntil: "domcontentloaded" });
  await thinking.waitForSelector("body[data-ready=true]", { timeout: T });
  await thinking.type("#prompt", "def add(a, b):");
  await thinking.keyboard.press("Enter");
  await thinking.waitForSelector(".msg.assistant details.thinking", { timeout: T });
  await thinking.waitForSelector("#send:not([hidden])", { timeout: T });
  const shown = await thinking.$eval(".msg.assistant", (m) => ({
    summary: m.querySelector("details.thinking summary").textContent,
    reasoning: m.querySelector("details.thinking .body").textContent,
    answer: m.querySelector(".answer").textContent,
    order: [...m.children].map((c) => c.className),
  }));
  assert.equal(shown.summary, "Thinking");
  assert.ok(shown.reasoning.length > 10, "the reasoning should be shown: " + JSON.stringify(shown));
  assert.equal(shown.answer, "");  // the model never closed </think>: nothing of it is the answer
  assert.deepEqual(shown.order, ["thinking", "answer", "note"]);  // the note: --max-tokens 40 cut it
  await thinking.screenshot({ path: path.join(shots, "thinking-desktop.png") });
  ok("reasoning_content streams into a Thinking block apart from the answer");

  // --- Over --cors: this page (another origin) pointed at the first server, key and all. ------------
  await thinking.click("#tab-settings");
  await thinking.type('input[name="server_url"]', url);
  await thinking.type('input[name="api_key"]', key);
  await thinking.type('input[name="max_tokens"]', "8");
  await thinking.click('#settings-form button[type="submit"]');
  await thinking.waitForFunction(() => /^tiny-code-qwen2 /.test(document.getElementById("served-model").textContent), { timeout: T });
  await thinking.click("#tab-chat");
  await thinking.click("#clear-chat");
  await thinking.type("#prompt", "import os");
  await thinking.keyboard.press("Enter");
  await thinking.waitForSelector("#send:not([hidden])", { timeout: T });
  await thinking.waitForFunction(() => /^8 tokens/.test(document.getElementById("speed").textContent), { timeout: T });
  assert.equal(await thinking.$eval(".msg.assistant", (m) => m.classList.contains("error")), false);
  assert.ok((await thinking.$eval(".msg.assistant .answer", (a) => a.textContent)).length > 0);
  await thinking.close();
  ok("the app from another origin talks to a server started with --cors, sending the key");

  // --- A phone-sized screen: nothing wider than the screen, every tab reachable. -------------------
  await page.setViewport(PHONE);
  for (const tab of ["chat", "models", "settings"]) {
    await page.click("#tab-" + tab);
    if (tab === "chat") await page.$eval("#messages", (m) => (m.scrollTop = m.scrollHeight));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `${tab}: the page is ${overflow}px wider than a phone's screen`);
    await page.screenshot({ path: path.join(shots, `${tab}-phone.png`), fullPage: tab !== "chat" });
  }
  const composer = await page.$eval("#composer", (e) => e.getBoundingClientRect().bottom);
  assert.ok(composer <= PHONE.height, "the message box should be on screen on a phone");
  ok("on a 390px-wide screen every tab fits the width and the composer stays on screen");

  assert.deepEqual(pageErrors, [], "the page threw");
  for (const f of fs.readdirSync(shots)) assert.ok(fs.statSync(path.join(shots, f)).size > 5000, f);
  ok("screenshots written to " + shots);
} catch (e) {
  failed = true;
  console.error("not ok - " + (e.stack || e));
  try {
    const [page] = await browser.pages();
    if (page) await page.screenshot({ path: path.join(shots, "failure.png") });
  } catch { /* the browser is gone */ }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
