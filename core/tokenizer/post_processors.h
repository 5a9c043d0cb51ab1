#pragma once
// Post-processors: what encode(..., add_special_tokens=true) wraps around a single sequence
// (e.g. Llama's BOS through TemplateProcessing). Only the single-sequence form is needed here.
#include <cstdint>
#include <memory>
#include <vector>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

// Builds the post-processor a tokenizer.json "post_processor" value describes; JSON null yields nullptr.
Result<std::unique_ptr<const PostProcessor>> make_post_processor(const rapidjson::Value& spec);

}  // namespace sluice::tokenizer
