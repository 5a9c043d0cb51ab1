#include "constrain/prefix_trie.h"

#include <algorithm>

namespace sluice::constrain {

PrefixTrie::PrefixTrie(std::vector<std::pair<std::string, int32_t>> entries) {
  std::erase_if(entries, [](const auto& e) { return e.first.empty(); });
  std::sort(entries.begin(), entries.end());
  ids_.reserve(entries.size());
  // Sorted strings give the preorder directly: a node per distinct prefix, opened where a string
  // first differs from the one before (a prefix sorts before its extensions).
  nodes_.push_back({0, 0, 0, 0, 0, 0});
  std::vector<uint32_t> open{0};  // node index per depth along the current path
  const std::string* previous = nullptr;
  for (const auto& [s, id] : entries) {
    std::size_t common = 0;
    if (previous)
      while (common < previous->size() && common < s.size() && (*previous)[common] == s[common]) ++common;
    while (open.size() > common + 1) {
      nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    for (std::size_t d = common; d < s.size(); ++d) {
      nodes_.push_back({static_cast<unsigned char>(s[d]), static_cast<uint16_t>(d + 1), 0, 0, static_cast<uint32_t>(ids_.size()), 0});
      open.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    ++nodes_[open.back()].here;
    ids_.push_back(id);
    previous = &s;
  }
  while (!open.empty()) {
    nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
    open.pop_back();
  }
  // Deepest string below each node: children come after their parent, so a backward pass suffices.
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    nodes_[i].max_depth = std::max(nodes_[i].max_depth, nodes_[i].depth);
    for (uint32_t c = static_cast<uint32_t>(i) + 1; c < nodes_[i].end; c = nodes_[c].end)
      nodes_[i].max_depth = std::max(nodes_[i].max_depth, nodes_[c].max_depth);
  }
}

}  // namespace sluice::constrain
