// Prints, as JSON lines, the Responses API events a real GenerationJob's stream becomes for a <think>
// model answering with reasoning, text and two Hermes tool calls — for
// tests/server/node/responses_stream_test.mjs, which hands them to the OpenAI Node SDK's own stream
// accumulator (ResponseStream) and checks the response it builds.
#include <cstdio>
#include <set>

#include "scripted_job.h"
#include "server/responses_output.h"
#include "server/translating_channel.h"

using namespace sluice;
using namespace sluice::server;

int main() {
  const std::vector<std::string> tokens = {
      "<think>", "\nTwo", " lookups", ".\n", "</think>", "\n\n", "Checking", " both", ".\n", "<tool_call>", "\n{\"",
      "name", "\": \"", "get", "_weather", "\", \"", "arguments", "\": {\"", "city", "\": \"", "Par", "is", "\"}}\n",
      "</tool_call>", "\n", "<tool_call>", "\n{\"name\": \"get_time\", ", "\"arguments\": {\"tz\": \"Europe/",
      "Paris\"}}", "\n", "</tool_call>", "<|im_end|>"};
  JobSpec spec;
  spec.identity = make_identity(true, "tiny-code-qwen2");
  spec.stream = true;
  spec.include_usage = true;
  spec.split_reasoning = true;
  spec.tool_format = toolcall::Format::kHermes;
  auto client = std::make_shared<scripted::CapturingChannel>();
  auto channel = std::make_shared<TranslatingChannel>(
      client, std::make_unique<ResponsesTranslator>("tiny-code-qwen2", rapidjson::Document(rapidjson::kObjectType)));
  auto job = std::make_shared<GenerationJob>(
      std::move(spec), std::make_unique<scripted::ScriptedText>(tokens, std::set<std::string>{"<|im_end|>"}), channel,
      nullptr);
  GenerationRequest request;
  job->attach(request);
  GenerationResult result;
  result.finish = FinishReason::kStop;
  result.stats.prompt_tokens = 20;
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    ++result.stats.completion_tokens;
    if (!request.on_token(TokenEvent{i, -0.1f, {}})) break;
  }
  request.on_done(result);
  // "event: NAME\ndata: {json}\n\n" (several per send) → "{json}\n", the SDK's readable-stream form.
  for (const auto& sent : client->events) {
    for (std::size_t at = sent.find("data: "); at != std::string::npos; at = sent.find("data: ", at)) {
      const std::size_t end = sent.find('\n', at);
      std::printf("%s\n", sent.substr(at + 6, end - at - 6).c_str());
      at = end;
    }
  }
  return client->ended ? 0 : 1;
}
