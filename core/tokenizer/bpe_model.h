#pragma once
// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback and unknown handling,
// with a bounded cache of per-word results (real text repeats words constantly).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <rapidjson/document.h>

#include "tokenizer/string_map.h"
#include "util/result.h"

namespace sluice::tokenizer {

class BpeModel {
 public:
  static Result<std::unique_ptr<BpeModel>> from_json(const rapidjson::Value& model);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when the id is not in the vocabulary
  std::size_t id_space() const { return id_to_token_.size(); }  // max id + 1

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  std::vector<int32_t> initial_symbols(std::string_view word) const;
  void merge(std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xNN>", or -1

  // Words longer than this are not cached (they are rare and would crowd out the common ones).
  static constexpr std::size_t kMaxCachedWordBytes = 256;
  static constexpr std::size_t kCacheCapacity = 16384;
  mutable std::shared_mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace sluice::tokenizer
