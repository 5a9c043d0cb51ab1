// Every case of the Jinja2 goldens, one test each (named template/case), plus the tiny model's
// conversations: renders must be byte-exact, error cases must fail with Jinja's message text.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "chat_test_util.h"
#include "reference.h"
#include "util/file_io.h"

namespace {

struct GoldenCase {
  std::string template_file;
  std::string name;
  std::string variables;  // JSON text
  std::string rendered;
  std::string error;  // non-empty: Jinja2 raised
  bool is_error = false;
};

std::vector<GoldenCase> load_cases() {
  std::vector<GoldenCase> cases;
  auto path = sluice::test::reference_path("golden/chat_templates_golden.json");
  auto text = sluice::read_text_file(path);
  if (!text) return cases;
  rapidjson::Document doc;
  doc.Parse(text->c_str());
  if (!doc.IsObject() || !doc.HasMember("cases")) return cases;
  for (const auto& c : doc["cases"].GetArray()) {
    GoldenCase g;
    g.template_file = c["template"].GetString();
    g.name = c["case"].GetString();
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    c["variables"].Accept(w);
    g.variables = sb.GetString();
    if (c.HasMember("error")) {
      g.is_error = true;
      g.error = c["error"].GetString();
    } else {
      g.rendered = std::string(c["rendered"].GetString(), c["rendered"].GetStringLength());
    }
    cases.push_back(std::move(g));
  }
  return cases;
}

// Names the case in failure messages instead of dumping bytes.
void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.template_file << " / " << c.name; }

class ChatTemplateGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(ChatTemplateGolden, RendersLikeJinja2) {
  SLUICE_REQUIRE_REFERENCE("golden/chat_templates_golden.json");
  const auto& c = GetParam();
  auto source = sluice::read_text_file(sluice::test::reference_path("chat_templates/" + c.template_file));
  ASSERT_TRUE(source.ok()) << source.message();
  auto tmpl = sluice::chat::Template::parse(*source);
  rapidjson::Document vars;
  vars.Parse(c.variables.c_str());
  if (c.is_error) {
    if (!tmpl) return;  // a syntax error is an error too
    auto r = tmpl->render(vars, sluice::test::golden_clock());
    ASSERT_FALSE(r.ok()) << "expected error: " << c.error;
    // Jinja's message is "<Type>: <text>"; ours must carry the same text.
    std::string text = c.error.substr(c.error.find(": ") + 2);
    EXPECT_NE(r.message().find(text), std::string::npos) << "got: " << r.message() << "\nexpected: " << c.error;
    return;
  }
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  auto r = tmpl->render(vars, sluice::test::golden_clock());
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, c.rendered);
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string n = info.param.template_file.substr(0, info.param.template_file.rfind('.')) + "__" + info.param.name;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Golden, ChatTemplateGolden, ::testing::ValuesIn(load_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ChatTemplateGolden);

TEST(ChatTemplateGolden, GoldenFileHasAllCases) {
  SLUICE_REQUIRE_REFERENCE("golden/chat_templates_golden.json");
  EXPECT_EQ(load_cases().size(), 165u);
}

TEST(ChatTemplateTinyModel, RendersBothConversationsLikeTransformers) {
  SLUICE_REQUIRE_REFERENCE("golden/chat_golden.json");
  auto source = sluice::chat::load_chat_template_source(sluice::test::reference_path("models/tiny-code-qwen2"));
  ASSERT_TRUE(source.ok()) << source.message();
  auto tmpl = sluice::chat::Template::parse(*source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  auto text = sluice::read_text_file(sluice::test::reference_path("golden/chat_golden.json"));
  ASSERT_TRUE(text.ok());
  rapidjson::Document doc;
  doc.Parse(text->c_str());
  ASSERT_TRUE(doc.IsArray());
  ASSERT_EQ(doc.Size(), 2u);
  for (const auto& conv : doc.GetArray()) {
    rapidjson::Document vars;
    vars.SetObject();
    rapidjson::Value messages;
    messages.CopyFrom(conv["messages"], vars.GetAllocator());
    vars.AddMember("messages", messages, vars.GetAllocator());
    vars.AddMember("add_generation_prompt", true, vars.GetAllocator());
    auto r = tmpl->render(vars);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, std::string(conv["rendered"].GetString(), conv["rendered"].GetStringLength()));
  }
}

TEST(ChatTemplateLoad, MissingFolderIsAnError) {
  auto r = sluice::chat::load_chat_template_source("/nonexistent/model");
  EXPECT_FALSE(r.ok());
}

}  // namespace
