// q8: each block of (up to) 32 values is stored as an f16 scale d = max|x| / 127 and 32 int8 values
// round(x / d). 8.5 bits per value at head_dim 64/128/256. head_dim must be a multiple of 8; the last
// block is shorter when 32 does not divide it (80 = 32 + 32 + 16).
//
// Fused attention works on the int8 rows directly: a score is Σ_blocks d_b · Σ q_j · int8_j, and the
// value accumulator gains w · d_b · int8_j; no rotation, so the accumulator is the head vector itself.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvcodec_common/codec_plugin.h"
#include "util/vec.h"

namespace sluice::kvcodec {
namespace {

constexpr uint32_t kBlock = 32;

struct Block {
  uint32_t offset, n;
};

class Q8Codec final : public Codec {
 public:
  explicit Q8Codec(uint32_t head_dim) : head_dim_(head_dim), opencl_(q8_opencl_source()) {
    for (uint32_t at = 0; at < head_dim; at += kBlock) blocks_.push_back({at, std::min(kBlock, head_dim - at)});
    row_bytes_ = static_cast<uint32_t>(blocks_.size()) * 2 + head_dim;
  }

  sl_kv_format format() const override {
    sl_kv_format f{};
    f.head_dim = head_dim_;
    const bool uniform = head_dim_ % kBlock == 0;
    f.values_per_block = uniform ? kBlock : head_dim_;
    f.bytes_per_block = uniform ? kBlock + 2 : row_bytes_;
    f.row_bytes = row_bytes_;
    f.bits_per_value = static_cast<float>(row_bytes_) * 8.0f / static_cast<float>(head_dim_);
    f.domain_dim = head_dim_;
    return f;
  }

  void encode(const float* src, uint32_t n_rows, std::byte* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += head_dim_, dst += row_bytes_) {
      std::byte* p = dst;
      for (const auto& b : blocks_) {
        float amax = 0.0f;
        for (uint32_t j = 0; j < b.n; ++j) amax = std::max(amax, std::fabs(src[b.offset + j]));
        if (!std::isfinite(amax)) amax = 0.0f;  // a non-finite input stores a zero block, never NaN codes
        const float d = amax / 127.0f;
        const uint16_t dh = cpu::f32_to_f16(d);
        const float inv = d > 0 ? 1.0f / cpu::f16_to_f32(dh) : 0.0f;
        std::memcpy(p, &dh, 2);
        auto* q = reinterpret_cast<int8_t*>(p + 2);
        for (uint32_t j = 0; j < b.n; ++j)
          q[j] = static_cast<int8_t>(std::clamp(std::nearbyint(src[b.offset + j] * inv), -127.0f, 127.0f));
        p += 2 + b.n;
      }
    }
  }

  void decode(const std::byte* src, uint32_t n_rows, float* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += row_bytes_, dst += head_dim_) {
      const std::byte* p = src;
      for (const auto& b : blocks_) {
        const float d = scale(p);
        const auto* q = reinterpret_cast<const int8_t*>(p + 2);
        for (uint32_t j = 0; j < b.n; ++j) dst[b.offset + j] = d * static_cast<float>(q[j]);
        p += 2 + b.n;
      }
    }
  }

  uint32_t query_state_bytes() const override { return head_dim_ * 4; }
  void prepare_query(const float* q, void* state) const override { std::memcpy(state, q, head_dim_ * 4); }

  void score_keys(const void* state, const std::byte* rows, std::size_t stride, uint32_t n, float* scores) const override {
    const auto* q = static_cast<const float*>(state);
    for (uint32_t i = 0; i < n; ++i, rows += stride) {
      const std::byte* p = rows;
      float sum = 0.0f;
      for (const auto& b : blocks_) {
        sum += scale(p) * dot_i8(reinterpret_cast<const int8_t*>(p + 2), q + b.offset, b.n);
        p += 2 + b.n;
      }
      scores[i] = sum;
    }
  }

  void accumulate_values(const std::byte* rows, std::size_t stride, uint32_t n, const float* w, float* acc) const override {
    for (uint32_t i = 0; i < n; ++i, rows += stride) {
      if (w[i] == 0.0f) continue;
      const std::byte* p = rows;
      for (const auto& b : blocks_) {
        axpy_i8(w[i] * scale(p), reinterpret_cast<const int8_t*>(p + 2), acc + b.offset, b.n);
        p += 2 + b.n;
      }
    }
  }

  void finish_values(const float* acc, float* out) const override { std::memcpy(out, acc, head_dim_ * 4); }
  const std::string& opencl_source() const override { return opencl_; }

 private:
  static float scale(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return cpu::f16_to_f32(h);
  }

  static float dot_i8(const int8_t* k, const float* q, uint32_t n) {
    uint32_t j = 0;
    float sum = 0.0f;
#ifdef SLUICE_CPU_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (; j + 8 <= n; j += 8) {
      const __m256 kv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k + j))));
      acc = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + j), acc);
    }
    sum = cpu::hsum(acc);
#endif
    for (; j < n; ++j) sum += static_cast<float>(k[j]) * q[j];
    return sum;
  }

  static void axpy_i8(float a, const int8_t* v, float* acc, uint32_t n) {
    uint32_t j = 0;
#ifdef SLUICE_CPU_AVX2
    const __m256 va = _mm256_set1_ps(a);
    for (; j + 8 <= n; j += 8) {
      const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + j))));
      _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(va, x, _mm256_loadu_ps(acc + j)));
    }
#endif
    for (; j < n; ++j) acc[j] += a * static_cast<float>(v[j]);
  }

  uint32_t head_dim_;
  uint32_t row_bytes_ = 0;
  std::vector<Block> blocks_;
  std::string opencl_;

  static std::string q8_opencl_source();
};

// OpenCL C for the backend (docs/PLUGINS.md contract): names through SL_KV_FN, so a K and a V
// instance share one program. Same rounding as encode() (round half to even, f16 round to nearest).
std::string Q8Codec::q8_opencl_source() {
  return R"CL(
/* q8 KV codec: rows of blocks [half d][char q[n]], n = 32 (the last block may be shorter). */
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n_values) {
  for (uint at = 0; at < n_values; at += 32u) {
    const uint n = min(32u, n_values - at);
    __global uchar* p = row + (at / 32u) * 34u;
    float amax = 0.0f;
    for (uint j = 0; j < n; ++j) amax = fmax(amax, fabs(src[at + j]));
    if (!isfinite(amax)) amax = 0.0f;
    vstore_half_rte(amax / 127.0f, 0, (__global half*)p);
    const float d = vload_half(0, (__global const half*)p), inv = d > 0.0f ? 1.0f / d : 0.0f;
    __global char* q = (__global char*)(p + 2);
    for (uint j = 0; j < n; ++j) q[j] = (char)clamp(rint(src[at + j] * inv), -127.0f, 127.0f);
  }
}
float SL_KV_FN(load)(__global const uchar* row, uint i) {
  __global const uchar* p = row + (i / 32u) * 34u;
  return vload_half(0, (__global const half*)p) * (float)((__global const char*)(p + 2))[i % 32u];
}
)CL";
}

std::unique_ptr<Codec> make_q8(uint32_t head_dim, sl_kv_role, Options&) {
  if (head_dim == 0 || head_dim % 8 != 0 || head_dim > 4096)
    throw std::invalid_argument("q8: head_dim must be a positive multiple of 8 (got " + std::to_string(head_dim) + ")");
  return std::make_unique<Q8Codec>(head_dim);
}

const sl_kvcodec_api kApi = make_kvcodec_api<make_q8>();
const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "q8", "0.1.0",
                                          "8-bit KV values in blocks of 32 with an f16 scale (8.5 bits per value)",
                                          nullptr, &kApi};

}  // namespace
}  // namespace sluice::kvcodec

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &sluice::kvcodec::kDescriptor; }
