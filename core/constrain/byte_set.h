#pragma once
// A set of byte values (0..255): the label of one grammar edge.
#include <bitset>
#include <cstdint>
#include <string_view>

namespace sluice::constrain {

struct ByteSet {
  std::bitset<256> bits;

  static ByteSet of(unsigned char b) {
    ByteSet s;
    s.bits.set(b);
    return s;
  }
  static ByteSet range(unsigned char lo, unsigned char hi) {
    ByteSet s;
    for (unsigned b = lo; b <= hi; ++b) s.bits.set(b);
    return s;
  }
  static ByteSet chars(std::string_view list) {
    ByteSet s;
    for (char c : list) s.bits.set(static_cast<unsigned char>(c));
    return s;
  }
  ByteSet& add(const ByteSet& o) {
    bits |= o.bits;
    return *this;
  }
  ByteSet& remove(std::string_view list) {
    for (char c : list) bits.reset(static_cast<unsigned char>(c));
    return *this;
  }
  bool has(unsigned char b) const { return bits.test(b); }
  bool empty() const { return bits.none(); }
};

}  // namespace sluice::constrain
