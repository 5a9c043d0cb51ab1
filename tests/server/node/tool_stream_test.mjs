// The OpenAI Node SDK reassembles Sluice's streamed tool calls: reads the JSON-line chunks a real
// GenerationJob streamed (tool_stream_fixture, on stdin) with the SDK's ChatCompletionStream and checks
// the final message. Usage: tool_stream_fixture | node tool_stream_test.mjs
import assert from "node:assert/strict";
import { ChatCompletionStream } from "openai/lib/ChatCompletionStream";

const input = new ReadableStream({
  async start(controller) {
    for await (const chunk of process.stdin) controller.enqueue(chunk);
    controller.close();
  },
});
const stream = ChatCompletionStream.fromReadableStream(input);
const deltas = [];
stream.on("tool_calls.function.arguments.delta", (e) => deltas.push(e.arguments_delta));
const final = await stream.finalChatCompletion();
const message = final.choices[0].message;
assert.equal(final.choices[0].finish_reason, "tool_calls");
assert.equal(message.content, "Checking both.\n");
assert.equal(message.tool_calls.length, 2);
assert.deepEqual(message.tool_calls.map((c) => c.function.name), ["get_weather", "get_time"]);
assert.deepEqual(JSON.parse(message.tool_calls[0].function.arguments), { city: "Paris" });
assert.deepEqual(JSON.parse(message.tool_calls[1].function.arguments), { tz: "Europe/Paris" });
assert.ok(message.tool_calls.every((c) => c.type === "function" && /^call_[A-Za-z0-9]{24}$/.test(c.id)));
assert.notEqual(message.tool_calls[0].id, message.tool_calls[1].id);
assert.ok(deltas.length > 2, "arguments arrived in pieces");
console.log("ok   the SDK reassembled 2 streamed tool calls");
