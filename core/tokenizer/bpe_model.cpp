#include "tokenizer/bpe_model.h"

#include <array>
#include <cstdio>
#include <mutex>
#include <queue>

#include "tokenizer/json_fields.h"
#include "tokenizer/unicode.h"

namespace sluice::tokenizer {

namespace {

// Splits a merge entry: "a b" (older files) or ["a", "b"] (newer files, which allow spaces in tokens).
Result<std::pair<std::string, std::string>> parse_merge(const rapidjson::Value& entry) {
  if (entry.IsString()) {
    std::string_view line(entry.GetString(), entry.GetStringLength());
    auto space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      return make_error("merge '" + std::string(line) + "' is not two space-separated tokens");
    return std::pair{std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
  }
  if (entry.IsArray() && entry.Size() == 2 && entry[0].IsString() && entry[1].IsString())
    return std::pair{std::string(entry[0].GetString(), entry[0].GetStringLength()),
                     std::string(entry[1].GetString(), entry[1].GetStringLength())};
  return make_error("a merge must be \"a b\" or [\"a\", \"b\"]");
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const rapidjson::Value& model) {
  auto bpe = std::make_unique<BpeModel>();
  const rapidjson::Value* vocab = field(model, "vocab");
  if (vocab == nullptr || !vocab->IsObject()) return make_error("BPE model without a \"vocab\" object");
  int32_t max_id = -1;
  for (const auto& entry : vocab->GetObject()) {
    if (!is_token_id(entry.value))
      return make_error("vocab entry '" + std::string(entry.name.GetString(), entry.name.GetStringLength()) +
                        "' has no valid id (" + token_id_rule() + ")");
    int32_t id = entry.value.GetInt();
    bpe->vocab_.emplace(std::string(entry.name.GetString(), entry.name.GetStringLength()), id);
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  for (const auto& [token, id] : bpe->vocab_) bpe->id_to_token_[static_cast<std::size_t>(id)] = token;

  bpe->continuing_subword_prefix_ = field_string(model, "continuing_subword_prefix");
  bpe->end_of_word_suffix_ = field_string(model, "end_of_word_suffix");
  bpe->byte_fallback_ = field_bool(model, "byte_fallback", false);
  bpe->fuse_unk_ = field_bool(model, "fuse_unk", false);
  bpe->ignore_merges_ = field_bool(model, "ignore_merges", false);
  std::string unk = field_string(model, "unk_token");
  if (!unk.empty()) {
    auto id = bpe->token_to_id(unk);
    if (!id) return make_error("unk_token '" + unk + "' is not in the vocab");
    bpe->unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    bpe->byte_ids_[static_cast<std::size_t>(b)] = bpe->token_to_id(name).value_or(-1);
  }

  if (const auto* merges = field_array(model, "merges")) {
    bpe->merges_.reserve(merges->Size());
    int32_t rank = 0;
    for (const auto& entry : merges->GetArray()) {
      auto pair = parse_merge(entry);
      if (!pair) return pair.error();
      auto& [left, right] = *pair;
      auto left_id = bpe->token_to_id(left), right_id = bpe->token_to_id(right);
      if (!left_id || !right_id) return make_error("merge '" + left + " " + right + "' uses a token not in the vocab");
      // HF drops the continuing-subword prefix of the right part when forming the merged token.
      std::string merged = left + right.substr(std::min(right.size(), bpe->continuing_subword_prefix_.size()));
      auto merged_id = bpe->token_to_id(merged);
      if (!merged_id) return make_error("merge '" + left + " " + right + "' makes a token not in the vocab");
      // A repeated pair keeps its last rank, as HF's map construction does.
      bpe->merges_[pair_key(*left_id, *right_id)] = Merge{rank++, *merged_id};
    }
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& token = id_to_token_[static_cast<std::size_t>(id)];
  // A hole in the id space is an empty slot; a real token is never empty.
  return token.empty() ? nullptr : &token;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// One symbol per character: its vocab id, else its bytes as <0xNN> tokens (byte_fallback), else unk.
std::vector<int32_t> BpeModel::initial_symbols(std::string_view word) const {
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  std::optional<int32_t> pending_unk;  // an unknown run not yet emitted (fused when fuse_unk)
  std::string scratch;
  for (std::size_t pos = 0; pos < word.size();) {
    std::size_t begin = pos;
    next_code_point(word, pos);
    std::string_view character = word.substr(begin, pos - begin);
    std::string_view lookup = character;
    bool decorated = (begin > 0 && !continuing_subword_prefix_.empty()) || (pos == word.size() && !end_of_word_suffix_.empty());
    if (decorated) {
      scratch.clear();
      if (begin > 0) scratch += continuing_subword_prefix_;
      scratch += character;
      if (pos == word.size()) scratch += end_of_word_suffix_;
      lookup = scratch;
    }
    if (auto id = token_to_id(lookup)) {
      if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (unsigned char b : lookup) all_bytes = all_bytes && byte_ids_[b] >= 0;
      if (all_bytes) {
        // As in HF, a pending unknown is not flushed before the byte tokens.
        for (unsigned char b : lookup) ids.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) ids.push_back(*pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk) ids.push_back(*pending_unk);
  return ids;
}

// Applies merges lowest rank first (leftmost on ties) over a linked list of symbols. Queue entries
// go stale when a neighbour merges; they are recognised and dropped when popped. O(n log n).
void BpeModel::merge(std::vector<int32_t>& ids) const {
  if (ids.size() < 2) return;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> symbols(ids.size());
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) queue.push({m->rank, i, m->new_id});

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* m = find_merge(symbols[left.prev].id, left.id)) queue.push({m->rank, left.prev, m->new_id});
    if (left.next >= 0)
      if (const Merge* m = find_merge(left.id, symbols[left.next].id)) queue.push({m->rank, top.pos, m->new_id});
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = initial_symbols(word);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();  // bounded: start over rather than grow
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace sluice::tokenizer
