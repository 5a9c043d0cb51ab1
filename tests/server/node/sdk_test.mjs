// The official OpenAI Node.js SDK against a running `sluice serve`: chat and completions, plain and
// streamed, and the Responses API. Usage: SLUICE_BASE_URL=http://127.0.0.1:PORT/v1 node sdk_test.mjs
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.SLUICE_BASE_URL;
if (!baseURL) {
  console.error("SLUICE_BASE_URL is not set");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: process.env.SLUICE_API_KEY ?? "unused", timeout: 60_000, maxRetries: 0 });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test("models.list", async () => {
  const page = await client.models.list();
  assert.equal(page.data[0].id, "tiny-code-qwen2");
});

test("models.retrieve", async () => {
  const model = await client.models.retrieve("tiny-code-qwen2");
  assert.equal(model.id, "tiny-code-qwen2");
  assert.equal(model.object, "model");
  await assert.rejects(client.models.retrieve("no-such-model"), (e) => e instanceof OpenAI.NotFoundError);
});

test("chat.completions.create replays an agent history", async () => {
  const r = await client.chat.completions.create({
    model: "tiny-code-qwen2",
    messages: [
      { role: "user", content: "What is the weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "18 degrees, sunny" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(typeof r.choices[0].message.content, "string");
});

test("chat.completions.create", async () => {
  const r = await client.chat.completions.create({
    model: "tiny-code-qwen2",
    messages: [{ role: "system", content: "You write Python." }, { role: "user", content: "def fib(n):" }],
    max_tokens: 16,
    temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("chat.completions.create stream with usage", async () => {
  const stream = await client.chat.completions.create({
    model: "tiny-code-qwen2",
    messages: [{ role: "user", content: "import os" }],
    max_tokens: 16,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", role = null, finish = null, usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    role ??= choice.delta.role ?? null;
    text += choice.delta.content ?? "";
    finish = choice.finish_reason ?? finish;
  }
  assert.equal(role, "assistant");
  assert.equal(ids.size, 1);
  assert.ok(["stop", "length"].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
  // The same request unstreamed gives the same text (greedy).
  const plain = await client.chat.completions.create({
    model: "tiny-code-qwen2", messages: [{ role: "user", content: "import os" }], max_tokens: 16, temperature: 0,
  });
  assert.equal(text, plain.choices[0].message.content);
});

test("completions.create", async () => {
  const r = await client.completions.create({ model: "tiny-code-qwen2", prompt: "def add(a, b):", max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.usage.prompt_tokens > 0);
});

test("completions.create stream", async () => {
  const stream = await client.completions.create({
    model: "tiny-code-qwen2", prompt: "class Stack:", max_tokens: 12, temperature: 0, stream: true,
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  const plain = await client.completions.create({ model: "tiny-code-qwen2", prompt: "class Stack:", max_tokens: 12, temperature: 0 });
  assert.equal(text, plain.choices[0].text);
  assert.ok(["stop", "length"].includes(finish));
});

test("errors surface as APIError with status", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }], n: 17 }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "n",
  );
});

test("chat.completions.create with n: 2, plain and through the stream helper", async () => {
  const request = {
    model: "tiny-code-qwen2", messages: [{ role: "user", content: "Name a fruit." }], max_tokens: 12, temperature: 1.2, seed: 11, n: 2,
  };
  const r = await client.chat.completions.create(request);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) assert.ok(["stop", "length"].includes(c.finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  // The SDK's helper reassembles the streamed choices by their index: the same two answers.
  const final = await client.chat.completions.stream(request).finalChatCompletion();
  assert.deepEqual(final.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
});

test("completions.create with logit_bias forcing a token", async () => {
  const tokenize = await fetch(baseURL.replace(/\/v1\/?$/, "") + "/tokenize", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: "print" }),
  });
  const { tokens } = await tokenize.json();
  assert.equal(tokens.length, 1);
  const r = await client.completions.create({
    model: "tiny-code-qwen2", prompt: "def add(a, b):", max_tokens: 4, temperature: 0, logit_bias: { [String(tokens[0])]: 100 },
  });
  assert.equal(r.choices[0].text, "print".repeat(4));
  await assert.rejects(
    client.completions.create({ model: "m", prompt: "x", logit_bias: { "5": 500 } }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "logit_bias",
  );
});

// Tools: the tiny model answers in text (its template has no call syntax), so these check that the
// SDK's requests with tools are accepted and that its stream helper reassembles the answer.
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

test("chat.completions with tools (auto): answered, and the stream helper reassembles the same message", async () => {
  const body = {
    model: "tiny-code-qwen2",
    messages: [{ role: "user", content: "def weather(city):" }],
    tools: [weatherTool],
    tool_choice: "auto",
    max_tokens: 16,
    temperature: 0,
  };
  const r = await client.chat.completions.create(body);
  assert.equal(typeof r.choices[0].message.content, "string");
  const helper = client.chat.completions.stream ?? client.beta.chat.completions.stream;
  const runner = helper.call(client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions, body);
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, r.choices[0].message.content);
  assert.deepEqual(final.choices[0].message.tool_calls ?? [], r.choices[0].message.tool_calls ?? []);
  assert.equal(final.choices[0].finish_reason, r.choices[0].finish_reason);
});

test("tool_choice required: tool_calls whose arguments parse, and the stream helper reassembles them", async () => {
  const body = {
    model: "tiny-code-qwen2",
    messages: [{ role: "user", content: "def weather(city):" }],
    tools: [weatherTool],
    tool_choice: "required",
    max_tokens: 120,
    temperature: 0,
  };
  const r = await client.chat.completions.create(body);
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls && calls.length >= 1, JSON.stringify(r));
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  for (const call of calls) {
    assert.equal(call.function.name, "get_weather");
    assert.equal(typeof JSON.parse(call.function.arguments).city, "string");
  }
  const helper = client.chat.completions.stream ?? client.beta.chat.completions.stream;
  const runner = helper.call(client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions, body);
  const final = await runner.finalChatCompletion();
  assert.deepEqual(
    final.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
    calls.map((c) => [c.function.name, c.function.arguments]),
  );
  assert.equal(final.choices[0].finish_reason, "tool_calls");
});

test("tool_choice naming a function forces that function", async () => {
  const other = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
  const r = await client.chat.completions.create({
    model: "tiny-code-qwen2", messages: [{ role: "user", content: "x" }], tools: [other, weatherTool],
    tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 120, temperature: 0,
  });
  assert.equal(r.choices[0].message.tool_calls[0].function.name, "get_weather");
});

test("response_format via zodResponseFormat: chat.completions.parse returns the parsed object", async () => {
  const { z } = await import("zod");
  const { zodResponseFormat } = await import("openai/helpers/zod");
  const Event = z.object({
    name: z.string().max(30),
    date: z.string(),
    participants: z.array(z.string().max(20)).max(3),
    priority: z.enum(["low", "high"]),
  });
  const parse = client.chat.completions.parse ?? client.beta.chat.completions.parse;
  const r = await parse.call(client.chat.completions.parse ? client.chat.completions : client.beta.chat.completions, {
    model: "tiny-code-qwen2",
    messages: [{ role: "user", content: "Alice and Bob meet on Friday" }],
    response_format: zodResponseFormat(Event, "event"),
    max_tokens: 150,
    temperature: 0,
  });
  const parsed = r.choices[0].message.parsed;
  assert.ok(parsed, JSON.stringify(r));
  assert.deepEqual(Event.parse(parsed), parsed);
});

// The Responses API (POST /v1/responses), served as a translation of chat completions.
test("responses.create: output_text, usage, and the same text as chat.completions", async () => {
  const r = await client.responses.create({
    model: "tiny-code-qwen2", instructions: "You write Python.", input: "def fib(n):", max_output_tokens: 16, temperature: 0,
  });
  assert.equal(r.object, "response");
  assert.ok(["completed", "incomplete"].includes(r.status));
  assert.equal(typeof r.output_text, "string");  // the SDK's helper over the message items
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  const chat = await client.chat.completions.create({
    model: "tiny-code-qwen2", messages: [{ role: "system", content: "You write Python." }, { role: "user", content: "def fib(n):" }],
    max_tokens: 16, temperature: 0,
  });
  assert.equal(r.output_text, chat.choices[0].message.content);
});

test("responses.create stream: raw events and the stream helper's final response agree", async () => {
  const body = { model: "tiny-code-qwen2", input: "import os", max_output_tokens: 16, temperature: 0 };
  const stream = await client.responses.create({ ...body, stream: true });
  let text = "", last = null;
  const types = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    last = event;
  }
  assert.equal(types[0], "response.created");
  assert.ok(["response.completed", "response.incomplete"].includes(last.type));
  const helper = client.responses.stream(body);
  const final = await helper.finalResponse();
  assert.equal(final.output_text, text);
  const plain = await client.responses.create(body);
  assert.equal(plain.output_text, text);
});

const forecastTool = {
  type: "function",
  name: "get_weather",
  description: "Current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

test("responses.create with a function tool and tool_choice required: function_call items, streamed alike", async () => {
  const body = { model: "tiny-code-qwen2", input: "def weather(city):", tools: [forecastTool], tool_choice: "required",
    max_output_tokens: 120, temperature: 0 };
  const r = await client.responses.create(body);
  const calls = r.output.filter((item) => item.type === "function_call");
  assert.ok(calls.length >= 1, JSON.stringify(r));
  for (const call of calls) {
    assert.equal(call.name, "get_weather");
    assert.equal(typeof JSON.parse(call.arguments).city, "string");
  }
  const final = await client.responses.stream(body).finalResponse();
  assert.deepEqual(
    final.output.filter((item) => item.type === "function_call").map((c) => [c.name, c.arguments]),
    calls.map((c) => [c.name, c.arguments]),
  );
  // The calls and their outputs go back as input items for the next turn.
  const next = await client.responses.create({
    model: "tiny-code-qwen2", tools: [forecastTool], max_output_tokens: 8, temperature: 0,
    input: [{ role: "user", content: "def weather(city):" }, ...calls,
      ...calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: "sunny" }))],
  });
  assert.equal(typeof next.output_text, "string");
});

test("responses.parse with zodTextFormat returns output_parsed", async () => {
  const { z } = await import("zod");
  const { zodTextFormat } = await import("openai/helpers/zod");
  const Task = z.object({ title: z.string().max(30), done: z.boolean(), tags: z.array(z.string().max(12)).max(3) });
  const r = await client.responses.parse({
    model: "tiny-code-qwen2", input: "Write the task list", text: { format: zodTextFormat(Task, "task") },
    max_output_tokens: 120, temperature: 0,
  });
  assert.ok(r.output_parsed, JSON.stringify(r));
  assert.deepEqual(Task.parse(r.output_parsed), r.output_parsed);
});

test("responses: previous_response_id continues, retrieve and delete a stored response", async () => {
  const first = await client.responses.create({ model: "tiny-code-qwen2", input: "def fib(n):", max_output_tokens: 8, temperature: 0 });
  const second = await client.responses.create({
    model: "tiny-code-qwen2", previous_response_id: first.id, input: "Add a docstring.", max_output_tokens: 8, temperature: 0,
  });
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
  const got = await client.responses.retrieve(first.id);
  assert.equal(got.output_text, first.output_text);
  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.responses.create({ model: "m", input: "x", previous_response_id: "resp_unknown" }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === "previous_response_id",
  );
});

let failed = 0;
for (const { name, fn } of tests) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}
console.log(`${tests.length - failed}/${tests.length} passed`);
process.exit(failed ? 1 : 0);
