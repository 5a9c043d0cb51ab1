#pragma once
// A set of token ids as a bitset over the vocabulary.
#include <cstdint>
#include <vector>

namespace sluice::constrain {

class TokenMask {
 public:
  explicit TokenMask(std::size_t n = 0) : n_(n), words_((n + 63) / 64, 0) {}
  std::size_t size() const { return n_; }
  void set(int32_t id) { words_[static_cast<std::size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  void reset(int32_t id) { words_[static_cast<std::size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63)); }
  bool test(int32_t id) const { return (words_[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1; }
  void clear() { std::fill(words_.begin(), words_.end(), 0); }
  void add(const TokenMask& o) {
    for (std::size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
  }
  std::size_t count() const {
    std::size_t c = 0;
    for (uint64_t w : words_) c += static_cast<std::size_t>(__builtin_popcountll(w));
    return c;
  }
  bool any() const {
    for (uint64_t w : words_)
      if (w) return true;
    return false;
  }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::size_t n_;
  std::vector<uint64_t> words_;
};

}  // namespace sluice::constrain
