#pragma once
// Byte strings (each with an id) as a trie laid out in preorder: one pass over an array visits
// every string while sharing prefixes, and a dead prefix skips its whole subtree with one jump.
// The matcher walks two kinds: the whole vocabulary, and per grammar position the tails of the
// tokens that leave the position's rule mid-token.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::constrain {

class PrefixTrie {
 public:
  struct Node {
    unsigned char byte;
    uint16_t depth;
    uint16_t max_depth;  // of the longest string in this subtree
    uint32_t end;        // first node after this subtree
    uint32_t first;      // into ids(): the strings ending here are [first, first + here)
    uint32_t here;
  };

  PrefixTrie() = default;
  // Empty strings are left out.
  explicit PrefixTrie(std::vector<std::pair<std::string, int32_t>> entries);

  std::span<const Node> nodes() const { return nodes_; }
  std::span<const int32_t> ids() const { return ids_; }
  std::span<const int32_t> ids_at(uint32_t node) const { return {ids_.data() + nodes_[node].first, nodes_[node].here}; }
  std::size_t size() const { return ids_.size(); }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;  // by their strings
};

}  // namespace sluice::constrain
