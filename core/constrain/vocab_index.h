#pragma once
// A tokenizer's vocabulary as the matcher walks it: every token's bytes (decoded once) in a trie
// laid out in preorder, so one pass over an array visits every token while sharing prefixes, and
// a dead prefix skips its whole subtree with one jump.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

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

  // The trie in preorder. Node 0 is the root (no byte).
  struct Node {
    unsigned char byte;
    uint16_t depth;
    uint32_t end;          // first node after this subtree
    uint32_t first_token;  // into sorted_ids(): tokens ending here are [first_token, next node's first_token)
    uint16_t max_depth;    // of the longest token in this subtree
  };
  std::span<const Node> nodes() const { return nodes_; }
  std::span<const int32_t> sorted_ids() const { return sorted_; }
  // Tokens ending at node i, and every token in its subtree (itself included).
  std::pair<uint32_t, uint32_t> tokens_at(uint32_t i) const;
  std::pair<uint32_t, uint32_t> tokens_below(uint32_t i) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> sorted_;  // token ids by their bytes
};

}  // namespace sluice::constrain
