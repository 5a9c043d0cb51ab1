// Every chat template in ../shared/chat_templates that mentions tools, mapped to the call syntax its
// model writes (read from each template's own rendering of calls and its instructions).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "toolcall/tool_call.h"

namespace sluice::toolcall {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DetectFormat, EveryToolTemplateMapsToItsFormat) {
  const std::filesystem::path dir = std::filesystem::path(SLUICE_REFERENCE_DIR) / "chat_templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  // kNone: families whose syntax is not parsed yet (the answer stays text).
  const std::map<std::string, Format> expected = {
      {"Apertus-8B-Instruct", Format::kNone},  // tools as a system block, calls as a JSON list: not parsed
      {"Apriel-1.6-15b-Thinker-fixed", Format::kApriel},
      {"Bielik-11B-v3.0-Instruct", Format::kHermes},
      {"ByteDance-Seed-OSS", Format::kSeedXml},
      {"CohereForAI-c4ai-command-r-plus-tool_use", Format::kNone},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", Format::kNone},
      {"GLM-4.6", Format::kGlm},
      {"GLM-4.7-Flash", Format::kGlm},
      {"GigaChat3-10B-A1.8B", Format::kNone},
      {"GigaChat3.1-10B-A1.8B", Format::kNone},
      {"HuggingFaceTB-SmolLM3-3B", Format::kHermes},
      {"Kimi-K2-Instruct", Format::kKimi},
      {"Kimi-K2-Thinking", Format::kKimi},
      {"LFM2-8B-A1B", Format::kNone},
      {"LFM2.5-Instruct", Format::kNone},
      {"MiMo-VL", Format::kHermes},
      {"MiniMax-M2", Format::kNone},
      {"Mistral-Small-3.2-24B-Instruct-2506", Format::kMistral},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", Format::kQwenXml},
      {"NVIDIA-Nemotron-Nano-v2", Format::kNemotron},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", Format::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", Format::kHermes},
      {"Qwen-QwQ-32B", Format::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct", Format::kHermes},
      {"Qwen-Qwen3-0.6B", Format::kHermes},
      {"Qwen3-Coder", Format::kQwenXml},
      {"Qwen3.5-4B", Format::kQwenXml},
      {"Reka-Edge", Format::kHermes},
      {"StepFun3.5-Flash", Format::kQwenXml},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", Format::kNone},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", Format::kNone},
      {"deepseek-ai-DeepSeek-V3.1", Format::kDeepSeek},
      {"deepseek-ai-DeepSeek-V3.2", Format::kNone},  // DSML markup: not parsed yet
      {"fireworks-ai-llama-3-firefunction-v2", Format::kNone},
      {"google-gemma-4-31B-it-interleaved", Format::kGemma4},
      {"google-gemma-4-31B-it", Format::kGemma4},
      {"ibm-granite-granite-3.3-2B-Instruct", Format::kGranite},
      {"ibm-granite-granite-4.0", Format::kHermes},
      {"llama-cpp-deepseek-r1", Format::kDeepSeek},
      {"meetkai-functionary-medium-v3.1", Format::kNone},
      {"meetkai-functionary-medium-v3.2", Format::kNone},
      {"meta-llama-Llama-3.1-8B-Instruct", Format::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", Format::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", Format::kLlama3},
      {"microsoft-Phi-3.5-mini-instruct", Format::kNone},
      {"mistralai-Ministral-3-14B-Reasoning-2512", Format::kMistral},
      {"mistralai-Mistral-Nemo-Instruct-2407", Format::kMistral},
      {"moonshotai-Kimi-K2", Format::kKimi},
      {"openai-gpt-oss-120b", Format::kHarmony},
      {"stepfun-ai-Step-3.5-Flash", Format::kQwenXml},
      {"unsloth-Apriel-1.5", Format::kApriel},
      {"unsloth-mistral-Devstral-Small-2507", Format::kMistral},
      {"upstage-Solar-Open-100B", Format::kNone},
  };
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string source = read_all(entry.path());
    if (source.find("tools") == std::string::npos) continue;
    const std::string stem = entry.path().stem().string();
    auto it = expected.find(stem);
    ASSERT_NE(it, expected.end()) << stem << " supports tools and has no expected format; it detects as "
                                  << format_name(detect_format(source));
    EXPECT_EQ(format_name(detect_format(source)), format_name(it->second)) << stem;
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(DetectFormat, TemplatesWithoutToolMarkersAreNone) {
  EXPECT_EQ(detect_format("{% for m in messages %}{{ m.content }}{% endfor %}"), Format::kNone);
  EXPECT_EQ(detect_format(""), Format::kNone);
}

}  // namespace
}  // namespace sluice::toolcall
