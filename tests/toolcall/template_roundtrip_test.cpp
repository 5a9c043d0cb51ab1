// Each tool-capable chat template in ../shared/chat_templates renders an assistant turn that made two
// calls; the text that turn adds after the generation prompt is what the model writes, and the parser
// of the template's detected format must read the same two calls back from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <rapidjson/document.h>

#include "chat/template.h"
#include "toolcall/tool_call.h"

namespace sluice::toolcall {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
   "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}])";

// How the assistant turn is given to the template. Templates differ: arguments as an object (what
// transformers' examples pass) or a JSON string (what OpenAI clients send); content "" or null; some
// allow one call per turn only. Mistral's templates want 9-character ids.
struct Variant {
  bool string_arguments = false;
  bool null_content = false;
  int calls = 2;
};

std::string render(const chat::Template& t, const Variant* v) {
  rapidjson::Document vars(rapidjson::kObjectType);
  auto& a = vars.GetAllocator();
  rapidjson::Document tools;
  tools.Parse(kTools);
  rapidjson::Value messages(rapidjson::kArrayType);
  rapidjson::Value user(rapidjson::kObjectType);
  user.AddMember("role", "user", a);
  user.AddMember("content", "Weather and time in Paris?", a);
  messages.PushBack(user, a);
  if (v) {
    const char* names[] = {"get_weather", "get_time"};
    const char* args[] = {R"({"city": "Paris"})", R"({"tz": "Europe/Paris"})"};
    const char* ids[] = {"abcDEF123", "xyz789GHI"};
    rapidjson::Value calls(rapidjson::kArrayType);
    for (int i = 0; i < v->calls; ++i) {
      rapidjson::Value function(rapidjson::kObjectType);
      function.AddMember("name", rapidjson::StringRef(names[i]), a);
      if (v->string_arguments) {
        function.AddMember("arguments", rapidjson::StringRef(args[i]), a);
      } else {
        rapidjson::Document object;
        object.Parse(args[i]);
        function.AddMember("arguments", rapidjson::Value(object, a), a);
      }
      rapidjson::Value call(rapidjson::kObjectType);
      call.AddMember("id", rapidjson::StringRef(ids[i]), a);
      call.AddMember("type", "function", a);
      call.AddMember("function", function, a);
      calls.PushBack(call, a);
    }
    rapidjson::Value assistant(rapidjson::kObjectType);
    assistant.AddMember("role", "assistant", a);
    if (v->null_content) assistant.AddMember("content", rapidjson::Value(rapidjson::kNullType), a);
    else assistant.AddMember("content", "", a);
    assistant.AddMember("tool_calls", calls, a);
    messages.PushBack(assistant, a);
  }
  vars.AddMember("messages", messages, a);
  vars.AddMember("tools", rapidjson::Value(tools, a), a);
  vars.AddMember("add_generation_prompt", v == nullptr, a);
  vars.AddMember("bos_token", "", a);
  vars.AddMember("eos_token", "", a);
  auto out = t.render(vars);
  return out ? *out : "ERROR: " + out.message();
}

bool same_json(const std::string& a, const std::string& b) {
  rapidjson::Document x, y;
  x.Parse(a.c_str());
  y.Parse(b.c_str());
  return !x.HasParseError() && !y.HasParseError() && x == y;
}

// The text the assistant turn adds to the conversation: after the part it shares with the generation
// prompt, backed off to a line or tag boundary (a prompt ending "<think>\n" shares "<t" with "<tool_call>").
std::string answer_text(const std::string& prompt, const std::string& full) {
  std::size_t common = 0;
  while (common < prompt.size() && common < full.size() && prompt[common] == full[common]) ++common;
  if (common < prompt.size()) {
    while (common > 0 && prompt[common - 1] != '\n' && prompt[common - 1] != '>') --common;
  }
  return full.substr(common);
}

void check_template(const std::filesystem::path& path, const std::string& source, Format format) {
  SCOPED_TRACE(path.filename().string() + " (" + std::string(format_name(format)) + ")");
  auto t = chat::Template::parse(source);
  ASSERT_TRUE(t.ok()) << t.message();
  const std::string prompt = render(*t, nullptr);
  std::string tried;
  for (int calls : {2, 1}) {
    for (bool string_arguments : {false, true}) {
      for (bool null_content : {false, true}) {
        Variant v{string_arguments, null_content, calls};
        const std::string full = render(*t, &v);
        const std::string answer = full.rfind("ERROR", 0) == 0 ? full : answer_text(prompt, full);
        ParsedOutput got = parse_tool_calls(format, answer);
        if (static_cast<int>(got.calls.size()) != calls) {
          tried += "\n  " + answer.substr(0, 300);
          continue;
        }
        EXPECT_EQ(got.calls[0].name, "get_weather");
        EXPECT_TRUE(same_json(got.calls[0].arguments, R"({"city": "Paris"})")) << got.calls[0].arguments;
        if (calls == 2) {
          EXPECT_EQ(got.calls[1].name, "get_time");
          EXPECT_TRUE(same_json(got.calls[1].arguments, R"({"tz": "Europe/Paris"})")) << got.calls[1].arguments;
        }
        EXPECT_EQ(got.content.find("get_weather"), std::string::npos) << got.content;
        return;
      }
    }
  }
  ADD_FAILURE() << "no rendering of the calls parsed back; the answers were:" << tried;
}

// Templates that cannot show a past call, so there is nothing to read back (their formats are covered
// by the fixtures in parse_fixtures_test.cpp). Each fails the same way under Jinja2 itself.
const std::map<std::string, std::string> kNoHistoryOfCalls = {
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", "renders an assistant turn's content only, never its tool_calls"},
    {"Kimi-K2-Instruct.jinja", "calls list.append, which the sandbox refuses (SecurityError)"},
    {"Kimi-K2-Thinking.jinja", "calls list.append, which the sandbox refuses (SecurityError)"},
    {"llama-cpp-deepseek-r1.jinja", "pipes a map() generator to tojson (written for llama.cpp's minja)"},
};

TEST(TemplateRoundTrip, EachFormatReadsTheCallsItsTemplateWrites) {
  const std::filesystem::path dir = std::filesystem::path(SLUICE_REFERENCE_DIR) / "chat_templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string source = read_all(entry.path());
    const Format format = detect_format(source);
    if (format == Format::kNone) continue;
    if (kNoHistoryOfCalls.contains(entry.path().filename().string())) {
      // Still true? If the template starts rendering calls, it belongs in the check.
      auto t = chat::Template::parse(source);
      ASSERT_TRUE(t.ok());
      const std::string prompt = render(*t, nullptr);
      Variant v;
      EXPECT_LT(parse_tool_calls(format, answer_text(prompt, render(*t, &v))).calls.size(), 2u)
          << entry.path().filename() << " now renders calls: take it off kNoHistoryOfCalls";
      continue;
    }
    check_template(entry.path(), source, format);
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

}  // namespace
}  // namespace sluice::toolcall
