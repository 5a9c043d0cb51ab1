// Which call syntax a chat template teaches: each family's template writes its own markers, either
// to render earlier calls or to tell the model how to call. Checked from the most specific markers to
// the most generic (<tool_call> alone is Hermes; with <function=…> inside it is Qwen's XML form).
#include "toolcall/tool_call.h"

namespace sluice::toolcall {
namespace {

bool has(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

}  // namespace

std::string_view format_name(Format format) {
  switch (format) {
    case Format::kNone: return "none";
    case Format::kHermes: return "hermes";
    case Format::kQwenXml: return "qwen_xml";
    case Format::kGlm: return "glm";
    case Format::kLlama3: return "llama3_json";
    case Format::kMistral: return "mistral";
    case Format::kGranite: return "granite";
    case Format::kApriel: return "apriel";
    case Format::kNemotron: return "nemotron_json";
    case Format::kSeedXml: return "seed_xml";
    case Format::kDeepSeek: return "deepseek";
    case Format::kKimi: return "kimi_k2";
    case Format::kHarmony: return "harmony";
    case Format::kGemma4: return "gemma4";
  }
  return "none";
}

Format detect_format(std::string_view t) {
  if (has(t, "<|channel|>") && has(t, "<|message|>")) return Format::kHarmony;
  if (has(t, "<｜tool▁calls▁begin｜>") || has(t, "<｜tool▁call▁begin｜>")) return Format::kDeepSeek;
  if (has(t, "<|tool_calls_section_begin|>") || has(t, "<|tool_call_begin|>")) return Format::kKimi;
  if (has(t, "<|tool_call>")) return Format::kGemma4;
  if (has(t, "[TOOL_CALLS]")) return Format::kMistral;
  if (has(t, "<|tool_call|>")) return Format::kGranite;
  if (has(t, "<arg_key>")) return Format::kGlm;
  if (has(t, "<seed:tool_call>")) return Format::kSeedXml;
  if (has(t, "<tool_calls>")) return Format::kApriel;
  if (has(t, "<TOOLCALL>")) return Format::kNemotron;
  // Not parsed yet (answers stay text): Solar's <|tool_call:begin|>, Functionary's <function=NAME>{…};
  // Cohere, Phi, MiniMax, LFM, DeepSeek V3.2's DSML fall through to none as well.
  if (has(t, "<|tool_call:begin|>")) return Format::kNone;
  if (has(t, "<tool_call>")) return has(t, "<function=") ? Format::kQwenXml : Format::kHermes;
  if (has(t, "<function=")) return Format::kNone;
  if (has(t, "<|python_tag|>")) return Format::kLlama3;
  if (has(t, "<|start_header_id|>") && has(t, "\"parameters\"") && has(t, "tools")) return Format::kLlama3;
  return Format::kNone;
}

}  // namespace sluice::toolcall
