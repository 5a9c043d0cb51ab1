#pragma once
// Decoders: turn the token strings of a sequence back into text. Each step maps a list of strings to
// a list of strings (HF's decode_chain); the tokenizer joins the final list.
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
  // Whether appending tokens can rewrite the last `n` characters already decoded (Strip with stop > 0
  // trims the end of the text, so the end is unsettled until more text arrives).
  virtual std::size_t unstable_tail_chars() const { return 0; }
  // The bytes one token adds in the middle of a text: no first-token rule (leading-space strip,
  // Strip's trims) and no UTF-8 repair, so a token holding half a character yields those raw bytes.
  // Constrained decoding matches these against its grammar.
  virtual std::string piece_bytes(std::string token) const {
    std::string out;
    for (const auto& part : decode_chain({std::move(token)})) out += part;
    return out;
  }
};

// Builds the decoder a tokenizer.json "decoder" value describes; JSON null yields nullptr.
Result<std::unique_ptr<const Decoder>> make_decoder(const rapidjson::Value& spec);

}  // namespace sluice::tokenizer
