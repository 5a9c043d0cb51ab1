#include "hub/model_files.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace sluice::hub {

bool model_needs_file(const std::string& filename) {
  // Weights and configuration live at the top of a Transformers repo; sub-folders hold other formats.
  if (filename.find('/') != std::string::npos) return false;
  static constexpr std::array<std::string_view, 11> kExact = {
      "config.json",           "generation_config.json",  "tokenizer.json",  "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",     "vocab.json",      "merges.txt",
      "tokenizer.model",       "chat_template.jinja",     "chat_template.json"};
  if (std::find(kExact.begin(), kExact.end(), filename) != kExact.end()) return true;
  return filename.ends_with(".safetensors") || filename.ends_with(".safetensors.index.json");
}

std::vector<std::string> select_model_files(const std::vector<std::string>& repo_files) {
  std::vector<std::string> wanted;
  for (const auto& f : repo_files)
    if (model_needs_file(f)) wanted.push_back(f);
  // Mistral's repos carry consolidated*.safetensors for their own runtime beside the Transformers
  // shards: the same weights under other names, so they are left out when other weights exist.
  const auto consolidated = [](const std::string& f) { return f.starts_with("consolidated") && f.ends_with(".safetensors"); };
  const bool other_weights = std::any_of(wanted.begin(), wanted.end(), [&](const std::string& f) {
    return f.ends_with(".safetensors") && !consolidated(f);
  });
  if (other_weights) std::erase_if(wanted, consolidated);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  return wanted;
}

}  // namespace sluice::hub
