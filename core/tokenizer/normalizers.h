#pragma once
// Normalizers: the text rewrites tokenizer.json's "normalizer" applies to each piece of input that
// is not an added token, before pre-tokenization. We keep no offset alignment (nothing here reports
// offsets), so each normalizer is a plain string -> string function.
#include <memory>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer a tokenizer.json "normalizer" value describes; JSON null yields nullptr.
Result<std::unique_ptr<const Normalizer>> make_normalizer(const rapidjson::Value& spec);

}  // namespace sluice::tokenizer
