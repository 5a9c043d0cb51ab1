// Realistic outputs of each family (written the way their templates render calls), parsed whole,
// byte by byte and in small pieces.
#include <rapidjson/document.h>

#include "fixture_check.h"

namespace sluice::toolcall::testing {
namespace {

const ToolCall kWeather{"get_weather", R"({"city": "Paris", "unit": "celsius"})"};
const ToolCall kTime{"get_time", R"({"tz": "Europe/Paris"})"};

TEST(HermesFormat, PlainTextPassesThrough) {
  expect_parse(Format::kHermes, "The weather is <b>nice</b> today; 3 < 4.", {"The weather is <b>nice</b> today; 3 < 4.", {}});
}

TEST(HermesFormat, OneCall) {
  expect_parse(Format::kHermes,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
               {"", {kWeather}});
}

TEST(HermesFormat, TextThenSeveralCalls) {
  expect_parse(Format::kHermes,
               "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
               "\"Europe/Paris\"}}\n</tool_call>",
               {"Let me check both.\n", {kWeather, kTime}});
}

TEST(HermesFormat, NestedArgumentsWithBracesInStrings) {
  expect_parse(Format::kHermes,
               R"(<tool_call>{"name": "write", "arguments": {"path": "a}.txt", "body": {"x": [1, {"y": "\"}"}]}}}</tool_call>)",
               {"", {{"write", R"({"path": "a}.txt", "body": {"x": [1, {"y": "\"}"}]}})"}}});
}

TEST(HermesFormat, MalformedCallsStayText) {
  expect_parse(Format::kHermes, "<tool_call>not json</tool_call> ok", {"<tool_call>not json</tool_call> ok", {}});
  expect_parse(Format::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>", {"<tool_call>{\"arguments\": {}}</tool_call>", {}});
  expect_parse(Format::kHermes, "<tool_call>{\"name\": 42, \"arguments\": {}}</tool_call>",
               {"<tool_call>{\"name\": 42, \"arguments\": {}}</tool_call>", {}});
  // A bad block does not hide a good one after it.
  expect_parse(Format::kHermes,
               "<tool_call>oops</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}</tool_call>",
               {"<tool_call>oops</tool_call>", {kTime}});
}

TEST(HermesFormat, UnterminatedOutputs) {
  // Cut before the name is known: text.
  expect_parse(Format::kHermes, "Sure. <tool_call>\n{\"name\": \"get_wea", {"Sure. <tool_call>\n{\"name\": \"get_wea", {}});
  expect_parse(Format::kHermes, "Sure. <tool_ca", {"Sure. <tool_ca", {}});
  // Cut inside the arguments (max_tokens): the call keeps what it has, as OpenAI does.
  expect_parse(Format::kHermes, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
               {"", {{"get_weather", "{\"city\": \"Par"}}});
}

TEST(Llama3Format, BareJsonAnswerIsACall) {
  expect_parse(Format::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
               {"", {kWeather}});
  expect_parse(Format::kLlama3,
               "\n{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
               {"", {kTime}});
}

TEST(Llama3Format, PythonTagAndSeveralCalls) {
  expect_parse(Format::kLlama3,
               "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}; "
               "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Europe/Paris\"}}",
               {"", {kWeather, kTime}});
}

TEST(Llama3Format, JsonLaterInTheAnswerOrNotACallIsText) {
  expect_parse(Format::kLlama3, "Here: {\"name\": \"x\", \"parameters\": {}}", {"Here: {\"name\": \"x\", \"parameters\": {}}", {}});
  expect_parse(Format::kLlama3, "{\"answer\": 42}", {"{\"answer\": 42}", {}});
  expect_parse(Format::kLlama3, "<|python_tag|>print(1)", {"<|python_tag|>print(1)", {}});
  expect_parse(Format::kLlama3, "The answer is 4.", {"The answer is 4.", {}});
}

TEST(MistralFormat, JsonArrayForm) {
  expect_parse(Format::kMistral,
               "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}, "
               "\"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]",
               {"", {kWeather, kTime}});
}

TEST(MistralFormat, NameArgsForm) {
  expect_parse(Format::kMistral,
               "I'll look.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}[TOOL_CALLS]get_time"
               "[CALL_ID]x9y8z7w6v[ARGS]{\"tz\": \"Europe/Paris\"}",
               {"I'll look.", {kWeather, kTime}});
}

TEST(MistralFormat, MalformedAndCut) {
  expect_parse(Format::kMistral, "[TOOL_CALLS]get weather", {"[TOOL_CALLS]get weather", {}});
  expect_parse(Format::kMistral, "[TOOL_CALLS][{\"name\": ", {"[TOOL_CALLS][{\"name\": ", {}});
  expect_parse(Format::kMistral, "plain [TOOLS] text", {"plain [TOOLS] text", {}});
}

TEST(GraniteFormat, ListAfterMarker) {
  expect_parse(Format::kGranite,
               "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}, "
               "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]",
               {"", {kWeather, kTime}});
  expect_parse(Format::kGranite, "<|tool_call|>sorry", {"<|tool_call|>sorry", {}});
}

TEST(JsonListFormats, AprielAndNemotronCloseTheirList) {
  expect_parse(Format::kApriel,
               "Checking.\n<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
               "\"celsius\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]</tool_calls>",
               {"Checking.\n", {kWeather, kTime}});
  expect_parse(Format::kNemotron,
               "<TOOLCALL>[{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]</TOOLCALL> then text",
               {" then text", {kTime}});
  expect_parse(Format::kNemotron, "<TOOLCALL>[oops]</TOOLCALL>", {"<TOOLCALL>[oops]</TOOLCALL>", {}});
}

TEST(DeepSeekFormat, V3FencedJson) {
  expect_parse(Format::kDeepSeek,
               "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
               "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
               "<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"Europe/Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {"Checking.", {kWeather, kTime}});
}

TEST(DeepSeekFormat, V31NameSepJson) {
  expect_parse(Format::kDeepSeek,
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"unit\": "
               "\"celsius\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"Europe/Paris\"}"
               "<｜tool▁call▁end｜><｜tool▁calls▁end｜>Done",
               {"Done", {kWeather, kTime}});
  expect_parse(Format::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather",
               {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather", {}});
}

TEST(KimiFormat, SectionOfCalls) {
  expect_parse(Format::kKimi,
               "Let me see. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
               "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|tool_call_end|>"
               "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"Europe/Paris\"}"
               "<|tool_call_end|><|tool_calls_section_end|>",
               {"Let me see. ", {kWeather, kTime}});
}

TEST(HarmonyFormat, AnalysisThenCall) {
  expect_parse(Format::kHarmony,
               "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|call|>",
               {"Need the weather.", {kWeather}});
}

TEST(HarmonyFormat, RecipientInRoleHeaderAndFinalText) {
  expect_parse(Format::kHarmony,
               "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"tz\": \"Europe/Paris\"}",
               {"", {kTime}});
  expect_parse(Format::kHarmony, "<|channel|>final<|message|>It is sunny.<|return|>", {"It is sunny.", {}});
  // Right after the prompt's <|start|>assistant the recipient can come first.
  expect_parse(Format::kHarmony, " to=functions.get_time<|channel|>commentary json<|message|>{\"tz\": \"Europe/Paris\"}<|call|>",
               {"", {kTime}});
  // Only there: later in an answer it is text.
  expect_parse(Format::kHarmony, "<|channel|>final<|message|>write to=functions.x<|channel|>", {"write to=functions.x<|channel|>", {}});
}

TEST(Gemma4Format, ObjectNotationBecomesJson) {
  expect_parse(Format::kGemma4,
               "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>"
               "<|tool_call>call:set_alarm{at:7,days:[<|\"|>mon<|\"|>,<|\"|>tue<|\"|>],loud:true}<tool_call|>",
               {"", {{"get_weather", R"({"city":"Paris","unit":"celsius"})"},
                     {"set_alarm", R"({"at":7,"days":["mon","tue"],"loud":true})"}}});
  expect_parse(Format::kGemma4, "<|tool_call>call:get_weather{city:<|\"|>Par",
               {"", {{"get_weather", R"({"city":"Par")"}}});
}

TEST(QwenXmlFormat, ParametersBecomeJson) {
  expect_parse(Format::kQwenXml,
               "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
               "<parameter=tz>\nEurope/Paris\n</parameter>\n</function>\n</tool_call>",
               {"I'll check.\n", {{"get_weather", R"({"city": "Paris", "days": 3})"}, kTime}});
  expect_parse(Format::kQwenXml, "<tool_call>\n{\"name\": \"x\"}</tool_call>", {"<tool_call>\n{\"name\": \"x\"}</tool_call>", {}});
}

TEST(QwenXmlFormat, DeclaredTypesDecideBareValues) {
  rapidjson::Document tools;
  tools.Parse(R"([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
      "properties": {"zip": {"type": "string"}, "count": {"type": "integer"}, "flags": {"type": ["array", "null"]},
      "note": {"type": "number"}}}}}])");
  ArgumentTypes types = ArgumentTypes::from_tools(tools);
  EXPECT_EQ(types.type_of("lookup", "flags"), "array");
  EXPECT_EQ(types.type_of("lookup", "other"), "");
  const std::string text =
      "<tool_call>\n<function=lookup>\n<parameter=zip>\n12345\n</parameter>\n<parameter=count>\n7\n</parameter>\n"
      "<parameter=flags>\n[\"a\"]\n</parameter>\n<parameter=note>\nnot a number\n</parameter>\n"
      "<parameter=free>\ntrue\n</parameter>\n</function>\n</tool_call>";
  ParsedOutput got = parse_tool_calls(Format::kQwenXml, text, {}, types);
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.calls[0].arguments,
            R"({"zip": "12345", "count": 7, "flags": ["a"], "note": "not a number", "free": true})");
  // A string declared as a string stays one even when it reads as a number.
  ParsedOutput untyped = parse_tool_calls(Format::kQwenXml, text);
  EXPECT_NE(untyped.calls[0].arguments, got.calls[0].arguments);
}

TEST(SeedXmlFormat, SeedWrapper) {
  expect_parse(Format::kSeedXml,
               "<seed:tool_call>\n<function=get_time>\n<parameter=tz>Europe/Paris</parameter>\n</function>\n"
               "</seed:tool_call>",
               {"", {kTime}});
}

TEST(GlmFormat, KeyValueTags) {
  expect_parse(Format::kGlm,
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n"
               "<arg_value>celsius</arg_value>\n</tool_call><tool_call>get_time\n<arg_key>tz</arg_key>\n"
               "<arg_value>Europe/Paris</arg_value>\n</tool_call>",
               {"", {kWeather, kTime}});
  expect_parse(Format::kGlm, "<tool_call>list_files</tool_call>", {"", {{"list_files", "{}"}}});
}

TEST(MalformedCalls, EachFamilyKeepsTextThatIsNotACall) {
  // No name, no arguments, or the wrong framing: the text comes back as it was.
  const std::pair<Format, std::string> cases[] = {
      {Format::kKimi, "<|tool_calls_section_begin|><|tool_call_begin|><|tool_call_argument_begin|>{}<|tool_call_end|>"},
      {Format::kKimi, "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>oops"},
      {Format::kHarmony, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json"},
      {Format::kGemma4, "<|tool_call>get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"},
      {Format::kGemma4, "<|tool_call>call:{}<tool_call|>"},
      {Format::kGlm, "<tool_call>{\"name\": \"f\"}</tool_call>"},
      {Format::kDeepSeek, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\nnot fenced<｜tool▁call▁end｜>"},
      {Format::kMistral, "[TOOL_CALLS]f[ARGS]not json"},
      {Format::kApriel, "<tool_calls>{\"name\": \"f\"}</tool_calls>"},
      {Format::kSeedXml, "<seed:tool_call><function>x</function></seed:tool_call>"},
  };
  for (const auto& [format, text] : cases) expect_parse(format, text, {text, {}});
}

TEST(NoFormat, TextIsText) {
  expect_parse(Format::kNone, "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>",
               {"<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>", {}});
}

}  // namespace
}  // namespace sluice::toolcall::testing
