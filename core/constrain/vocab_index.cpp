#include "constrain/vocab_index.h"

#include "tokenizer/tokenizer.h"

namespace sluice::constrain {

VocabIndex::VocabIndex(std::vector<std::string> bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(bytes)), stop_ids_(std::move(stop_ids)) {
  for (int32_t id : stop_ids_)
    if (id >= 0 && static_cast<std::size_t>(id) < bytes_.size()) bytes_[static_cast<std::size_t>(id)].clear();
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(bytes_.size());
  for (std::size_t id = 0; id < bytes_.size(); ++id) entries.emplace_back(bytes_[id], static_cast<int32_t>(id));
  trie_ = PrefixTrie(std::move(entries));
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
