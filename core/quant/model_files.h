#pragma once
// The non-weight files of a model folder, as the quantizer and the generator write them: config.json
// with MLX's `quantization` block, and the tokenizer/template files copied alongside. Plus the
// progress bar both draw on stderr.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::quant {

struct QuantForm {
  int bits = 4;
  int group_size = 64;
};

// Sets `quantization` and `quantization_config` (mlx-lm writes both) to {group_size, bits} plus one
// entry per module override, replacing any that were there.
void set_quantization(rapidjson::Document& config, QuantForm defaults, const std::map<std::string, QuantForm>& overrides);
Status write_json(const rapidjson::Document& doc, const std::filesystem::path& path);

// Copies tokenizer.json, tokenizer_config.json, chat templates, generation_config.json and the other
// tokenizer files that exist in `from` into `to`. Returns how many were copied.
Result<int> copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to,
                                 bool with_generation_config = true);

// A one-line progress bar on stderr: [#####-----]  45%  1.2/2.6 GB  name. Redrawn at most ten times a
// second; quiet draws nothing.
class ProgressBar {
 public:
  ProgressBar(uint64_t total, bool quiet) : total_(total), quiet_(quiet) {}
  void update(uint64_t done, const std::string& what);
  void finish(const std::string& summary);

 private:
  uint64_t total_;
  bool quiet_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace sluice::quant
