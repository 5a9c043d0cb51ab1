#include "turbo/turbo_codecs.h"

#include <array>
#include <cmath>
#include <cstring>
#include <numbers>
#include <sstream>

#include "turbo/mse_stage.h"
#include "turbo/opencl_source.h"

namespace sluice::turbo {
namespace {

constexpr uint32_t kMaxHeadDim = 1024;  // stack scratch in the fused hooks (they must not allocate)

ScaleMode parse_scale(kvcodec::Options& o) {
  const std::string v = o.get("norm", "exact");
  if (v == "exact") return ScaleMode::kExact;
  if (v == "raw") return ScaleMode::kRaw;
  if (v == "ls") return ScaleMode::kLeastSquares;
  if (v == "unbiased") return ScaleMode::kUnbiased;
  throw std::invalid_argument("option norm=" + v + ": expected exact, raw, ls or unbiased");
}

sl_kv_format make_format(uint32_t head_dim, uint32_t row_bytes, const std::vector<MseBlock>& blocks) {
  sl_kv_format f{};
  f.head_dim = head_dim;
  f.row_bytes = row_bytes;
  f.bits_per_value = static_cast<float>(row_bytes) * 8.0f / static_cast<float>(head_dim);
  f.domain_dim = head_dim;
  // One block size for the whole row: report it; otherwise the row is the block.
  if (!blocks.empty() && blocks.size() * blocks[0].n == head_dim) {
    f.values_per_block = blocks[0].n;
    f.bytes_per_block = row_bytes / static_cast<uint32_t>(blocks.size());
  } else {
    f.values_per_block = head_dim;
    f.bytes_per_block = row_bytes;
  }
  return f;
}

// turbo2/3/4: the MSE stage alone. Keys score against the query rotated under each candidate
// rotation; values accumulate in the rotated domains and are rotated back once per (token, head) in
// finish_values.
class TurboMseCodec final : public kvcodec::Codec {
 public:
  TurboMseCodec(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode, uint32_t rotations)
      : stage_(head_dim, bits, seed, mode, rotations), opencl_(mse_opencl_source(stage_)) {}

  sl_kv_format format() const override {
    sl_kv_format f = make_format(stage_.head_dim(), stage_.row_bytes(), stage_.blocks());
    f.domain_dim = stage_.domain_dim();
    return f;
  }

  void encode(const float* src, uint32_t n_rows, std::byte* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += stage_.head_dim(), dst += stage_.row_bytes()) stage_.encode(src, dst);
  }

  void decode(const std::byte* src, uint32_t n_rows, float* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += stage_.row_bytes(), dst += stage_.head_dim()) stage_.decode(src, dst);
  }

  uint32_t query_state_bytes() const override { return stage_.domain_dim() * 4; }
  void prepare_query(const float* q, void* state) const override { stage_.rotate_all(q, static_cast<float*>(state)); }

  void score_keys(const void* state, const std::byte* rows, std::size_t stride, uint32_t n, float* scores) const override {
    const auto* q = static_cast<const float*>(state);
    for (uint32_t i = 0; i < n; ++i, rows += stride) scores[i] = stage_.dot(rows, q);
  }

  void accumulate_values(const std::byte* rows, std::size_t stride, uint32_t n, const float* w, float* acc) const override {
    for (uint32_t i = 0; i < n; ++i, rows += stride)
      if (w[i] != 0.0f) stage_.axpy(w[i], rows, acc);
  }

  void finish_values(const float* acc, float* out) const override { stage_.unrotate_sum(acc, out); }
  const std::string& opencl_source() const override { return opencl_; }

 private:
  MseStage stage_;
  std::string opencl_;
};

// turbo-prod: row = [MSE stage at bits − 1][sign(S·r) as head_dim bits][f16 ‖r‖], r = y − ŷ the
// residual of the rotated vector, S a fixed head_dim × head_dim matrix of N(0, 1) entries. The
// estimate ⟨q, x⟩ ≈ ⟨q_rot, ŷ⟩ + √(π/2)/d · ‖r‖ · ⟨S·q_rot, sign(S·r)⟩ is unbiased over S.
class TurboProdCodec final : public kvcodec::Codec {
 public:
  TurboProdCodec(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode)
      : stage_(head_dim, bits - 1, seed, mode), d_(head_dim), s_(static_cast<std::size_t>(head_dim) * head_dim) {
    uint64_t state = seed ^ 0x9a7b3c1d2e4f5061ull;
    for (std::size_t i = 0; i < s_.size(); i += 2) {  // Box–Muller from splitmix64 uniforms
      const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53;
      const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      s_[i] = static_cast<float>(r * std::cos(2 * std::numbers::pi * u2));
      if (i + 1 < s_.size()) s_[i + 1] = static_cast<float>(r * std::sin(2 * std::numbers::pi * u2));
    }
    qjl_scale_ = static_cast<float>(std::sqrt(std::numbers::pi / 2) / head_dim);
    signs_at_ = stage_.row_bytes();
    gamma_at_ = signs_at_ + head_dim / 8;
    row_bytes_ = gamma_at_ + 2;
  }

  sl_kv_format format() const override { return make_format(d_, row_bytes_, {}); }

  void encode(const float* src, uint32_t n_rows, std::byte* dst) const override {
    std::array<float, kMaxHeadDim> y, yhat;
    for (uint32_t r = 0; r < n_rows; ++r, src += d_, dst += row_bytes_) {
      stage_.rotate(src, y.data());
      stage_.encode_rotated(y.data(), dst, yhat.data());
      double gamma2 = 0;
      for (uint32_t j = 0; j < d_; ++j) {
        y[j] -= yhat[j];
        gamma2 += static_cast<double>(y[j]) * y[j];
      }
      auto* bits = reinterpret_cast<uint8_t*>(dst + signs_at_);
      std::memset(bits, 0, d_ / 8);
      for (uint32_t i = 0; i < d_; ++i)
        if (cpu::dot_f32(s_.data() + static_cast<std::size_t>(i) * d_, y.data(), d_) >= 0.0f) bits[i / 8] |= 1u << (i % 8);
      write_f16(dst + gamma_at_, std::isfinite(gamma2) ? static_cast<float>(std::sqrt(gamma2)) : 0.0f);
    }
  }

  void decode(const std::byte* src, uint32_t n_rows, float* dst) const override {
    for (uint32_t r = 0; r < n_rows; ++r, src += row_bytes_, dst += d_) {
      reconstruct_rotated(src, dst);
      stage_.unrotate(dst, dst);
    }
  }

  // State: q_rot[d], sq[d] = (√(π/2)/d)·S·q_rot, Σ sq.
  uint32_t query_state_bytes() const override { return (2 * d_ + 1) * 4; }
  void prepare_query(const float* q, void* state) const override {
    auto* q_rot = static_cast<float*>(state);
    float* sq = q_rot + d_;
    stage_.rotate(q, q_rot);
    float sum = 0.0f;
    for (uint32_t i = 0; i < d_; ++i) sum += (sq[i] = qjl_scale_ * cpu::dot_f32(s_.data() + static_cast<std::size_t>(i) * d_, q_rot, d_));
    sq[d_] = sum;
  }

  void score_keys(const void* state, const std::byte* rows, std::size_t stride, uint32_t n, float* scores) const override {
    const auto* q_rot = static_cast<const float*>(state);
    const float* sq = q_rot + d_;
    for (uint32_t i = 0; i < n; ++i, rows += stride)
      scores[i] = stage_.dot(rows, q_rot) +
                  read_f16(rows + gamma_at_) * signed_sum(reinterpret_cast<const uint8_t*>(rows + signs_at_), sq, d_, sq[d_]);
  }

  // Values (the codec is made for keys, but works for values too): rebuild each row in the rotated
  // domain and accumulate; finish rotates back.
  void accumulate_values(const std::byte* rows, std::size_t stride, uint32_t n, const float* w, float* acc) const override {
    std::array<float, kMaxHeadDim> y;
    for (uint32_t i = 0; i < n; ++i, rows += stride)
      if (w[i] != 0.0f) {
        reconstruct_rotated(rows, y.data());
        cpu::axpy(w[i], y.data(), acc, d_);
      }
  }
  void finish_values(const float* acc, float* out) const override { stage_.unrotate(acc, out); }
  const std::string& opencl_source() const override { return opencl_; }  // none yet: generic path

 private:
  void reconstruct_rotated(const std::byte* row, float* y) const {
    stage_.reconstruct_rotated(row, y);
    const auto* bits = reinterpret_cast<const uint8_t*>(row + signs_at_);
    const float g = qjl_scale_ * read_f16(row + gamma_at_);
    if (g == 0.0f) return;
    for (uint32_t i = 0; i < d_; ++i)  // y += g · Sᵀ·sign
      cpu::axpy(((bits[i / 8] >> (i % 8)) & 1) ? g : -g, s_.data() + static_cast<std::size_t>(i) * d_, y, d_);
  }

  MseStage stage_;
  uint32_t d_;
  std::vector<float> s_;  // row-major d × d
  float qjl_scale_ = 0;
  uint32_t signs_at_ = 0, gamma_at_ = 0, row_bytes_ = 0;
  std::string opencl_;
};

std::unique_ptr<kvcodec::Codec> make_mse(uint32_t bits, uint32_t head_dim, sl_kv_role role, kvcodec::Options& o) {
  const uint64_t seed = o.get_u64("seed", kDefaultSeed);
  const ScaleMode mode = parse_scale(o);
  const uint32_t fallback = role == SL_KV_VALUES ? kDefaultValueRotations : kDefaultKeyRotations;
  const int rotations = o.get_int("rot", static_cast<int>(fallback), 1, 16);
  try {
    return std::make_unique<TurboMseCodec>(head_dim, bits, seed, mode, static_cast<uint32_t>(rotations));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("turbo" + std::to_string(bits) + ": " + e.what());
  }
}

}  // namespace

std::unique_ptr<kvcodec::Codec> make_turbo2(uint32_t d, sl_kv_role role, kvcodec::Options& o) { return make_mse(2, d, role, o); }
std::unique_ptr<kvcodec::Codec> make_turbo3(uint32_t d, sl_kv_role role, kvcodec::Options& o) { return make_mse(3, d, role, o); }
std::unique_ptr<kvcodec::Codec> make_turbo4(uint32_t d, sl_kv_role role, kvcodec::Options& o) { return make_mse(4, d, role, o); }

std::unique_ptr<kvcodec::Codec> make_turbo_prod(uint32_t head_dim, sl_kv_role, kvcodec::Options& o) {
  const int bits = o.get_int("bits", 4, 2, 4);
  const uint64_t seed = o.get_u64("seed", kDefaultSeed);
  const ScaleMode mode = parse_scale(o);
  try {
    return std::make_unique<TurboProdCodec>(head_dim, static_cast<uint32_t>(bits), seed, mode);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("turbo-prod: ") + e.what());
  }
}

}  // namespace sluice::turbo
