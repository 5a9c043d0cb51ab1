#include "server/request_parser.h"

#include <algorithm>

#include <gtest/gtest.h>

using namespace sluice::server;

namespace {

RequestDefaults defaults() {
  RequestDefaults d;
  d.sampling.temperature = 0.6f;
  d.max_tokens = 100;
  return d;
}

const char* kMessages = R"("messages":[{"role":"user","content":"hi"}])";

std::string chat(const std::string& extra) { return std::string("{") + kMessages + (extra.empty() ? "" : "," + extra) + "}"; }

ApiError chat_error(const std::string& extra) {
  auto r = parse_chat_request(chat(extra), defaults());
  EXPECT_FALSE(r.ok()) << extra;
  return r.ok() ? ApiError{} : r.error();
}

}  // namespace

TEST(ChatRequest, MinimalRequestTakesServerDefaults) {
  auto r = parse_chat_request(chat(""), defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->params.max_tokens, 100);
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 0.6f);
  EXPECT_FALSE(r->params.stream);
  ASSERT_TRUE(r->messages.IsArray());
  EXPECT_STREQ(r->messages[0]["content"].GetString(), "hi");
}

TEST(ChatRequest, FieldsAreHonoured) {
  auto r = parse_chat_request(
      chat(R"("model":"x","max_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,)"
           R"("presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"seed":42,)"
           R"("stop":["a","b"],"n":1,"logprobs":true,"top_logprobs":2,"stream":true,)"
           R"("stream_options":{"include_usage":true},"response_format":{"type":"json_object"},"user":"u",)"
           R"("some_unknown_field":{"x":1})"),
      defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& p = r->params;
  EXPECT_EQ(p.model, "x");
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.json_object);
  EXPECT_FALSE(p.json_schema);
  EXPECT_EQ(p.user, "u");
}

TEST(ChatRequest, JsonSchemaIsKeptForTheGrammar) {
  auto r = parse_chat_request(
      chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})"),
      defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->params.json_schema);
  EXPECT_STREQ((*r->params.json_schema)["properties"]["a"]["type"].GetString(), "integer");
  EXPECT_FALSE(r->params.json_object);
}

TEST(ChatRequest, MaxCompletionTokensWinsAndIsClampedToTheServerCeiling) {
  auto r = parse_chat_request(chat(R"("max_tokens":5,"max_completion_tokens":9)"), defaults());
  EXPECT_EQ(r->params.max_tokens, 9);
  auto big = parse_chat_request(chat(R"("max_tokens":100000)"), defaults());
  EXPECT_EQ(big->params.max_tokens, 100);
}

TEST(ChatRequest, StopAsAString) {
  auto r = parse_chat_request(chat(R"("stop":"\n")"), defaults());
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"\n"}));
}

TEST(ChatRequest, ContentAsTextPartsIsFlattened) {
  auto r = parse_chat_request(
      R"({"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
      R"({"role":"developer","content":"d"},{"role":"user","content":"u"},{"role":"assistant","content":"x"},)"
      R"({"role":"tool","content":"t","tool_call_id":"1"}]})",
      defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_STREQ(r->messages[0]["content"].GetString(), "ab");
  EXPECT_STREQ(r->messages[4]["tool_call_id"].GetString(), "1");
}

TEST(ChatRequest, NChoicesUpToTheLimit) {
  auto r = parse_chat_request(chat(R"("n":3)"), defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->params.n, 3);
  EXPECT_EQ(parse_chat_request(chat(""), defaults())->params.n, 1);
  EXPECT_TRUE(parse_chat_request(chat(R"("n":16)"), defaults()).ok());
  for (const char* bad : {R"("n":17)", R"("n":0)", R"("n":-2)", R"("n":"2")", R"("n":1.5)"}) {
    const ApiError e = chat_error(bad);
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "n") << bad;
  }
  auto text = parse_completion_request(R"({"prompt":"x","n":4})", defaults());
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(text->params.n, 4);
}

TEST(ChatRequest, LogitBiasMapsTokenIdStringsToBiases) {
  auto r = parse_chat_request(chat(R"("logit_bias":{"15":-100,"2044":100,"7":0.5,"15":-50})"), defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto bias = r->params.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, 0.5f}, {15, -50.0f}, {2044, 100.0f}}));  // a repeated key: the last
  EXPECT_TRUE(parse_chat_request(chat(R"("logit_bias":null)"), defaults())->params.sampling.logit_bias.empty());
  auto text = parse_completion_request(R"({"prompt":"x","logit_bias":{"50256":-100}})", defaults());
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(text->params.sampling.logit_bias.size(), 1u);
}

TEST(ChatRequest, BadLogitBiasIs400NamingIt) {
  std::string many = R"("logit_bias":{)";
  for (int i = 0; i <= static_cast<int>(CompletionParams::kMaxLogitBias); ++i) many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
  many += "}";
  for (const std::string& bad : {std::string(R"("logit_bias":[1,2])"), std::string(R"("logit_bias":{"abc":1})"),
                                 std::string(R"("logit_bias":{"-3":1})"), std::string(R"("logit_bias":{"":1})"),
                                 std::string(R"("logit_bias":{"99999999999":1})"), std::string(R"("logit_bias":{"5":101})"),
                                 std::string(R"("logit_bias":{"5":-100.5})"), std::string(R"("logit_bias":{"5":"high"})"), many}) {
    const ApiError e = chat_error(bad);
    EXPECT_EQ(e.status, 400) << bad.substr(0, 60);
    EXPECT_EQ(e.param, "logit_bias") << bad.substr(0, 60);
  }
}

TEST(ChatRequest, InvalidRequestsAre400WithTheParam) {
  EXPECT_EQ(chat_error(R"("n":0)").param, "n");
  EXPECT_EQ(chat_error(R"("temperature":"hot")").param, "temperature");
  EXPECT_EQ(chat_error(R"("temperature":3)").param, "temperature");
  EXPECT_EQ(chat_error(R"("max_tokens":0)").param, "max_tokens");
  EXPECT_EQ(chat_error(R"("stop":[1])").param, "stop");
  EXPECT_EQ(chat_error(R"("response_format":{"type":"json_schema","json_schema":{}})").param, "response_format.json_schema.name");
  EXPECT_EQ(chat_error(R"("response_format":{"type":"json_schema","json_schema":{"name":"a","schema":3}})").param,
            "response_format.json_schema.schema");
  EXPECT_EQ(chat_error(R"("response_format":{"type":"json_schema","json_schema":{"name":"a","strict":"yes"}})").param,
            "response_format.json_schema.strict");
  EXPECT_EQ(chat_error(R"("response_format":{"type":"yaml"})").param, "response_format");
  EXPECT_EQ(chat_error(R"("stream":"yes")").param, "stream");
  EXPECT_EQ(chat_error(R"("top_logprobs":3)").param, "top_logprobs");
  EXPECT_EQ(chat_error(R"("seed":"x")").param, "seed");
}

TEST(ChatRequest, BadMessagesAre400) {
  auto d = defaults();
  EXPECT_FALSE(parse_chat_request("{}", d).ok());
  EXPECT_FALSE(parse_chat_request(R"({"messages":[]})", d).ok());
  EXPECT_FALSE(parse_chat_request(R"({"messages":[{"role":"wizard","content":"x"}]})", d).ok());
  EXPECT_FALSE(parse_chat_request(R"({"messages":[{"role":"user"}]})", d).ok());
  EXPECT_FALSE(parse_chat_request(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", d).ok());
  EXPECT_TRUE(parse_chat_request(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[]}]})", d).ok());
}

TEST(ChatRequest, MalformedJsonIs400) {
  auto r = parse_chat_request("{not json", defaults());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 400);
  EXPECT_FALSE(parse_chat_request("[1,2]", defaults()).ok());
  EXPECT_FALSE(parse_chat_request("", defaults()).ok());
}

TEST(CompletionRequest, PromptAsStringOrTokenIds) {
  auto s = parse_completion_request(R"({"prompt":"def f"})", defaults());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s->prompt_text, "def f");
  auto ids = parse_completion_request(R"({"prompt":[1,2,3]})", defaults());
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto batch1 = parse_completion_request(R"({"prompt":[[4,5]]})", defaults());
  ASSERT_TRUE(batch1.ok());
  EXPECT_EQ(batch1->prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_FALSE(parse_completion_request(R"({"prompt":["a","b"]})", defaults()).ok());
  EXPECT_FALSE(parse_completion_request(R"({"prompt":[]})", defaults()).ok());
  EXPECT_FALSE(parse_completion_request(R"({"prompt":7})", defaults()).ok());
  EXPECT_FALSE(parse_completion_request(R"({})", defaults()).ok());
}

TEST(CompletionRequest, LogprobsIsAnIntegerHere) {
  auto r = parse_completion_request(R"({"prompt":"x","logprobs":3,"echo":true})", defaults());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->params.logprobs);
  EXPECT_EQ(r->params.top_logprobs, 3);
  EXPECT_TRUE(r->echo);
}

TEST(CompletionRequest, TimeoutBecomesADeadline) {
  auto r = parse_completion_request(R"({"prompt":"x","timeout":2.5})", defaults());
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(*r->params.timeout_s, 2.5);
}

// Every optional flag is checked like the rest: a wrong type is a 400 naming it, not silently "absent".
TEST(ChatRequest, AddGenerationPromptOfTheWrongTypeIs400) {
  for (const char* value : {R"("x")", "1", "[]", "{}"}) {
    ApiError e = chat_error(std::string(R"("add_generation_prompt":)") + value);
    EXPECT_EQ(e.status, 400) << value;
    EXPECT_EQ(e.param, "add_generation_prompt") << value;
  }
  auto off = parse_chat_request(chat(R"("add_generation_prompt":false)"), defaults());
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->add_generation_prompt, std::optional<bool>(false));
  auto null = parse_chat_request(chat(R"("add_generation_prompt":null)"), defaults());
  ASSERT_TRUE(null.ok());
  EXPECT_FALSE(null->add_generation_prompt.has_value());
}

TEST(CompletionRequest, EchoOfTheWrongTypeIs400) {
  for (const char* value : {R"("x")", "0", "[true]"}) {
    auto r = parse_completion_request(std::string(R"({"prompt":"x","echo":)") + value + "}", defaults());
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, "echo");
  }
  auto r = parse_completion_request(R"({"prompt":"x","echo":null})", defaults());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->echo);
}

TEST(OptionalBoolean, AbsentNullTrueFalseOrA400) {
  rapidjson::Document doc;
  doc.Parse(R"({"t":true,"f":false,"n":null,"s":"true"})");
  EXPECT_EQ(*optional_boolean(doc, "t"), std::optional<bool>(true));
  EXPECT_EQ(*optional_boolean(doc, "f"), std::optional<bool>(false));
  EXPECT_FALSE(optional_boolean(doc, "n")->has_value());
  EXPECT_FALSE(optional_boolean(doc, "absent")->has_value());
  auto s = optional_boolean(doc, "s");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().status, 400);
  EXPECT_EQ(s.error().param, "s");
}
