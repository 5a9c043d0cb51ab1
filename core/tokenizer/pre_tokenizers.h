#pragma once
// Pre-tokenizers: cut normalized text into the words the model tokenizes independently (and, for
// ByteLevel/Metaspace, rewrite those words into the model's alphabet).
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::tokenizer {

struct Piece {
  std::string text;
  // Whether the piece begins at offset 0 of the original input: Metaspace's prepend_scheme "first"
  // adds its ▁ only there (HF checks offsets_original().0 == 0).
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their sub-pieces; empty pieces are dropped, as HF drops them.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Builds the pre-tokenizer a tokenizer.json "pre_tokenizer" value describes; JSON null yields nullptr.
Result<std::unique_ptr<const PreTokenizer>> make_pre_tokenizer(const rapidjson::Value& spec);

}  // namespace sluice::tokenizer
