#include "constrain/vocab_index.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace sluice::constrain {

VocabIndex::VocabIndex(std::vector<std::string> bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(bytes)), stop_ids_(std::move(stop_ids)) {
  for (int32_t id : stop_ids_)
    if (id >= 0 && static_cast<std::size_t>(id) < bytes_.size()) bytes_[static_cast<std::size_t>(id)].clear();
  for (std::size_t id = 0; id < bytes_.size(); ++id)
    if (!bytes_[id].empty()) sorted_.push_back(static_cast<int32_t>(id));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // Sorted strings give the trie's preorder directly: a node per distinct prefix, opened where the
  // string first differs from the one before.
  nodes_.push_back({0, 0, 0, 0, 0});
  std::vector<uint32_t> open{0};  // node index per depth along the current path
  const std::string* previous = nullptr;
  for (std::size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& s = bytes_[sorted_[k]];
    std::size_t common = 0;
    if (previous)
      while (common < previous->size() && common < s.size() && (*previous)[common] == s[common]) ++common;
    // Close the nodes deeper than the shared prefix.
    while (open.size() > common + 1) {
      nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    for (std::size_t d = common; d < s.size(); ++d) {
      nodes_.push_back({static_cast<unsigned char>(s[d]), static_cast<uint16_t>(d + 1), 0, static_cast<uint32_t>(k), 0});
      open.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    previous = &s;
  }
  while (!open.empty()) {
    nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
    open.pop_back();
  }
  // Deepest token below each node: children come after their parent, so a backward pass suffices.
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    nodes_[i].max_depth = std::max(nodes_[i].max_depth, nodes_[i].depth);
    for (uint32_t c = static_cast<uint32_t>(i) + 1; c < nodes_[i].end; c = nodes_[c].end)
      nodes_[i].max_depth = std::max(nodes_[i].max_depth, nodes_[c].max_depth);
  }
}

std::pair<uint32_t, uint32_t> VocabIndex::tokens_at(uint32_t i) const {
  const uint32_t begin = nodes_[i].first_token;
  const uint32_t next = i + 1 < nodes_.size() ? nodes_[i + 1].first_token : static_cast<uint32_t>(sorted_.size());
  // Tokens ending here come first in the subtree (a prefix sorts before its extensions), and equal
  // byte strings all end here.
  uint32_t end = begin;
  while (end < next && bytes_[sorted_[end]].size() == nodes_[i].depth) ++end;
  return {begin, end};
}

std::pair<uint32_t, uint32_t> VocabIndex::tokens_below(uint32_t i) const {
  const uint32_t end = nodes_[i].end < nodes_.size() ? nodes_[nodes_[i].end].first_token : static_cast<uint32_t>(sorted_.size());
  return {nodes_[i].first_token, end};
}

std::shared_ptr<const VocabIndex> VocabIndex::from_tokenizer(const Tokenizer& tokenizer, std::vector<int32_t> stop_ids) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (std::size_t id = 0; id < bytes.size(); ++id) {
    const auto i = static_cast<int32_t>(id);
    if (!tokenizer.is_special(i)) bytes[id] = tokenizer.token_bytes(i);
  }
  return std::make_shared<VocabIndex>(std::move(bytes), std::move(stop_ids));
}

}  // namespace sluice::constrain
