// The Responses API and Anthropic's Messages API as translations of chat completions: their requests
// become chat requests the chat parser accepts, and a real GenerationJob's answers (whole and
// streamed, driven by scripted token texts) come out in each API's own objects and event sequences.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scripted_job.h"
#include "server/anthropic_output.h"
#include "server/anthropic_request.h"
#include "server/request_parser.h"
#include "server/responses_output.h"
#include "server/response_store.h"
#include "server/responses_request.h"
#include "server/translating_channel.h"
#include "util/json.h"

namespace sluice::server {
namespace {

rapidjson::Document parse(const std::string& text) {
  auto doc = json::parse(text, "test json");
  EXPECT_TRUE(doc.ok()) << text;
  return doc.ok() ? std::move(*doc) : rapidjson::Document();
}

std::string str(const rapidjson::Value& v) { return v.IsString() ? v.GetString() : "<not a string>"; }

// ---- Responses: requests ---------------------------------------------------------------------

rapidjson::Document chat_of_responses(const std::string& body) {
  auto translated = translate_responses_request(body);
  EXPECT_TRUE(translated.ok()) << (translated.ok() ? "" : translated.error().message);
  if (!translated.ok()) return {};
  // What the translator writes is a chat request the chat parser accepts.
  auto chat = parse_chat_request(translated->chat_body, RequestDefaults{});
  EXPECT_TRUE(chat.ok()) << translated->chat_body << " → " << (chat.ok() ? "" : chat.error().message);
  return parse(translated->chat_body);
}

ApiError responses_error(const std::string& body) {
  auto translated = translate_responses_request(body);
  EXPECT_FALSE(translated.ok()) << body;
  return translated.ok() ? ApiError{} : translated.error();
}

TEST(ResponsesRequest, StringInputWithInstructionsAndSettings) {
  auto chat = chat_of_responses(R"({"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":20,
    "temperature":0.5,"top_p":0.9,"reasoning":{"effort":"low"},
    "text":{"format":{"type":"json_schema","name":"answer","schema":{"type":"object"},"strict":true}}})");
  ASSERT_TRUE(chat.IsObject());
  ASSERT_EQ(chat["messages"].Size(), 2u);
  EXPECT_EQ(str(chat["messages"][0]["role"]), "system");
  EXPECT_EQ(str(chat["messages"][0]["content"]), "Be brief.");
  EXPECT_EQ(str(chat["messages"][1]["role"]), "user");
  EXPECT_EQ(str(chat["messages"][1]["content"]), "Hi");
  EXPECT_EQ(chat["max_tokens"].GetInt(), 20);
  EXPECT_DOUBLE_EQ(chat["temperature"].GetDouble(), 0.5);
  EXPECT_EQ(str(chat["reasoning_effort"]), "low");
  EXPECT_TRUE(chat["enable_thinking"].GetBool());  // an effort asks for reasoning
  EXPECT_EQ(str(chat["response_format"]["type"]), "json_schema");
  EXPECT_EQ(str(chat["response_format"]["json_schema"]["name"]), "answer");
  EXPECT_TRUE(chat["response_format"]["json_schema"]["strict"].GetBool());
  EXPECT_FALSE(chat["stream"].GetBool());
}

TEST(ResponsesRequest, AgentLoopItemsBecomeToolCallsAndToolMessages) {
  auto chat = chat_of_responses(R"({"input":[
    {"role":"developer","content":"Use tools."},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in "},{"type":"input_text","text":"Paris and Rome?"}]},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Two cities."}]},
    {"type":"function_call","call_id":"call_a","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"call_b","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},
    {"type":"function_call_output","call_id":"call_a","output":"18C"},
    {"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"21C"}]}],
    "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],
    "tool_choice":{"type":"function","name":"get_weather"},"stream":true})");
  ASSERT_TRUE(chat.IsObject());
  const auto& m = chat["messages"];
  ASSERT_EQ(m.Size(), 5u);
  EXPECT_EQ(str(m[0]["role"]), "system");  // developer
  EXPECT_EQ(str(m[1]["content"]), "Weather in Paris and Rome?");
  EXPECT_EQ(str(m[2]["role"]), "assistant");
  EXPECT_TRUE(m[2]["content"].IsNull());
  EXPECT_EQ(str(m[2]["reasoning_content"]), "Two cities.");
  ASSERT_EQ(m[2]["tool_calls"].Size(), 2u);  // both calls are one assistant turn
  EXPECT_EQ(str(m[2]["tool_calls"][1]["id"]), "call_b");
  EXPECT_EQ(str(m[2]["tool_calls"][1]["function"]["arguments"]), R"({"city":"Rome"})");
  EXPECT_EQ(str(m[3]["role"]), "tool");
  EXPECT_EQ(str(m[3]["tool_call_id"]), "call_a");
  EXPECT_EQ(str(m[4]["content"]), "21C");
  EXPECT_EQ(str(chat["tools"][0]["function"]["name"]), "get_weather");
  EXPECT_TRUE(chat["tools"][0]["function"]["parameters"].IsObject());
  EXPECT_EQ(str(chat["tool_choice"]["function"]["name"]), "get_weather");
  EXPECT_TRUE(chat["stream"].GetBool());
  EXPECT_TRUE(chat["stream_options"]["include_usage"].GetBool());  // usage for response.completed
}

TEST(ResponsesRequest, ReasoningEffortNoneTurnsThinkingOff) {
  auto chat = chat_of_responses(R"({"input":"x","reasoning":{"effort":"none"}})");
  ASSERT_TRUE(chat.IsObject());
  EXPECT_FALSE(chat["enable_thinking"].GetBool());
}

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinItsCountAndBytes) {
  ResponseStore store(/*max_entries=*/3, /*max_bytes=*/100);
  for (const char* id : {"a", "b", "c"}) store.put(id, {"[]", std::string(10, 'x')});
  ASSERT_TRUE(store.get("a"));  // a is now the most recent: b goes first
  store.put("d", {"[]", "y"});
  EXPECT_FALSE(store.get("b"));
  EXPECT_TRUE(store.get("a") && store.get("c") && store.get("d"));
  // 12 + 12 + 3 bytes held; 82 more is over 100: the least recent (a) goes, and that is enough.
  store.put("big", {"[]", std::string(80, 'z')});
  EXPECT_TRUE(store.get("big"));
  EXPECT_FALSE(store.get("a"));
  EXPECT_EQ(store.size(), 3u);
  store.put("huge", {"[]", std::string(200, 'z')});  // larger than the whole store: not kept
  EXPECT_FALSE(store.get("huge"));
  EXPECT_TRUE(store.erase("big"));
  EXPECT_FALSE(store.erase("big"));
}

TEST(ResponsesRequest, PreviousResponseIdPutsTheStoredConversationFirst) {
  ResponseStore store;
  store.put("resp_1", {R"([{"role":"user","content":"Hi"},{"role":"assistant","content":null,
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}])", "{}"});
  auto translated = translate_responses_request(R"({"previous_response_id":"resp_1","instructions":"New rules.",
    "input":[{"type":"function_call_output","call_id":"call_1","output":"done"}]})", &store);
  ASSERT_TRUE(translated.ok()) << translated.error().message;
  auto chat = parse(translated->chat_body);
  const auto& m = chat["messages"];
  ASSERT_EQ(m.Size(), 4u);
  EXPECT_EQ(str(m[0]["content"]), "New rules.");  // this request's instructions, not the stored ones
  EXPECT_EQ(str(m[1]["content"]), "Hi");
  EXPECT_EQ(str(m[2]["tool_calls"][0]["id"]), "call_1");
  EXPECT_EQ(str(m[3]["role"]), "tool");
  EXPECT_TRUE(parse_chat_request(translated->chat_body, RequestDefaults{}).ok());
  // What is stored next is the conversation without the instructions.
  EXPECT_TRUE(translated->store);
  EXPECT_EQ(parse(translated->conversation).Size(), 3u);
  EXPECT_EQ(str(translated->settings["previous_response_id"]), "resp_1");

  auto unknown = translate_responses_request(R"({"previous_response_id":"resp_2","input":"x"})", &store);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().status, 404);
  EXPECT_EQ(unknown.error().param, "previous_response_id");
  auto not_stored = translate_responses_request(R"({"input":"x","store":false})", &store);
  ASSERT_TRUE(not_stored.ok());
  EXPECT_FALSE(not_stored->store);
}

TEST(ResponsesRequest, StatefulAndUnsupportedFieldsAreA400NamingThem) {
  // Without a store (translate_responses_request's default) nothing can be kept or continued.
  EXPECT_EQ(responses_error(R"({"input":"x","previous_response_id":"resp_1"})").param, "previous_response_id");
  EXPECT_EQ(responses_error(R"({"input":"x","store":true})").param, "store");
  EXPECT_EQ(responses_error(R"({"input":"x","conversation":"c"})").param, "conversation");
  EXPECT_EQ(responses_error(R"({"input":"x","background":true})").param, "background");
  EXPECT_EQ(responses_error(R"({"model":"m"})").param, "input");
  EXPECT_EQ(responses_error(R"({"input":7})").param, "input");
  EXPECT_EQ(responses_error(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})").param,
            "input[0].content[0].type");
  EXPECT_EQ(responses_error(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})").param,
            "input[0].call_id");
  EXPECT_EQ(responses_error(R"({"input":[{"type":"item_reference","id":"x"}]})").param, "input[0].type");
  EXPECT_EQ(responses_error(R"({"input":"x","tools":[{"type":"web_search"}]})").param, "tools[0].type");
  EXPECT_EQ(responses_error(R"({"input":"x","text":{"format":{"type":"xml"}}})").param, "text.format.type");
  // store: false is what a stateless server does anyway.
  EXPECT_TRUE(translate_responses_request(R"({"input":"x","store":false})").ok());
}

TEST(ResponsesRequest, ChatErrorsAreRenamedToResponsesFields) {
  auto translated = translate_responses_request(R"({"input":"x","tools":[{"type":"function","name":"bad name!"}]})");
  ASSERT_TRUE(translated.ok());
  auto chat = parse_chat_request(translated->chat_body, RequestDefaults{});
  ASSERT_FALSE(chat.ok());
  ApiError renamed = responses_error_from_chat(chat.error());
  EXPECT_EQ(renamed.param, "tools[0].name");
  EXPECT_NE(renamed.message.find("tools[0].name"), std::string::npos) << renamed.message;
  EXPECT_EQ(responses_error_from_chat(ApiError::bad_request("max_tokens must be", "max_tokens")).param, "max_output_tokens");
  EXPECT_EQ(responses_error_from_chat(ApiError::bad_request("bad", "response_format.json_schema.schema")).param,
            "text.format.schema");
  EXPECT_EQ(responses_error_from_chat(ApiError::bad_request("bad", "messages[3].content")).param, "input");
}

// ---- Running a real job through a translating channel ----------------------------------------

struct SseEvent {
  std::string name;
  rapidjson::Document data;
};

// Splits what the client received into named events.
std::vector<SseEvent> events_of(const std::vector<std::string>& sent) {
  std::vector<SseEvent> out;
  for (const auto& text : sent) {
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos) << text;
      if (end == std::string::npos) break;
      std::string block = text.substr(pos, end - pos);
      pos = end + 2;
      EXPECT_TRUE(block.starts_with("event: ")) << block;
      std::size_t nl = block.find('\n');
      SseEvent e{block.substr(7, nl - 7), {}};
      EXPECT_TRUE(block.substr(nl + 1).starts_with("data: ")) << block;
      e.data = parse(block.substr(nl + 7));
      out.push_back(std::move(e));
    }
  }
  return out;
}

struct Script {
  Script(std::vector<std::string> t, bool s = true, bool split = false, toolcall::Format format = toolcall::Format::kNone)
      : tokens(std::move(t)), stream(s), split_reasoning(split), tool_format(format) {}
  std::vector<std::string> tokens;
  bool stream;
  bool split_reasoning;
  toolcall::Format tool_format;
  std::vector<std::string> stop;
  FinishReason finish = FinishReason::kStop;
};

constexpr int kPromptTokens = 11;

std::shared_ptr<scripted::CapturingChannel> run_translated(std::unique_ptr<ApiTranslator> translator, const Script& s) {
  JobSpec spec;
  spec.identity = make_identity(true, "tiny");
  spec.stream = s.stream;
  spec.include_usage = s.stream;  // as the translators ask for it
  spec.split_reasoning = s.split_reasoning;
  spec.tool_format = s.tool_format;
  spec.stop = s.stop;
  auto client = std::make_shared<scripted::CapturingChannel>();
  auto channel = std::make_shared<TranslatingChannel>(client, std::move(translator));
  channel->note_prompt_tokens(kPromptTokens);
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::make_unique<scripted::ScriptedText>(s.tokens, std::set<std::string>{}),
                                             channel, nullptr);
  GenerationRequest request;
  job->attach(request);
  GenerationResult result;
  result.finish = s.finish;
  if (s.finish == FinishReason::kError) result.error = "the device fell over";
  result.stats.prompt_tokens = kPromptTokens;
  result.stats.cached_tokens = 3;
  for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) {
    ++result.stats.completion_tokens;
    if (!request.on_token(TokenEvent{i, -0.1f, {}})) break;
  }
  request.on_done(result);
  return client;
}

std::unique_ptr<ApiTranslator> responses_translator() {
  rapidjson::Document settings(rapidjson::kObjectType);
  settings.AddMember("max_output_tokens", 64, settings.GetAllocator());
  return std::make_unique<ResponsesTranslator>("tiny", settings);
}

std::vector<std::string> names_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.name);
  return names;
}

// ---- Responses: answers -----------------------------------------------------------------------

TEST(ResponsesOutput, WholeAnswerIsAResponseObjectWithReasoningAndMessageItems) {
  Script s{{"<think>", "Short.", "</think>", "Hello", " world"}, false, true};
  auto client = run_translated(responses_translator(), s);
  ASSERT_EQ(client->status, 200);
  auto r = parse(client->response);
  EXPECT_EQ(str(r["object"]), "response");
  EXPECT_TRUE(str(r["id"]).starts_with("resp_"));
  EXPECT_EQ(str(r["status"]), "completed");
  EXPECT_EQ(r["max_output_tokens"].GetInt(), 64);  // the request's settings are echoed
  ASSERT_EQ(r["output"].Size(), 2u);
  EXPECT_EQ(str(r["output"][0]["type"]), "reasoning");
  EXPECT_EQ(str(r["output"][0]["content"][0]["text"]), "Short.");
  EXPECT_EQ(str(r["output"][1]["type"]), "message");
  EXPECT_EQ(str(r["output"][1]["role"]), "assistant");
  EXPECT_EQ(str(r["output"][1]["content"][0]["type"]), "output_text");
  EXPECT_EQ(str(r["output"][1]["content"][0]["text"]), "Hello world");
  EXPECT_EQ(r["usage"]["input_tokens"].GetInt(), kPromptTokens);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"].GetInt(), 3);
  EXPECT_EQ(r["usage"]["output_tokens"].GetInt(), 5);
  EXPECT_EQ(r["usage"]["total_tokens"].GetInt(), kPromptTokens + 5);
}

TEST(ResponsesOutput, WholeAnswerWithCallsHasFunctionCallItems) {
  Script s{{"\n<tool_call>", R"({"name": "get_weather", "arguments": {"city": "Paris"}})", "</tool_call>\n"}, false, false,
           toolcall::Format::kHermes};
  auto client = run_translated(responses_translator(), s);
  auto r = parse(client->response);
  ASSERT_EQ(r["output"].Size(), 1u) << client->response;  // the whitespace around the call is no message
  const auto& call = r["output"][0];
  EXPECT_EQ(str(call["type"]), "function_call");
  EXPECT_TRUE(str(call["id"]).starts_with("fc_"));
  EXPECT_TRUE(str(call["call_id"]).starts_with("call_"));
  EXPECT_EQ(str(call["name"]), "get_weather");
  EXPECT_EQ(str(parse(str(call["arguments"]))["city"]), "Paris");
  EXPECT_EQ(str(r["status"]), "completed");
}

TEST(ResponsesOutput, CutShortByTheLimitIsIncomplete) {
  Script s{{"Hello"}, false};
  s.finish = FinishReason::kLength;
  auto r = parse(run_translated(responses_translator(), s)->response);
  EXPECT_EQ(str(r["status"]), "incomplete");
  EXPECT_EQ(str(r["incomplete_details"]["reason"]), "max_output_tokens");
}

TEST(ResponsesOutput, StreamedTextIsTheTypedEventSequence) {
  auto client = run_translated(responses_translator(), Script{{"Hello", " world"}});
  EXPECT_TRUE(client->ended);
  auto events = events_of(client->events);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(names_of(events), expected);
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(str(events[i].data["type"]), events[i].name);
    EXPECT_EQ(events[i].data["sequence_number"].GetInt(), static_cast<int>(i));
  }
  const std::string item_id = str(events[2].data["item"]["id"]);
  EXPECT_EQ(str(events[4].data["item_id"]), item_id);
  EXPECT_EQ(str(events[4].data["delta"]), "Hello");
  EXPECT_EQ(str(events[6].data["text"]), "Hello world");
  const auto& done = events.back().data["response"];
  EXPECT_EQ(str(done["status"]), "completed");
  EXPECT_EQ(str(done["id"]), str(events[0].data["response"]["id"]));
  EXPECT_EQ(str(done["output"][0]["id"]), item_id);
  EXPECT_EQ(str(done["output"][0]["content"][0]["text"]), "Hello world");
  EXPECT_EQ(done["usage"]["output_tokens"].GetInt(), 2);
  EXPECT_EQ(str(events[0].data["response"]["status"]), "in_progress");
}

TEST(ResponsesOutput, StreamedReasoningThenCallsReassemble) {
  Script s{{"<think>", "Need", " weather.", "</think>", "\n<tool_call>", R"({"name": "get_weather", )",
            R"("arguments": {"city": "Paris"}})", "</tool_call>\n<tool_call>",
            R"({"name": "get_time", "arguments": {}})", "</tool_call>"},
           true, true, toolcall::Format::kHermes};
  auto events = events_of(run_translated(responses_translator(), s)->events);
  std::string reasoning;
  std::map<int, std::string> arguments, done_arguments, names;
  for (const auto& e : events) {
    if (e.name == "response.reasoning_text.delta") reasoning += str(e.data["delta"]);
    if (e.name == "response.output_item.added" && str(e.data["item"]["type"]) == "function_call")
      names[e.data["output_index"].GetInt()] = str(e.data["item"]["name"]);
    if (e.name == "response.function_call_arguments.delta") arguments[e.data["output_index"].GetInt()] += str(e.data["delta"]);
    if (e.name == "response.function_call_arguments.done") done_arguments[e.data["output_index"].GetInt()] = str(e.data["arguments"]);
    EXPECT_NE(e.name, "response.output_text.delta") << "whitespace between calls is not a message";
  }
  EXPECT_EQ(reasoning, "Need weather.");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "get_weather");  // output 0 is the reasoning
  EXPECT_EQ(names[2], "get_time");
  EXPECT_EQ(arguments, done_arguments);
  EXPECT_EQ(str(parse(arguments[1])["city"]), "Paris");
  const auto& output = events.back().data["response"]["output"];
  ASSERT_EQ(output.Size(), 3u);
  EXPECT_EQ(str(output[0]["type"]), "reasoning");
  EXPECT_EQ(str(output[2]["arguments"]), arguments[2]);
}

TEST(ResponsesOutput, AGenerationFailureMidStreamIsResponseFailed) {
  Script s{{"Hel"}};
  s.finish = FinishReason::kError;
  auto client = run_translated(responses_translator(), s);
  auto events = events_of(client->events);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "response.failed");
  EXPECT_EQ(str(events.back().data["response"]["status"]), "failed");
  EXPECT_NE(str(events.back().data["response"]["error"]["message"]).find("the device fell over"), std::string::npos);
  EXPECT_TRUE(client->ended);
}

TEST(ResponsesOutput, AnEmptyAnswerIsStillOneMessage) {
  for (bool stream : {false, true}) {
    Script s({}, stream);
    auto client = run_translated(responses_translator(), s);
    auto events = events_of(client->events);
    auto whole = stream ? rapidjson::Document() : parse(client->response);
    const auto& r = stream ? events.back().data["response"] : whole;
    ASSERT_EQ(r["output"].Size(), 1u);
    EXPECT_EQ(str(r["output"][0]["type"]), "message");
    EXPECT_EQ(str(r["output"][0]["content"][0]["text"]), "");
  }
}

TEST(ResponsesOutput, AFinishedAnswerIsStoredWithItsAssistantTurn) {
  for (bool stream : {false, true}) {
    ResponseStore store;
    auto translator = std::make_unique<ResponsesTranslator>("tiny", rapidjson::Document(rapidjson::kObjectType), &store,
                                                            R"([{"role":"user","content":"Weather?"}])");
    const std::string id = translator->id();
    Script s({"<think>", "Hmm.", "</think>", "Sure.", "<tool_call>", R"({"name": "get", "arguments": {"x": 1}})",
              "</tool_call>"},
             stream, true, toolcall::Format::kHermes);
    run_translated(std::move(translator), s);
    auto stored = store.get(id);
    ASSERT_TRUE(stored) << (stream ? "streamed" : "whole");
    auto conversation = parse(stored->conversation);
    ASSERT_EQ(conversation.Size(), 2u);
    const auto& turn = conversation[1];
    EXPECT_EQ(str(turn["role"]), "assistant");
    EXPECT_EQ(str(turn["content"]), "Sure.");
    EXPECT_EQ(str(turn["reasoning_content"]), "Hmm.");
    EXPECT_EQ(str(turn["tool_calls"][0]["function"]["name"]), "get");
    EXPECT_TRUE(str(turn["tool_calls"][0]["id"]).starts_with("call_"));
    auto response = parse(stored->response);
    EXPECT_EQ(str(response["id"]), id);
    EXPECT_TRUE(response["store"].GetBool());
  }
}

// ---- Messages: requests -----------------------------------------------------------------------

rapidjson::Document chat_of_messages(const std::string& body) {
  auto translated = translate_messages_request(body);
  EXPECT_TRUE(translated.ok()) << (translated.ok() ? "" : translated.error().message);
  if (!translated.ok()) return {};
  auto chat = parse_chat_request(translated->chat_body, RequestDefaults{});
  EXPECT_TRUE(chat.ok()) << translated->chat_body << " → " << (chat.ok() ? "" : chat.error().message);
  return parse(translated->chat_body);
}

ApiError messages_error(const std::string& body) {
  auto translated = translate_messages_request(body);
  EXPECT_FALSE(translated.ok()) << body;
  return translated.ok() ? ApiError{} : translated.error();
}

TEST(MessagesRequest, AToolLoopBecomesChatMessages) {
  auto chat = chat_of_messages(R"({"model":"claude","max_tokens":100,"system":[{"type":"text","text":"You code."}],
    "messages":[
      {"role":"user","content":"Read a.txt"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"Use the tool.","signature":"x"},
        {"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a.txt"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hello"}]},
        {"type":"text","text":"Summarize it."}]}],
    "tools":[{"name":"read","description":"Reads a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],
    "tool_choice":{"type":"any","disable_parallel_tool_use":true},
    "stop_sequences":["END"],"temperature":0.2,"top_k":5,"thinking":{"type":"enabled","budget_tokens":1024},"stream":true})");
  ASSERT_TRUE(chat.IsObject());
  const auto& m = chat["messages"];
  ASSERT_EQ(m.Size(), 5u);
  EXPECT_EQ(str(m[0]["role"]), "system");
  EXPECT_EQ(str(m[0]["content"]), "You code.");
  EXPECT_EQ(str(m[2]["role"]), "assistant");
  EXPECT_EQ(str(m[2]["content"]), "Reading.");
  EXPECT_EQ(str(m[2]["reasoning_content"]), "Use the tool.");
  EXPECT_EQ(str(m[2]["tool_calls"][0]["id"]), "toolu_1");
  EXPECT_EQ(str(parse(str(m[2]["tool_calls"][0]["function"]["arguments"]))["path"]), "a.txt");
  EXPECT_EQ(str(m[3]["role"]), "tool");  // the tool result comes before the turn's text
  EXPECT_EQ(str(m[3]["tool_call_id"]), "toolu_1");
  EXPECT_EQ(str(m[3]["content"]), "hello");
  EXPECT_EQ(str(m[4]["role"]), "user");
  EXPECT_EQ(str(m[4]["content"]), "Summarize it.");
  EXPECT_TRUE(chat["tools"][0]["function"]["parameters"].IsObject());
  EXPECT_EQ(str(chat["tool_choice"]), "required");
  EXPECT_FALSE(chat["parallel_tool_calls"].GetBool());
  EXPECT_EQ(str(chat["stop"][0]), "END");
  EXPECT_EQ(chat["max_tokens"].GetInt(), 100);
  EXPECT_EQ(chat["top_k"].GetInt(), 5);
  EXPECT_TRUE(chat["enable_thinking"].GetBool());
  EXPECT_TRUE(chat["stream_options"]["include_usage"].GetBool());
}

TEST(MessagesRequest, NamedToolChoiceAndThinkingDisabled) {
  auto chat = chat_of_messages(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],
    "tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},
    "thinking":{"type":"disabled"}})");
  ASSERT_TRUE(chat.IsObject());
  EXPECT_EQ(str(chat["tool_choice"]["function"]["name"]), "f");
  EXPECT_FALSE(chat["enable_thinking"].GetBool());
}

TEST(MessagesRequest, BadRequestsNameTheField) {
  EXPECT_EQ(messages_error(R"({"messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
  EXPECT_EQ(messages_error(R"({"max_tokens":0,"messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[]})").param, "messages");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"system","content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"x"}]}]})").param,
            "messages[0].content[0].input");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]})").param,
            "tools[0].type");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"sometimes"}})").param,
            "tool_choice.type");
  EXPECT_EQ(messages_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"stop_sequences":"END"})").param,
            "stop_sequences");
}

TEST(MessagesErrors, ChatErrorsAreRenamedToMessagesFields) {
  auto stops = translate_messages_request(
      R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"stop_sequences":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})");
  ASSERT_TRUE(stops.ok());
  auto chat = parse_chat_request(stops->chat_body, RequestDefaults{});
  ASSERT_FALSE(chat.ok());
  ApiError renamed = messages_error_from_chat(chat.error());
  EXPECT_EQ(renamed.param, "stop_sequences");
  EXPECT_TRUE(renamed.message.starts_with("stop_sequences ")) << renamed.message;
  auto schema = translate_messages_request(
      R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":[]}]})");
  ASSERT_TRUE(schema.ok());
  auto bad_schema = parse_chat_request(schema->chat_body, RequestDefaults{});
  ASSERT_FALSE(bad_schema.ok());
  EXPECT_EQ(messages_error_from_chat(bad_schema.error()).param, "tools[0].input_schema");
}

TEST(MessagesErrors, AnthropicShapeAndTypeByStatus) {
  auto e = parse(anthropic_error_json(ApiError::bad_request("max_tokens is required", "max_tokens")));
  EXPECT_EQ(str(e["type"]), "error");
  EXPECT_EQ(str(e["error"]["type"]), "invalid_request_error");
  EXPECT_EQ(str(e["error"]["message"]), "max_tokens is required");
  EXPECT_EQ(str(parse(anthropic_error_json(ApiError::unauthorized()))["error"]["type"]), "authentication_error");
  EXPECT_EQ(str(parse(anthropic_error_json(ApiError::overloaded("busy")))["error"]["type"]), "overloaded_error");
  EXPECT_EQ(str(parse(anthropic_error_json(ApiError::server_error("x")))["error"]["type"]), "api_error");
  EXPECT_EQ(anthropic_error_reply(ApiError::not_found("/x")).status, 404);
}

// ---- Messages: answers ------------------------------------------------------------------------

TEST(MessagesOutput, WholeAnswerHasThinkingTextAndToolUseBlocks) {
  Script s{{"<think>", "Plan.", "</think>", "Let me look.", "\n<tool_call>",
            R"({"name": "read", "arguments": {"path": "a.txt", "lines": [1, 2]}})", "</tool_call>"},
           false, true, toolcall::Format::kHermes};
  auto client = run_translated(std::make_unique<MessagesTranslator>("tiny"), s);
  ASSERT_EQ(client->status, 200);
  auto m = parse(client->response);
  EXPECT_EQ(str(m["type"]), "message");
  EXPECT_TRUE(str(m["id"]).starts_with("msg_"));
  EXPECT_EQ(str(m["role"]), "assistant");
  const auto& content = m["content"];
  ASSERT_EQ(content.Size(), 3u) << client->response;
  EXPECT_EQ(str(content[0]["type"]), "thinking");
  EXPECT_EQ(str(content[0]["thinking"]), "Plan.");
  EXPECT_EQ(str(content[1]["type"]), "text");
  EXPECT_EQ(str(content[1]["text"]), "Let me look.\n");  // as the chat content has it
  EXPECT_EQ(str(content[2]["type"]), "tool_use");
  EXPECT_TRUE(str(content[2]["id"]).starts_with("toolu_"));
  EXPECT_EQ(str(content[2]["input"]["path"]), "a.txt");  // an object, not JSON text
  EXPECT_EQ(content[2]["input"]["lines"][1].GetInt(), 2);
  EXPECT_EQ(str(m["stop_reason"]), "tool_use");
  EXPECT_TRUE(m["stop_sequence"].IsNull());
  EXPECT_EQ(m["usage"]["input_tokens"].GetInt(), kPromptTokens - 3);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"].GetInt(), 3);
  EXPECT_EQ(m["usage"]["output_tokens"].GetInt(), 7);
}

TEST(MessagesOutput, StopReasonsForEndLimitAndStopSequence) {
  Script plain{{"Hi"}, false};
  EXPECT_EQ(str(parse(run_translated(std::make_unique<MessagesTranslator>("t"), plain)->response)["stop_reason"]), "end_turn");
  Script cut{{"Hi"}, false};
  cut.finish = FinishReason::kLength;
  EXPECT_EQ(str(parse(run_translated(std::make_unique<MessagesTranslator>("t"), cut)->response)["stop_reason"]), "max_tokens");
  for (bool stream : {false, true}) {
    Script stopped{{"one ", "two ", "EN", "D three"}, stream};
    stopped.stop = {"STOP", "END"};
    auto client = run_translated(std::make_unique<MessagesTranslator>("t"), stopped);
    if (!stream) {
      auto m = parse(client->response);
      EXPECT_EQ(str(m["stop_reason"]), "stop_sequence");
      EXPECT_EQ(str(m["stop_sequence"]), "END");
      EXPECT_EQ(str(m["content"][0]["text"]), "one two ");
    } else {
      auto events = events_of(client->events);
      const auto& delta = events[events.size() - 2].data["delta"];
      EXPECT_EQ(str(delta["stop_reason"]), "stop_sequence");
      EXPECT_EQ(str(delta["stop_sequence"]), "END");
    }
  }
}

TEST(MessagesOutput, StreamedEventSequenceAndReassembledToolInput) {
  Script s{{"<think>", "Plan.", "</think>", "Looking.", "\n<tool_call>", R"({"name": "read", )",
            R"("arguments": {"path": "a.txt"}})", "</tool_call>"},
           true, true, toolcall::Format::kHermes};
  auto client = run_translated(std::make_unique<MessagesTranslator>("tiny"), s);
  EXPECT_TRUE(client->ended);
  auto events = events_of(client->events);
  std::vector<std::string> names = names_of(events);
  // The sequence, with the deltas of each block collapsed.
  std::vector<std::string> collapsed;
  for (const auto& n : names)
    if (collapsed.empty() || n != "content_block_delta" || collapsed.back() != n) collapsed.push_back(n);
  const std::vector<std::string> expected = {
      "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop", "content_block_start",
      "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(collapsed, expected);
  for (const auto& e : events) EXPECT_EQ(str(e.data["type"]), e.name);
  EXPECT_EQ(events[0].data["message"]["usage"]["input_tokens"].GetInt(), kPromptTokens);
  std::map<int, std::string> types;
  std::string thinking, text, partial_json;
  for (const auto& e : events) {
    if (e.name == "content_block_start") types[e.data["index"].GetInt()] = str(e.data["content_block"]["type"]);
    if (e.name != "content_block_delta") continue;
    const auto& d = e.data["delta"];
    if (str(d["type"]) == "thinking_delta") thinking += str(d["thinking"]);
    if (str(d["type"]) == "text_delta") text += str(d["text"]);
    if (str(d["type"]) == "input_json_delta") partial_json += str(d["partial_json"]);
  }
  EXPECT_EQ(types, (std::map<int, std::string>{{0, "thinking"}, {1, "text"}, {2, "tool_use"}}));
  EXPECT_EQ(thinking, "Plan.");
  EXPECT_EQ(text, "Looking.\n");
  EXPECT_EQ(str(parse(partial_json)["path"]), "a.txt");
  const auto& delta = events[events.size() - 2].data;
  EXPECT_EQ(str(delta["delta"]["stop_reason"]), "tool_use");
  EXPECT_EQ(delta["usage"]["output_tokens"].GetInt(), 8);
}

TEST(MessagesOutput, AFailureMidStreamIsAnErrorEvent) {
  Script s{{"Hel"}};
  s.finish = FinishReason::kError;
  auto events = events_of(run_translated(std::make_unique<MessagesTranslator>("t"), s)->events);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "error");
  EXPECT_EQ(str(events.back().data["error"]["type"]), "api_error");
}

TEST(MessagesOutput, AFailureBeforeAnyEventIsAnAnthropicErrorBody) {
  Script s({}, false);
  s.finish = FinishReason::kError;
  auto client = run_translated(std::make_unique<MessagesTranslator>("t"), s);
  EXPECT_EQ(client->status, 500);
  EXPECT_EQ(str(parse(client->response)["error"]["type"]), "api_error");
}

}  // namespace
}  // namespace sluice::server
