// The OpenAI Node SDK accumulates Sluice's Responses API stream: reads the events a real GenerationJob's
// stream became (responses_stream_fixture, JSON lines on stdin) with the SDK's ResponseStream — which
// checks item ids, indices and the event order as it goes — and checks the response it builds.
// Usage: responses_stream_fixture | node responses_stream_test.mjs
import assert from "node:assert/strict";
import { ResponseStream } from "openai/lib/responses/ResponseStream";

const input = new ReadableStream({
  async start(controller) {
    for await (const chunk of process.stdin) controller.enqueue(chunk);
    controller.close();
  },
});
const stream = ResponseStream.fromReadableStream(input);
const argumentDeltas = [];
stream.on("response.function_call_arguments.delta", (e) => argumentDeltas.push(e.delta));
const final = await stream.finalResponse();
assert.equal(final.status, "completed");
assert.deepEqual(final.output.map((item) => item.type), ["reasoning", "message", "function_call", "function_call"]);
assert.equal(final.output[0].content[0].text, "Two lookups.\n");
assert.equal(final.output_text, "Checking both.\n");
const calls = final.output.slice(2);
assert.deepEqual(calls.map((c) => c.name), ["get_weather", "get_time"]);
assert.deepEqual(JSON.parse(calls[0].arguments), { city: "Paris" });
assert.deepEqual(JSON.parse(calls[1].arguments), { tz: "Europe/Paris" });
assert.ok(calls.every((c) => /^call_[A-Za-z0-9]{24}$/.test(c.call_id) && c.id.startsWith("fc_")));
assert.notEqual(calls[0].call_id, calls[1].call_id);
assert.ok(argumentDeltas.length > 2, "arguments arrived in pieces");
assert.equal(final.usage.input_tokens, 20);
console.log("ok   the SDK accumulated a streamed response: reasoning, text and 2 function calls");
