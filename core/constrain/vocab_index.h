#pragma once
// A tokenizer's vocabulary as the matcher walks it: every token's bytes, decoded once, and a prefix
// trie over them (prefix_trie.h).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "constrain/prefix_trie.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::constrain {

class VocabIndex {
 public:
  // bytes[id]: the token's bytes; an empty string never matches (unknown ids, and tokens kept out
  // of constrained text such as special tokens). stop_ids: end-of-sequence tokens, allowed only
  // when an output is complete.
  VocabIndex(std::vector<std::string> bytes, std::vector<int32_t> stop_ids);
  // From a tokenizer: token_bytes() of every id; special tokens stay out of constrained text.
  static std::shared_ptr<const VocabIndex> from_tokenizer(const Tokenizer& tokenizer, std::vector<int32_t> stop_ids);

  std::size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
  std::span<const int32_t> stop_ids() const { return stop_ids_; }
  const PrefixTrie& trie() const { return trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  PrefixTrie trie_;
};

}  // namespace sluice::constrain
