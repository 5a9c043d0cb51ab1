#pragma once
// Added tokens (tokenizer.json "added_tokens"): strings matched whole in the input before the model
// sees it, longest match first. Tokens with normalized=false match the raw text; those with
// normalized=true match each piece after normalization (their content normalized the same way).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <rapidjson/document.h>

#include "tokenizer/string_map.h"
#include "util/result.h"

namespace sluice::tokenizer {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;  // match only when not inside a word
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool normalized = false;   // match after normalization
  bool special = false;      // dropped by decode(skip_special_tokens)
};

// A span of the input: either an added token's id or text still to tokenize.
struct AddedSplit {
  std::size_t begin = 0, end = 0;
  std::optional<int32_t> id;
};

class AddedVocabulary {
 public:
  static Result<AddedVocabulary> from_json(const rapidjson::Value& added_tokens, const Normalizer* normalizer);

  std::vector<AddedSplit> split_raw(std::string_view text) const { return raw_.split(text); }
  std::vector<AddedSplit> split_normalized(std::string_view text) const { return normalized_.split(text); }

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents, walked from each position for the longest match.
  class Matcher {
   public:
    void add(std::string_view content, const AddedToken* token);
    std::vector<AddedSplit> split(std::string_view text) const;
    bool empty() const { return nodes_.size() <= 1; }

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
      const AddedToken* token = nullptr;
    };
    int32_t child(int32_t node, unsigned char byte) const;
    std::vector<Node> nodes_{1};
    std::array<bool, 256> first_byte_{};
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, std::size_t> index_by_id_;
  StringMap<int32_t> id_by_content_;
  Matcher raw_, normalized_;
};

}  // namespace sluice::tokenizer
