// Prints, as JSON lines, the chunks a real GenerationJob streams for a Qwen/Hermes answer that text-
// prefixes two tool calls — for tests/server/node/tool_stream_test.mjs, which hands them to the OpenAI
// Node SDK's own stream reassembly (ChatCompletionStream) and checks the message it builds.
#include <cstdio>

#include "scripted_job.h"

using namespace sluice;
using namespace sluice::server;

int main() {
  const std::vector<std::string> tokens = {
      "Checking", " both", ".\n", "<tool_call>", "\n{\"", "name", "\": \"", "get", "_weather", "\", \"", "arguments",
      "\": {\"", "city", "\": \"", "Par", "is", "\"}}\n", "</tool_call>", "\n", "<tool_call>",
      "\n{\"name\": \"get_time\", ", "\"arguments\": {\"tz\": \"Europe/", "Paris\"}}", "\n", "</tool_call>",
      "<|im_end|>"};
  JobSpec spec;
  spec.identity = make_identity(true, "tiny-code-qwen2");
  spec.stream = true;
  spec.tool_format = toolcall::Format::kHermes;
  auto channel = scripted::run_scripted(std::move(spec), tokens, {"<|im_end|>"});
  for (const auto& event : channel->events) {
    // "data: {json}\n\n" → "{json}\n" (the SDK's readable-stream form); [DONE] ends it.
    std::string data = event.substr(6, event.size() - 8);
    if (data == "[DONE]") break;
    std::printf("%s\n", data.c_str());
  }
  return channel->ended ? 0 : 1;
}
