// chat_template_kwargs, enable_thinking and reasoning_effort reach the template from a request body,
// the server's --thinking is the default, and the renders match Jinja2's with the same variables
// (tests/server/data/template_controls_golden.json, from make_agent_replay_golden.py).
#include <gtest/gtest.h>

#include "server_goldens.h"
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "../chat/chat_test_util.h"
#include "reference.h"
#include "server/chat_prompt.h"
#include "server/request_parser.h"
#include "util/file_io.h"

using namespace sluice;
using namespace sluice::server;

namespace {

const rapidjson::Document& golden() {
  static const rapidjson::Document doc = test_fakes::load_golden("template_controls_golden.json");
  return doc;
}

std::string to_json(const rapidjson::Value& v) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  v.Accept(w);
  return b.GetString();
}

const rapidjson::Value* find_case(const char* tmpl, const std::string& variables_json) {
  for (const auto& c : golden()["cases"].GetArray())
    if (std::string(c["template"].GetString()) == tmpl && to_json(c["variables"]) == variables_json) return &c;
  return nullptr;
}

// Renders `body_fields` (JSON members after "messages") for the golden's conversation through the
// request parser and the template, as the server does.
std::string render_request(const char* tmpl, const std::string& body_fields, std::optional<bool> server_default) {
  const rapidjson::Value* any = find_case(tmpl, "{}");
  if (!any) return "no golden case for " + std::string(tmpl);
  auto source = read_text_file(test::reference_path(std::string("chat_templates/") + tmpl));
  if (!source) return source.message();
  auto prompt = ChatPrompt::from_source(*source, (*any)["bos_token"].GetString(), (*any)["eos_token"].GetString(),
                                        server_default);
  if (!prompt) return prompt.message();
  prompt->fix_clock(test::golden_clock());
  std::string body = R"({"messages":)" + to_json(golden()["messages"]) + (body_fields.empty() ? "" : ",") + body_fields + "}";
  RequestDefaults defaults;
  auto request = parse_chat_request(body, defaults);
  if (!request) return "400: " + request.error().message;
  auto rendered = prompt->render(request->messages, nullptr, true, &request->template_controls);
  return rendered ? *rendered : "render error: " + rendered.message();
}

std::string expected(const char* tmpl, const std::string& variables_json) {
  const rapidjson::Value* c = find_case(tmpl, variables_json);
  return c ? std::string((*c)["rendered"].GetString(), (*c)["rendered"].GetStringLength()) : "missing golden case";
}

constexpr const char* kQwen3 = "Qwen-Qwen3-0.6B.jinja";
constexpr const char* kGptOss = "openai-gpt-oss-120b.jinja";

class TemplateControls : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_REFERENCE("chat_templates");
    ASSERT_TRUE(golden().IsObject()) << "tests/server/data/template_controls_golden.json is missing";
  }
};

TEST_F(TemplateControls, EnableThinkingFalseClosesQwen3sThinkBlockAsJinja2Does) {
  const std::string off = expected(kQwen3, R"({"enable_thinking":false})");
  ASSERT_NE(off, expected(kQwen3, "{}"));  // the point: the variable changes the prompt
  EXPECT_EQ(render_request(kQwen3, R"("enable_thinking":false)", std::nullopt), off);
  EXPECT_EQ(render_request(kQwen3, R"("chat_template_kwargs":{"enable_thinking":false})", std::nullopt), off);
  EXPECT_EQ(render_request(kQwen3, "", std::nullopt), expected(kQwen3, "{}"));
  EXPECT_EQ(render_request(kQwen3, R"("enable_thinking":true)", std::nullopt), expected(kQwen3, R"({"enable_thinking":true})"));
}

TEST_F(TemplateControls, TheServerDefaultAppliesUnlessTheRequestSays) {
  EXPECT_EQ(render_request(kQwen3, "", /*server_default=*/false), expected(kQwen3, R"({"enable_thinking":false})"));
  EXPECT_EQ(render_request(kQwen3, R"("enable_thinking":true)", false), expected(kQwen3, R"({"enable_thinking":true})"));
  // The top-level field wins over the same key in chat_template_kwargs.
  EXPECT_EQ(render_request(kQwen3, R"("enable_thinking":true,"chat_template_kwargs":{"enable_thinking":false})", false),
            expected(kQwen3, R"({"enable_thinking":true})"));
}

TEST_F(TemplateControls, ReasoningEffortAndCustomKwargsReachGptOss) {
  const std::string low = expected(kGptOss, R"({"reasoning_effort":"low"})");
  ASSERT_NE(low, expected(kGptOss, "{}"));
  EXPECT_EQ(render_request(kGptOss, R"("reasoning_effort":"low")", std::nullopt), low);
  EXPECT_EQ(render_request(kGptOss, R"("reasoning_effort":"high","chat_template_kwargs":{"model_identity":"You are a tiny test model."})",
                           std::nullopt),
            expected(kGptOss, R"({"reasoning_effort":"high","model_identity":"You are a tiny test model."})"));
}

std::string controls_error_param(const std::string& fields) {
  RequestDefaults defaults;
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],)" + fields + "}", defaults);
  EXPECT_FALSE(r.ok()) << fields;
  return r.ok() ? "" : r.error().param;
}

TEST(TemplateControlsRequest, WrongTypesAndReservedNamesAre400NamingTheField) {
  EXPECT_EQ(controls_error_param(R"("chat_template_kwargs":[1])"), "chat_template_kwargs");
  EXPECT_EQ(controls_error_param(R"("chat_template_kwargs":{"messages":[]})"), "chat_template_kwargs.messages");
  EXPECT_EQ(controls_error_param(R"("chat_template_kwargs":{"bos_token":"x"})"), "chat_template_kwargs.bos_token");
  EXPECT_EQ(controls_error_param(R"("chat_template_kwargs":{"enable_thinking":"no"})"), "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(controls_error_param(R"("chat_template_kwargs":{"not a name":1})"), "chat_template_kwargs.not a name");
  EXPECT_EQ(controls_error_param(R"("enable_thinking":"false")"), "enable_thinking");
  EXPECT_EQ(controls_error_param(R"("reasoning_effort":"extreme")"), "reasoning_effort");
  EXPECT_EQ(controls_error_param(R"("reasoning_effort":3)"), "reasoning_effort");
  std::string many = R"("chat_template_kwargs":{)";
  for (std::size_t i = 0; i <= kMaxTemplateKwargs; ++i) many += (i ? "," : "") + std::string("\"v") + std::to_string(i) + "\":1";
  EXPECT_EQ(controls_error_param(many + "}"), "chat_template_kwargs");
}

}  // namespace
