// q4: llama.cpp's q4_0 format, as a baseline for the TurboQuant codecs: blocks of 32 values, an f16
// scale d = m / −8 where m is the value of largest magnitude (sign kept), and 4-bit codes
// q = clamp(round(x/d) + 8, 0, 15) — the extreme value lands on code 0, so all 16 levels are used.
// Byte j of a block holds value j (low nibble) and value j + 16 (high nibble). 4.5 bits per value.
// head_dim must be a multiple of 32.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvcodec_common/codec_plugin.h"
#include "util/vec.h"

namespace sluice::kvcodec {
namespace {

constexpr uint32_t kBlock = 32, kBlockBytes = 18;

class Q4Codec final : public Codec {
 public:
  explicit Q4Codec(uint32_t head_dim) : head_dim_(head_dim), row_bytes_(head_dim / kBlock * kBlockBytes) {}

  sl_kv_format format() const override {
    sl_kv_format f{};
    f.head_dim = head_dim_;
    f.values_per_block = kBlock;
    f.bytes_per_block = kBlockBytes;
    f.row_bytes = row_bytes_;
    f.bits_per_value = static_cast<float>(row_bytes_) * 8.0f / static_cast<float>(head_dim_);
    f.domain_dim = head_dim_;
    return f;
  }

  void encode(const float* src, uint32_t n_rows, std::byte* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += head_dim_, dst += row_bytes_)
      for (uint32_t b = 0; b < head_dim_ / kBlock; ++b) {
        const float* x = src + b * kBlock;
        std::byte* p = dst + b * kBlockBytes;
        float amax = 0.0f, m = 0.0f;
        for (uint32_t j = 0; j < kBlock; ++j)
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            m = x[j];
          }
        if (!std::isfinite(amax)) m = 0.0f;
        const uint16_t dh = cpu::f32_to_f16(m / -8.0f);
        const float d = cpu::f16_to_f32(dh), inv = d != 0.0f ? 1.0f / d : 0.0f;
        std::memcpy(p, &dh, 2);
        auto* q = reinterpret_cast<uint8_t*>(p + 2);
        auto code = [&](float v) {
          const float c = std::nearbyint(v * inv) + 8.0f;
          return static_cast<uint8_t>(std::isfinite(c) ? std::clamp(c, 0.0f, 15.0f) : 8.0f);
        };
        for (uint32_t j = 0; j < 16; ++j) q[j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
      }
  }

  void decode(const std::byte* src, uint32_t n_rows, float* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += row_bytes_, dst += head_dim_)
      for (uint32_t b = 0; b < head_dim_ / kBlock; ++b) unpack(src + b * kBlockBytes, 1.0f, dst + b * kBlock);
  }

  uint32_t query_state_bytes() const override { return head_dim_ * 4; }
  void prepare_query(const float* q, void* state) const override { std::memcpy(state, q, head_dim_ * 4); }

  void score_keys(const void* state, const std::byte* rows, std::size_t stride, uint32_t n, float* scores) const override {
    const auto* q = static_cast<const float*>(state);
    float tmp[kBlock];
    for (uint32_t i = 0; i < n; ++i, rows += stride) {
      float sum = 0.0f;
      for (uint32_t b = 0; b < head_dim_ / kBlock; ++b) {
        unpack(rows + b * kBlockBytes, 1.0f, tmp);
        sum += cpu::dot_f32(tmp, q + b * kBlock, kBlock);
      }
      scores[i] = sum;
    }
  }

  void accumulate_values(const std::byte* rows, std::size_t stride, uint32_t n, const float* w, float* acc) const override {
    float tmp[kBlock];
    for (uint32_t i = 0; i < n; ++i, rows += stride) {
      if (w[i] == 0.0f) continue;
      for (uint32_t b = 0; b < head_dim_ / kBlock; ++b) {
        unpack(rows + b * kBlockBytes, 1.0f, tmp);
        cpu::axpy(w[i], tmp, acc + b * kBlock, kBlock);
      }
    }
  }

  void finish_values(const float* acc, float* out) const override { std::memcpy(out, acc, head_dim_ * 4); }
  const std::string& opencl_source() const override { return opencl_; }

 private:
  // 32 values of one block, times a.
  static void unpack(const std::byte* p, float a, float* out) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const float d = a * cpu::f16_to_f32(h);
    const auto* q = reinterpret_cast<const uint8_t*>(p + 2);
    for (uint32_t j = 0; j < 16; ++j) {
      out[j] = d * (static_cast<float>(q[j] & 15) - 8.0f);
      out[j + 16] = d * (static_cast<float>(q[j] >> 4) - 8.0f);
    }
  }

  uint32_t head_dim_, row_bytes_;
  std::string opencl_ = R"CL(
/* q4 (q4_0 layout): blocks of 18 bytes, half d then 16 bytes; byte j: value j low, value j+16 high. */
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n_values) {
  for (uint at = 0; at < n_values; at += 32u) {
    __global uchar* p = row + (at / 32u) * 18u;
    float amax = 0.0f, m = 0.0f;
    for (uint j = 0; j < 32u; ++j)
      if (fabs(src[at + j]) > amax) {
        amax = fabs(src[at + j]);
        m = src[at + j];
      }
    if (!isfinite(amax)) m = 0.0f;
    vstore_half_rte(m / -8.0f, 0, (__global half*)p);
    const float d = vload_half(0, (__global const half*)p), inv = d != 0.0f ? 1.0f / d : 0.0f;
    for (uint j = 0; j < 16u; ++j) {
      const float lo = rint(src[at + j] * inv) + 8.0f, hi = rint(src[at + j + 16u] * inv) + 8.0f;
      const uint a = isfinite(lo) ? (uint)clamp(lo, 0.0f, 15.0f) : 8u, b = isfinite(hi) ? (uint)clamp(hi, 0.0f, 15.0f) : 8u;
      p[2 + j] = (uchar)(a | (b << 4));
    }
  }
}
float SL_KV_FN(load)(__global const uchar* row, uint i) {
  __global const uchar* p = row + (i / 32u) * 18u;
  const uint j = i % 32u, b = p[2 + (j % 16u)];
  return vload_half(0, (__global const half*)p) * ((float)((j < 16u ? b : b >> 4) & 15u) - 8.0f);
}
)CL";
};

std::unique_ptr<Codec> make_q4(uint32_t head_dim, sl_kv_role, Options&) {
  if (head_dim == 0 || head_dim % kBlock != 0 || head_dim > 4096)
    throw std::invalid_argument("q4: head_dim must be a positive multiple of 32 (got " + std::to_string(head_dim) + ")");
  return std::make_unique<Q4Codec>(head_dim);
}

const sl_kvcodec_api kApi = make_kvcodec_api<make_q4>();
const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "q4", "0.1.0",
                                          "q4_0-format KV values: blocks of 32 4-bit codes with an f16 scale (4.5 bits per value)",
                                          nullptr, &kApi};

}  // namespace
}  // namespace sluice::kvcodec

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &sluice::kvcodec::kDescriptor; }
