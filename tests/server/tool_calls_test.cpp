// The response side of tools, through the real GenerationJob: token texts (as a model of each family
// writes them, special tokens included) become message.tool_calls, or delta.tool_calls chunks that
// reassemble to the same calls; and the request side's validation of tools / tool_choice.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "scripted_job.h"
#include "server/generation_job.h"
#include "server/request_parser.h"
#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

namespace {

struct Call {
  std::string id, name, arguments;
};
struct Answer {
  bool content_null = false;
  std::string content;
  std::vector<Call> calls;
  std::string finish;
};

// Runs the job over the token texts and returns the answer it gave (assembled from chunks if streamed).
Answer run(toolcall::Format format, const std::vector<std::string>& tokens, const std::set<std::string>& specials,
           bool stream, FinishReason engine_finish = FinishReason::kStop, bool parallel = true) {
  JobSpec spec;
  spec.identity = make_identity(true, "tiny");
  spec.stream = stream;
  spec.tool_format = format;
  spec.parallel_tool_calls = parallel;
  auto channel = scripted::run_scripted(std::move(spec), tokens, specials, engine_finish);

  Answer a;
  if (!stream) {
    EXPECT_EQ(channel->status, 200);
    auto doc = json::parse(channel->response, "response");
    EXPECT_TRUE(doc.ok()) << channel->response;
    const auto& message = (*doc)["choices"][0]["message"];
    a.content_null = message["content"].IsNull();
    if (!a.content_null) a.content = message["content"].GetString();
    a.finish = (*doc)["choices"][0]["finish_reason"].GetString();
    if (message.HasMember("tool_calls")) {
      for (const auto& c : message["tool_calls"].GetArray()) {
        EXPECT_STREQ(c["type"].GetString(), "function");
        a.calls.push_back({c["id"].GetString(), c["function"]["name"].GetString(), c["function"]["arguments"].GetString()});
      }
    }
    return a;
  }
  EXPECT_TRUE(channel->ended);
  EXPECT_EQ(channel->events.back(), "data: [DONE]\n\n");
  for (std::size_t i = 0; i + 1 < channel->events.size(); ++i) {
    auto doc = json::parse(channel->events[i].substr(6), "chunk");
    EXPECT_TRUE(doc.ok()) << channel->events[i];
    const auto& choice = (*doc)["choices"][0];
    const auto& delta = choice["delta"];
    if (i == 0) {
      EXPECT_STREQ(delta["role"].GetString(), "assistant");
    }
    if (delta.HasMember("content") && delta["content"].IsString()) a.content += delta["content"].GetString();
    if (delta.HasMember("tool_calls")) {
      EXPECT_FALSE(delta.HasMember("content"));
      for (const auto& c : delta["tool_calls"].GetArray()) {
        std::size_t index = c["index"].GetUint();
        if (index == a.calls.size()) {  // a call's first piece: id, type and name
          EXPECT_TRUE(c.HasMember("id") && c.HasMember("type") && c["function"].HasMember("name"));
          a.calls.push_back({c["id"].GetString(), c["function"]["name"].GetString(), ""});
        } else {
          EXPECT_LT(index, a.calls.size());
          EXPECT_FALSE(c.HasMember("id"));
        }
        a.calls[index].arguments += c["function"]["arguments"].GetString();
      }
    }
    if (!choice["finish_reason"].IsNull()) a.finish = choice["finish_reason"].GetString();
  }
  return a;
}

const std::vector<std::string> kQwenTwoCalls = {
    "I'll", " check", ".\n", "<tool_call>", "\n{\"", "name", "\": \"", "get", "_weather", "\", \"", "arguments",
    "\": {\"", "city", "\": \"", "Paris", "\"}}\n", "</tool_call>", "\n", "<tool_call>", "\n{\"name\": \"get_time\", ",
    "\"arguments\": {}}", "\n", "</tool_call>", "<|im_end|>"};

TEST(ToolCallResponse, WholeAnswerCarriesToolCallsWithUniqueIds) {
  Answer a = run(toolcall::Format::kHermes, kQwenTwoCalls, {"<|im_end|>"}, /*stream=*/false);
  EXPECT_EQ(a.content, "I'll check.\n");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(a.calls[1].name, "get_time");
  EXPECT_EQ(a.calls[1].arguments, "{}");
  EXPECT_TRUE(a.calls[0].id.starts_with("call_") && a.calls[0].id.size() == 29);
  EXPECT_NE(a.calls[0].id, a.calls[1].id);
  EXPECT_EQ(a.finish, "tool_calls");
}

TEST(ToolCallResponse, StreamReassemblesToTheSameCalls) {
  Answer whole = run(toolcall::Format::kHermes, kQwenTwoCalls, {"<|im_end|>"}, false);
  Answer streamed = run(toolcall::Format::kHermes, kQwenTwoCalls, {"<|im_end|>"}, true);
  EXPECT_EQ(streamed.content, whole.content);
  ASSERT_EQ(streamed.calls.size(), whole.calls.size());
  for (std::size_t i = 0; i < whole.calls.size(); ++i) {
    EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name);
    EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments);
  }
  EXPECT_EQ(streamed.finish, "tool_calls");
}

TEST(ToolCallResponse, OnlyCallsMeansNullContent) {
  Answer a = run(toolcall::Format::kHermes,
                 {"<tool_call>", "{\"name\": \"f\", \"arguments\": {\"x\": 1}}", "</tool_call>", "<|im_end|>"},
                 {"<|im_end|>"}, false);
  EXPECT_TRUE(a.content_null);
  ASSERT_EQ(a.calls.size(), 1u);
}

TEST(ToolCallResponse, SpecialTokenMarkersReachTheParser) {
  // Mistral's [TOOL_CALLS] and [ARGS] are control tokens; </s> stays hidden.
  const std::vector<std::string> tokens = {"[TOOL_CALLS]", "get_weather", "[ARGS]", "{\"city\": ", "\"Paris\"}", "</s>"};
  for (bool stream : {false, true}) {
    Answer a = run(toolcall::Format::kMistral, tokens, {"[TOOL_CALLS]", "[ARGS]", "</s>"}, stream);
    EXPECT_EQ(a.content, "");
    ASSERT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\"}");
  }
  // gpt-oss: the call ends at <|call|>, an end-of-generation token.
  const std::vector<std::string> harmony = {"<|channel|>", "analysis", "<|message|>", "Need weather.", "<|end|>",
                                            "<|start|>", "assistant", "<|channel|>", "commentary to=functions.get_weather",
                                            " ", "<|constrain|>", "json", "<|message|>", "{\"city\":\"Paris\"}"};
  Answer h = run(toolcall::Format::kHarmony, harmony,
                 {"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>"}, true);
  EXPECT_EQ(h.content, "Need weather.");
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(h.calls[0].arguments, "{\"city\":\"Paris\"}");
}

TEST(ToolCallResponse, PlainAnswerStaysPlain) {
  for (bool stream : {false, true}) {
    Answer a = run(toolcall::Format::kHermes, {"Hello", " <b>", "world</b>", "<|im_end|>"}, {"<|im_end|>"}, stream);
    EXPECT_EQ(a.content, "Hello <b>world</b>");
    EXPECT_TRUE(a.calls.empty());
    EXPECT_EQ(a.finish, "stop");
  }
}

TEST(ToolCallResponse, CutOffCallKeepsLengthFinishAndItsArguments) {
  Answer a = run(toolcall::Format::kHermes, {"<tool_call>", "{\"name\": \"f\", \"arguments\": {\"x\": \"ab"}, {}, false,
                 FinishReason::kLength);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"x\": \"ab");
  EXPECT_EQ(a.finish, "length");
}

TEST(ToolCallResponse, ParallelFalseKeepsTheFirstCall) {
  Answer a = run(toolcall::Format::kHermes, kQwenTwoCalls, {"<|im_end|>"}, false, FinishReason::kStop, false);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
}

// Request side.
ApiResult<ChatRequest> parse(const std::string& extra) {
  return parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", RequestDefaults{});
}

const char* kTool = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})";

TEST(ToolRequest, ValidToolsAndChoices) {
  auto r = parse(std::string(R"(,"tools":[)") + kTool + R"(],"tool_choice":"none","parallel_tool_calls":false)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(r->parallel_tool_calls);
  EXPECT_EQ(r->tools.Size(), 1u);
  auto d = parse(std::string(R"(,"tools":[)") + kTool + "]");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tool_choice, ToolChoice::kAuto);
}

TEST(ToolRequest, BadToolsAre400NamingTheField) {
  const std::map<std::string, std::string> cases = {
      {R"(,"tools":{})", "tools"},
      {R"(,"tools":[1])", "tools[0]"},
      {R"(,"tools":[{"function":{"name":"f"}}])", "tools[0].type"},
      {R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}])", "tools[0].type"},
      {R"(,"tools":[{"type":"function"}])", "tools[0].function"},
      {R"(,"tools":[{"type":"function","function":{}}])", "tools[0].function.name"},
      {R"(,"tools":[{"type":"function","function":{"name":"has space"}}])", "tools[0].function.name"},
      {R"(,"tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])", "tools[0].function.parameters"},
      {std::string(R"(,"tools":[)") + kTool + "," + kTool + "]", "tools[1].function.name"},
      {R"(,"tool_choice":"sometimes")", "tool_choice"},
      {R"(,"tool_choice":7)", "tool_choice"},
      {R"(,"parallel_tool_calls":"yes")", "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : cases) {
    auto r = parse(extra);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_EQ(r.error().status, 400) << extra;
    EXPECT_EQ(r.error().param, param) << extra << ": " << r.error().message;
  }
}

TEST(ToolRequest, RequiredAndNamedChoicesAreTakenWithTheirFunction) {
  auto required = parse(std::string(R"(,"tools":[)") + kTool + R"(],"tool_choice":"required")");
  ASSERT_TRUE(required.ok()) << required.error().message;
  EXPECT_EQ(required->tool_choice, ToolChoice::kRequired);
  auto named = parse(std::string(R"(,"tools":[)") + kTool + R"(],"tool_choice":{"type":"function","function":{"name":"get_weather"}})");
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named->forced_tool, "get_weather");
  auto unknown = parse(std::string(R"(,"tools":[)") + kTool + R"(],"tool_choice":{"type":"function","function":{"name":"nope"}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("not in tools"), std::string::npos);
  auto without_tools = parse(R"(,"tool_choice":"required")");
  ASSERT_FALSE(without_tools.ok());
  EXPECT_EQ(without_tools.error().param, "tool_choice");
}

// A <think> model with tools: the reasoning split runs first, so a call the model only thinks about
// stays reasoning, and the call after </think> is the answer's — whole and streamed.
TEST(ToolCallsWithReasoning, ACallInsideThinkIsReasoningTheOneAfterIsACall) {
  const std::vector<std::string> tokens = {"<think>", "maybe <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "</think>",
                                           "\n<tool_call>{\"name\": \"get\", \"arguments\": {\"x\": 1}}</tool_call>"};
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    JobSpec spec;
    spec.identity = make_identity(true, "tiny");
    spec.stream = stream;
    spec.split_reasoning = true;
    spec.tool_format = toolcall::Format::kHermes;
    auto channel = scripted::run_scripted(std::move(spec), tokens, {});
    std::string reasoning;
    std::vector<std::string> names;
    if (!stream) {
      auto doc = json::parse(channel->response, "response");
      ASSERT_TRUE(doc.ok()) << channel->response;
      const auto& message = (*doc)["choices"][0]["message"];
      reasoning = message["reasoning_content"].GetString();
      for (const auto& c : message["tool_calls"].GetArray()) names.push_back(c["function"]["name"].GetString());
      EXPECT_STREQ((*doc)["choices"][0]["finish_reason"].GetString(), "tool_calls");
    } else {
      for (std::size_t i = 0; i + 1 < channel->events.size(); ++i) {
        auto doc = json::parse(channel->events[i].substr(6), "chunk");
        ASSERT_TRUE(doc.ok()) << channel->events[i];
        if (!(*doc)["choices"].IsArray() || (*doc)["choices"].Empty()) continue;
        const auto& delta = (*doc)["choices"][0]["delta"];
        if (delta.HasMember("reasoning_content") && delta["reasoning_content"].IsString()) reasoning += delta["reasoning_content"].GetString();
        if (delta.HasMember("tool_calls"))
          for (const auto& c : delta["tool_calls"].GetArray())
            if (c["function"].HasMember("name")) names.push_back(c["function"]["name"].GetString());
      }
    }
    EXPECT_NE(reasoning.find("<tool_call>"), std::string::npos) << reasoning;
    EXPECT_EQ(names, std::vector<std::string>{"get"});
  }
}

// Mistral's templates take back only ids of 9 letters and digits when a history is replayed.
TEST(ToolCallIds, MistralCallsGetNineAlphanumericIdsOthersOpenAiShaped) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string m = make_tool_call_id(toolcall::Format::kMistral);
    ASSERT_EQ(m.size(), 9u) << m;
    EXPECT_TRUE(std::all_of(m.begin(), m.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) << m;
    EXPECT_TRUE(seen.insert(m).second) << "repeated " << m;
    const std::string o = make_tool_call_id(toolcall::Format::kHermes);
    EXPECT_EQ(o.rfind("call_", 0), 0u) << o;
    EXPECT_EQ(o.size(), 29u) << o;
  }
}

}  // namespace

// n choices: each answer goes through its own parser — one choice's calls never leak into another's.
TEST(ToolCallResponse, EachChoiceParsesItsOwnCalls) {
  const std::vector<std::string> plain = {"Sunny", " today", ".", "<|im_end|>"};
  for (bool stream : {false, true}) {
    JobSpec spec;
    spec.identity = make_identity(true, "tiny");
    spec.stream = stream;
    spec.tool_format = toolcall::Format::kHermes;
    std::vector<std::unique_ptr<TokenText>> texts;
    texts.push_back(std::make_unique<scripted::ScriptedText>(kQwenTwoCalls, std::set<std::string>{"<|im_end|>"}));
    texts.push_back(std::make_unique<scripted::ScriptedText>(plain, std::set<std::string>{"<|im_end|>"}));
    auto channel = std::make_shared<scripted::CapturingChannel>();
    auto job = std::make_shared<GenerationJob>(std::move(spec), std::move(texts), channel, nullptr);
    GenerationRequest request;
    job->attach(request);
    // Interleaved, as a batch decodes them.
    for (int32_t i = 0; i < static_cast<int32_t>(kQwenTwoCalls.size()); ++i) {
      TokenEvent e{i, -0.1f, {}};
      request.on_token(e);
      if (i < static_cast<int32_t>(plain.size())) {
        e.choice = 1;
        request.on_token(e);
      }
    }
    GenerationResult done;
    done.finish = FinishReason::kStop;
    done.choice = 1;
    request.on_done(done);
    done.choice = 0;
    request.on_done(done);

    std::map<int, std::string> content, finish;
    std::map<int, int> calls;
    if (!stream) {
      auto doc = json::parse(channel->response, "response");
      ASSERT_TRUE(doc.ok());
      for (const auto& c : (*doc)["choices"].GetArray()) {
        const int index = c["index"].GetInt();
        const auto& message = c["message"];
        if (message["content"].IsString()) content[index] = message["content"].GetString();
        calls[index] = message.HasMember("tool_calls") ? static_cast<int>(message["tool_calls"].Size()) : 0;
        finish[index] = c["finish_reason"].GetString();
      }
    } else {
      for (std::size_t i = 0; i + 1 < channel->events.size(); ++i) {
        auto doc = json::parse(channel->events[i].substr(6), "chunk");
        ASSERT_TRUE(doc.ok());
        if ((*doc)["choices"].Empty()) continue;
        const auto& c = (*doc)["choices"][0];
        const int index = c["index"].GetInt();
        const auto& delta = c["delta"];
        if (delta.HasMember("content")) content[index] += delta["content"].GetString();
        if (delta.HasMember("tool_calls"))
          for (const auto& call : delta["tool_calls"].GetArray())
            if (call.HasMember("id")) ++calls[index];
        if (!c["finish_reason"].IsNull()) finish[index] = c["finish_reason"].GetString();
      }
    }
    EXPECT_EQ(calls[0], 2) << "stream " << stream;
    EXPECT_EQ(calls[1], 0) << "stream " << stream;
    EXPECT_EQ(content[0], "I'll check.\n") << "stream " << stream;
    EXPECT_EQ(content[1], "Sunny today.") << "stream " << stream;
    EXPECT_EQ(finish[0], "tool_calls") << "stream " << stream;
    EXPECT_EQ(finish[1], "stop") << "stream " << stream;
  }
}
