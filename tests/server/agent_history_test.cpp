// An agent's history (assistant content null + tool_calls, then a tool message) renders through
// every real chat template that mentions tool_calls, spelled the way its probe chose, byte-exactly
// as Jinja2 renders that spelling (tests/server/data/agent_replay_golden.json, from
// make_agent_replay_golden.py). A template the probe finds unable to show a call is skipped only
// when Jinja2 cannot show it in any spelling either.
#include <filesystem>

#include <gtest/gtest.h>

#include "server_goldens.h"
#include <rapidjson/document.h>

#include "../chat/chat_test_util.h"
#include "reference.h"
#include "server/chat_prompt.h"
#include "server/request_parser.h"
#include "util/file_io.h"
#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

namespace {

const rapidjson::Document& golden() {
  static const rapidjson::Document doc = test_fakes::load_golden("agent_replay_golden.json");
  return doc;
}

std::vector<std::string> tool_templates() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(test::reference_path("chat_templates"), ec)) {
    if (entry.path().extension() != ".jinja") continue;
    auto source = read_text_file(entry.path());
    if (source && source->find("tool_calls") != std::string::npos) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string form_key(const ChatHistoryForm& form) {
  return std::string(form.arguments_as_object ? "object" : "string") + "/" + (form.null_content ? "null" : "empty");
}

// Jinja2 showed the call in this spelling: it rendered, with the function name and the arguments
// (their value when objects; the untouched JSON text when strings).
bool jinja_shows_call(const rapidjson::Value& form, bool as_object) {
  if (!form.HasMember("rendered")) return false;
  std::string text = form["rendered"].GetString();
  const char* needle = as_object ? "Paris" : R"({"city": "Paris", "unit": "celsius"})";
  return text.find("get_weather") != std::string::npos && text.find(needle) != std::string::npos;
}

class AgentHistoryReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(AgentHistoryReplay, RendersLikeJinja2InTheSpellingTheTemplateTakes) {
  const std::string name = GetParam();
  ASSERT_TRUE(golden().IsObject()) << "tests/server/data/agent_replay_golden.json is missing or not JSON";
  const auto& templates = golden()["templates"];
  ASSERT_TRUE(templates.HasMember(name.c_str()))
      << name << " has no golden: rerun tests/server/make_agent_replay_golden.py";
  const auto& entry = templates[name.c_str()];
  auto source = read_text_file(test::reference_path("chat_templates/" + name));
  ASSERT_TRUE(source.ok()) << source.message();
  auto prompt = ChatPrompt::from_source(*source, entry["bos_token"].GetString(), entry["eos_token"].GetString(),
                                        std::nullopt);
  ASSERT_TRUE(prompt.ok()) << prompt.message();
  prompt->fix_clock(test::golden_clock());
  const ChatHistoryForm& form = prompt->history_form();

  if (!form.renders_tool_calls) {
    for (bool as_object : {true, false})
      for (const char* content : {"null", "empty"}) {
        std::string key = std::string(as_object ? "object" : "string") + "/" + content;
        EXPECT_FALSE(jinja_shows_call(entry["forms"][key.c_str()], as_object))
            << name << ": our probe found no spelling that shows a call, but Jinja2 shows one as " << key;
      }
    GTEST_SKIP() << name << " cannot render a tool call (Jinja2 agrees): " << form.probe_failure;
  }

  // The request path: OpenAI messages validated and normalised, then rendered with the tools.
  rapidjson::Document normalized;
  ASSERT_FALSE(normalize_messages(golden()["messages"], normalized).has_value());
  auto rendered = prompt->render(normalized, &golden()["tools"], /*add_generation_prompt=*/true);
  ASSERT_TRUE(rendered.ok()) << name << " as " << form_key(form) << ": " << rendered.message();
  const auto& expected = entry["forms"][form_key(form).c_str()];
  ASSERT_TRUE(expected.HasMember("rendered")) << name << ": Jinja2 failed as " << form_key(form) << ": "
                                              << expected["error"].GetString();
  EXPECT_EQ(*rendered, std::string(expected["rendered"].GetString(), expected["rendered"].GetStringLength()))
      << name << " as " << form_key(form);
  EXPECT_NE(rendered->find("18 degrees, sunny"), std::string::npos) << name << ": the tool's answer is missing";
}

INSTANTIATE_TEST_SUITE_P(ToolTemplates, AgentHistoryReplay, ::testing::ValuesIn(tool_templates()),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.size() - 6);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AgentHistoryReplay);

TEST(AgentHistoryReplay, TheToolTemplatesAreFound) {
  SLUICE_REQUIRE_REFERENCE("chat_templates");
  // Guards the parameterised suite against an empty or mislocated template folder.
  EXPECT_GE(tool_templates().size(), 40u);
}

// The spelling each kind of template takes, as its probe finds it.
ChatHistoryForm form_of(const std::string& template_file) {
  auto source = read_text_file(test::reference_path("chat_templates/" + template_file));
  EXPECT_TRUE(source.ok()) << source.message();
  auto prompt = ChatPrompt::from_source(source.ok() ? *source : "", "", "", std::nullopt);
  EXPECT_TRUE(prompt.ok()) << prompt.message();
  return prompt.ok() ? prompt->history_form() : ChatHistoryForm{};
}

TEST(ChatHistoryForm, EachTemplateGetsTheSpellingItCanRender) {
  SLUICE_REQUIRE_REFERENCE("chat_templates");
  // Qwen3 tests `'</think>' in content`: a null content fails there, so "" it is; arguments via tojson.
  auto qwen3 = form_of("Qwen-Qwen3-0.6B.jinja");
  EXPECT_TRUE(qwen3.renders_tool_calls);
  EXPECT_TRUE(qwen3.arguments_as_object);
  EXPECT_FALSE(qwen3.null_content);
  // GLM iterates the arguments' items and takes a null content as transformers passes it.
  auto glm = form_of("GLM-4.6.jinja");
  EXPECT_TRUE(glm.arguments_as_object);
  EXPECT_TRUE(glm.null_content);
  // Functionary v3.2 concatenates the arguments as a string.
  EXPECT_FALSE(form_of("meetkai-functionary-medium-v3.2.jinja").arguments_as_object);
  // DeepSeek-R1-Distill-Llama prints calls only when content is none, and concatenates arguments.
  auto r1 = form_of("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja");
  EXPECT_TRUE(r1.renders_tool_calls);
  EXPECT_FALSE(r1.arguments_as_object);
  EXPECT_TRUE(r1.null_content);
}

TEST(ChatHistoryForm, ATemplateThatIgnoresToolCallsStillRendersContentNullAsEmpty) {
  // The bundled model's template concatenates content: null would be a TypeError.
  const std::string source =
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}";
  auto prompt = ChatPrompt::from_source(source, "", "", std::nullopt);
  ASSERT_TRUE(prompt.ok()) << prompt.message();
  EXPECT_FALSE(prompt->history_form().renders_tool_calls);
  EXPECT_FALSE(prompt->history_form().null_content);
  rapidjson::Document normalized;
  ASSERT_TRUE(golden().IsObject());
  ASSERT_FALSE(normalize_messages(golden()["messages"], normalized).has_value());
  auto rendered = prompt->render(normalized, nullptr, true);
  ASSERT_TRUE(rendered.ok()) << rendered.message();
  EXPECT_NE(rendered->find("<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n18 degrees, sunny"), std::string::npos)
      << *rendered;
}

TEST(ChatHistoryForm, MalformedArgumentsStayTheStringTheyWere) {
  rapidjson::Document messages;
  messages.Parse(R"([{"role":"assistant","content":null,"tool_calls":[
      {"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1"}},
      {"id":"b","type":"function","function":{"name":"g","arguments":"{\"y\": [2]}"}}]}])");
  ASSERT_FALSE(messages.HasParseError());
  auto spelled = apply_chat_history_form(messages, ChatHistoryForm{true, false, true, {}});
  const auto& calls = spelled[0]["tool_calls"];
  EXPECT_TRUE(calls[0]["function"]["arguments"].IsString());
  ASSERT_TRUE(calls[1]["function"]["arguments"].IsObject());
  EXPECT_EQ(calls[1]["function"]["arguments"]["y"][0].GetInt(), 2);
  EXPECT_STREQ(spelled[0]["content"].GetString(), "");
}

// A wrong type anywhere in the history is a 400 whose param names the field.
std::string message_error_param(const std::string& messages_json) {
  rapidjson::Document messages, out;
  messages.Parse(messages_json.c_str());
  EXPECT_FALSE(messages.HasParseError()) << messages_json;
  auto err = normalize_messages(messages, out);
  EXPECT_TRUE(err.has_value()) << messages_json;
  if (!err) return "";
  EXPECT_EQ(err->status, 400);
  EXPECT_NE(err->message.find(err->param), std::string::npos) << err->message;
  return err->param;
}

TEST(ChatMessages, WrongTypesAre400NamingTheField) {
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":null}])"), "messages[0].content");
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":5}])"), "messages[0].content");
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":"a"},{"role":"assistant","content":null,
      "tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":{"x":1}}}]}])"),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(message_error_param(R"([{"role":"assistant","tool_calls":[{"id":"1","function":{"arguments":"{}"}}]}])"),
            "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(message_error_param(R"([{"role":"assistant","tool_calls":[{"type":"code","function":{"name":"f","arguments":"{}"}}]}])"),
            "messages[0].tool_calls[0].type");
  EXPECT_EQ(message_error_param(R"([{"role":"assistant","tool_calls":[{"id":7,"function":{"name":"f","arguments":"{}"}}]}])"),
            "messages[0].tool_calls[0].id");
  EXPECT_EQ(message_error_param(R"([{"role":"assistant","tool_calls":{"id":"1"}}])"), "messages[0].tool_calls");
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":"x","tool_calls":[{"id":"1"}]}])"), "messages[0].tool_calls");
  EXPECT_EQ(message_error_param(R"([{"role":"tool","content":"x"}])"), "messages[0].tool_call_id");
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":"x","name":3}])"), "messages[0].name");
  EXPECT_EQ(message_error_param(R"([{"role":"user","content":[{"type":"image_url"}]}])"), "messages[0].content[0]");
  EXPECT_EQ(message_error_param(R"([{"role":"wizard","content":"x"}])"), "messages[0].role");
}

TEST(ChatMessages, TheOpenAIFormsAreAccepted) {
  rapidjson::Document messages, out;
  messages.Parse(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"ann"},
      {"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}},
                                        {"id":"c2","type":null,"function":{"name":"g","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"r"},
      {"role":"assistant","content":"done","tool_calls":null}])");
  ASSERT_FALSE(normalize_messages(messages, out).has_value());
  EXPECT_STREQ(out[0]["content"].GetString(), "ab");
  EXPECT_TRUE(out[1]["content"].IsNull());                                  // absent → null, spelled per template later
  EXPECT_STREQ(out[1]["tool_calls"][0]["type"].GetString(), "function");  // defaulted
  EXPECT_STREQ(out[1]["tool_calls"][1]["type"].GetString(), "function");  // null too
  EXPECT_EQ(out[1]["tool_calls"][1].MemberCount(), 3u);                    // and not a second key
  EXPECT_STREQ(out[1]["tool_calls"][0]["function"]["arguments"].GetString(), "{}");
  EXPECT_FALSE(out[3].HasMember("tool_calls"));                             // null calls dropped
}

}  // namespace
