// What the Responses and Messages APIs cost over chat completions per generated token: a real
// GenerationJob (stop matching, tool-call parsing, the reasoning split, chunk JSON) fed scripted
// token texts, answering into a channel that drops what it is sent — directly (the chat baseline),
// and through a TranslatingChannel with each API's translator (the chunk read back, the API's events
// written). Streamed and whole answers, plain text and text with tool calls (Hermes).
//
// Usage: bench_api_translation [--tokens 4096] [--runs 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "server/anthropic_output.h"
#include "server/generation_job.h"
#include "server/responses_output.h"
#include "server/translating_channel.h"

using namespace sluice;
using namespace sluice::server;
using Clock = std::chrono::steady_clock;

namespace {

class DroppingChannel final : public ResponseChannel {
 public:
  void respond(int, std::string body) override { bytes += body.size(); }
  bool send_event(std::string event) override {
    bytes += event.size();
    return true;
  }
  void end_stream() override {}
  std::shared_ptr<std::atomic<bool>> cancelled() const override { return flag_; }
  void set_header(std::string, std::string) override {}
  std::size_t bytes = 0;

 private:
  std::shared_ptr<std::atomic<bool>> flag_ = std::make_shared<std::atomic<bool>>(false);
};

class ScriptText final : public TokenText {
 public:
  explicit ScriptText(const std::vector<std::string>& pieces) : pieces_(pieces) {}
  std::string push(int32_t id) override { return pieces_[static_cast<std::size_t>(id)]; }
  std::string flush() override { return ""; }
  std::string piece(int32_t id) override { return pieces_[static_cast<std::size_t>(id)]; }
  bool is_control(int32_t) override { return false; }

 private:
  const std::vector<std::string>& pieces_;
};

// Code-like text of ~4 bytes a token; with calls, every 64th token starts a Hermes call of 24 tokens.
std::vector<std::string> script(int tokens, bool calls) {
  static const char* kWords[] = {" def", " x", "(", "self", ")", ":", "\n   ", " return", " 1", " +", " y", "_id"};
  std::vector<std::string> out;
  for (int i = 0; i < tokens; ++i) {
    if (calls && i % 64 == 40 && i + 24 < tokens) {
      out.push_back("<tool_call>");
      out.push_back("{\"name\": \"get_weather\", ");
      out.push_back("\"arguments\": {");
      for (int k = 0; k < 19; ++k) out.push_back(k == 0 ? "\"city\": \"P" : "a");
      out.push_back("ris\"}}");
      out.push_back("</tool_call>");
      i += 23;
      continue;
    }
    out.push_back(kWords[i % 12]);
  }
  return out;
}

using Wrap = std::function<std::shared_ptr<ResponseChannel>(std::shared_ptr<ResponseChannel>)>;

double run_once(const std::vector<std::string>& pieces, bool stream, bool calls, const Wrap& wrap, std::size_t& bytes) {
  auto sink = std::make_shared<DroppingChannel>();
  JobSpec spec;
  spec.identity = make_identity(true, "bench");
  spec.stream = stream;
  spec.include_usage = stream;
  if (calls) spec.tool_format = toolcall::Format::kHermes;
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::make_unique<ScriptText>(pieces), wrap(sink), nullptr);
  GenerationRequest request;
  job->attach(request);
  GenerationResult result;
  result.finish = FinishReason::kStop;
  const auto start = Clock::now();
  for (int32_t i = 0; i < static_cast<int32_t>(pieces.size()); ++i) request.on_token(TokenEvent{i, -0.1f, {}});
  request.on_done(result);
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  bytes = sink->bytes;
  return ns;
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 4096, runs = 5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--tokens") tokens = std::stoi(next());
    else if (arg == "--runs") runs = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: bench_api_translation [--tokens N] [--runs N]\n");
      return 2;
    }
  }
  const rapidjson::Document no_settings(rapidjson::kObjectType);
  const std::pair<const char*, Wrap> apis[] = {
      {"chat completions (baseline)", [](std::shared_ptr<ResponseChannel> c) { return c; }},
      {"responses", [&](std::shared_ptr<ResponseChannel> c) -> std::shared_ptr<ResponseChannel> {
         return std::make_shared<TranslatingChannel>(c, std::make_unique<ResponsesTranslator>("bench", no_settings));
       }},
      {"messages", [](std::shared_ptr<ResponseChannel> c) -> std::shared_ptr<ResponseChannel> {
         return std::make_shared<TranslatingChannel>(c, std::make_unique<MessagesTranslator>("bench"));
       }},
  };
  std::printf("| answer | api | ns/token (median of %d) | bytes sent/token |\n|---|---|---|---|\n", runs);
  for (bool calls : {false, true}) {
    const auto pieces = script(tokens, calls);
    for (bool stream : {true, false}) {
      for (const auto& [name, wrap] : apis) {
        std::vector<double> per_token;
        std::size_t bytes = 0;
        for (int r = 0; r < runs; ++r) per_token.push_back(run_once(pieces, stream, calls, wrap, bytes) / pieces.size());
        std::sort(per_token.begin(), per_token.end());
        std::printf("| %s%s | %s | %.0f | %.1f |\n", stream ? "streamed" : "whole", calls ? ", with calls" : "", name,
                    per_token[per_token.size() / 2], static_cast<double>(bytes) / pieces.size());
      }
    }
  }
  return 0;
}
