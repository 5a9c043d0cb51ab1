// Request bodies under the request JSON limits: deep or wide JSON on any route is a 400 with an
// OpenAI error object naming the limit (before, ~130 000 nested arrays crashed the server).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/request_parser.h"
#include "util/json.h"

using namespace sluice;
using namespace sluice::server;
using ::testing::HasSubstr;

namespace {

RequestDefaults defaults() {
  RequestDefaults d;
  d.max_tokens = 100;
  return d;
}

// A valid tool whose parameters schema nests `depth` arrays deep (tools entries are validated).
std::string deep_tools(std::size_t depth) {
  return R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f",)"
         R"("parameters":{"default":)" + std::string(depth, '[') + std::string(depth, ']') + "}}}]}";
}

// The error's JSON as the client receives it: {"error":{"message","type","param","code"}}.
void expect_openai_400(const ApiError& e, const std::string& limit) {
  EXPECT_EQ(e.status, 400);
  EXPECT_THAT(e.message, HasSubstr("request body"));
  EXPECT_THAT(e.message, HasSubstr(limit));
  auto body = json::parse(e.to_json(), "error body");
  ASSERT_TRUE(body.ok()) << body.message();
  ASSERT_TRUE((*body)["error"].IsObject());
  EXPECT_EQ(std::string((*body)["error"]["type"].GetString()), "invalid_request_error");
  EXPECT_EQ(std::string((*body)["error"]["message"].GetString()), e.message);
}

}  // namespace

TEST(RequestJsonLimits, DeepNestingOnEveryRouteIs400NamingTheLimit) {
  auto chat = parse_chat_request(deep_tools(200000), defaults());
  ASSERT_FALSE(chat.ok());
  expect_openai_400(chat.error(), "max_depth");

  auto completion = parse_completion_request(R"({"prompt":"x","extra":)" + std::string(200000, '[') + "}", defaults());
  ASSERT_FALSE(completion.ok());
  expect_openai_400(completion.error(), "max_depth");

  auto body = parse_body_object(std::string(200000, '['));  // /tokenize, /detokenize, /apply-template
  ASSERT_FALSE(body.ok());
  expect_openai_400(body.error(), "max_depth");
}

TEST(RequestJsonLimits, RealisticNestingIsAccepted) {
  // A tool schema a few dozen levels deep is still far inside the request limit.
  auto r = parse_chat_request(deep_tools(40), defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->tools.IsArray());
}

TEST(RequestJsonLimits, ObjectWithTooManyKeysIs400) {
  std::string body = R"({"messages":[{"role":"user","content":"hi"}],"metadata":{)";
  for (int i = 0; i < 80000; ++i) body += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  body += "}}";
  auto r = parse_chat_request(body, defaults());
  ASSERT_FALSE(r.ok());
  expect_openai_400(r.error(), "max_object_members");
}

TEST(RequestJsonLimits, LongTokenIdPromptIsAccepted) {
  // Arrays stay wide: a prompt of token ids may fill a long context.
  std::string body = R"({"prompt":[)";
  for (int i = 0; i < 200000; ++i) body += (i ? ",1" : "1");
  body += "]}";
  auto r = parse_completion_request(body, defaults());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->prompt_ids.size(), 200000u);
}
