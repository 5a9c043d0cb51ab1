// The built-in f32/f16 KV codecs, driven through their C tables as a backend would.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/builtin_codecs.h"

namespace sluice {
namespace {

struct CodecCase {
  const char* name;
  const sl_kvcodec_api* (*api)();
  uint32_t bytes_per_value;
};

const CodecCase kCodecs[] = {{"f32", builtin_f32_codec, 4}, {"f16", builtin_f16_codec, 2}};

// RAII over one codec instance.
class Codec {
 public:
  Codec(const sl_kvcodec_api* api, uint32_t head_dim, sl_kv_role role) : api_(api) {
    sl_error err{};
    status_ = api_->create(head_dim, role, "", &codec_, &err);
    message_ = err.message;
  }
  ~Codec() {
    if (codec_) api_->destroy(codec_);
  }
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;
  const sl_kvcodec* get() const { return codec_; }
  sl_status status() const { return status_; }
  sl_kv_format format() const {
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api_->get_format(codec_, &f);
    return f;
  }

 private:
  const sl_kvcodec_api* api_;
  sl_kvcodec* codec_ = nullptr;
  sl_status status_;
  std::string message_;
};

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Half precision keeps 11 significant bits: round-to-nearest is within 2^-11 relative (normal range).
constexpr double kHalfRelative = 1.0 / 2048.0;

class BuiltinCodec : public ::testing::TestWithParam<CodecCase> {};

TEST_P(BuiltinCodec, FormatDescribesOneValuePerBlock) {
  const auto& c = GetParam();
  for (uint32_t head_dim : {1u, 7u, 64u, 128u, 257u}) {
    Codec codec(c.api(), head_dim, SL_KV_KEYS);
    ASSERT_EQ(codec.status(), SL_OK);
    const auto f = codec.format();
    EXPECT_EQ(f.struct_size, sizeof(sl_kv_format));
    EXPECT_EQ(f.head_dim, head_dim);
    EXPECT_EQ(f.values_per_block, 1u);
    EXPECT_EQ(f.bytes_per_block, c.bytes_per_value);
    EXPECT_EQ(f.row_bytes, head_dim * c.bytes_per_value);
    EXPECT_FLOAT_EQ(f.bits_per_value, 8.0f * c.bytes_per_value);
    EXPECT_EQ(f.domain_dim, head_dim);
  }
}

TEST_P(BuiltinCodec, RejectsZeroHeadDimAndOptions) {
  const auto* api = GetParam().api();
  sl_kvcodec* codec = nullptr;
  sl_error err{};
  EXPECT_EQ(api->create(0, SL_KV_KEYS, "", &codec, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
  err = {};
  EXPECT_EQ(api->create(64, SL_KV_VALUES, "bits=4", &codec, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
}

TEST_P(BuiltinCodec, EncodeDecodeRoundTrips) {
  const auto& c = GetParam();
  for (uint32_t head_dim : {5u, 64u, 100u}) {
    Codec codec(c.api(), head_dim, SL_KV_VALUES);
    const uint32_t n_rows = 9;
    const auto src = random_values(static_cast<std::size_t>(n_rows) * head_dim, head_dim, 3.0f);
    std::vector<std::byte> rows(static_cast<std::size_t>(n_rows) * codec.format().row_bytes);
    std::vector<float> back(src.size(), NAN);
    sl_error err{};
    ASSERT_EQ(c.api()->encode(codec.get(), src.data(), n_rows, rows.data(), &err), SL_OK) << err.message;
    ASSERT_EQ(c.api()->decode(codec.get(), rows.data(), n_rows, back.data(), &err), SL_OK) << err.message;
    for (std::size_t i = 0; i < src.size(); ++i) {
      if (c.bytes_per_value == 4)
        ASSERT_EQ(back[i], src[i]) << "value " << i;  // exact, bit for bit
      else
        ASSERT_NEAR(back[i], src[i], std::abs(src[i]) * kHalfRelative + 1e-7) << "value " << i;
    }
  }
}

// Both hooks sets: fused CPU attention, and OpenCL source so device backends attend natively.
TEST_P(BuiltinCodec, HasAllFusedHooksAndOpenClSource) {
  const auto* api = GetParam().api();
  EXPECT_EQ(api->struct_size, sizeof(sl_kvcodec_api));
  EXPECT_NE(api->query_state_bytes, nullptr);
  EXPECT_NE(api->prepare_query, nullptr);
  EXPECT_NE(api->score_keys, nullptr);
  EXPECT_NE(api->accumulate_values, nullptr);
  EXPECT_NE(api->finish_values, nullptr);
  ASSERT_NE(api->opencl_source, nullptr);
  sl_kvcodec* codec = nullptr;
  sl_error err{};
  ASSERT_EQ(api->create(64, SL_KV_KEYS, "", &codec, &err), SL_OK) << err.message;
  const char* source = api->opencl_source(codec);
  ASSERT_NE(source, nullptr);
  EXPECT_NE(std::string(source).find("SL_KV_FN"), std::string::npos);  // the docs/PLUGINS.md contract
  api->destroy(codec);
}

// The fused hooks must agree with decode-then-dot on the same stored rows, including rows laid out
// with a stride larger than row_bytes (as pages interleave them) and head dims past 512 (chunked).
TEST_P(BuiltinCodec, FusedHooksAgreeWithDecodeThenDot) {
  const auto& c = GetParam();
  for (uint32_t head_dim : {3u, 64u, 130u, 600u}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    Codec keys(c.api(), head_dim, SL_KV_KEYS), values(c.api(), head_dim, SL_KV_VALUES);
    const uint32_t n_rows = 23, row_bytes = keys.format().row_bytes;
    const std::size_t stride = row_bytes + 24;
    const auto src = random_values(static_cast<std::size_t>(n_rows) * head_dim, 7 + head_dim);
    std::vector<std::byte> rows(n_rows * stride);
    sl_error err{};
    for (uint32_t i = 0; i < n_rows; ++i)
      ASSERT_EQ(c.api()->encode(keys.get(), src.data() + i * head_dim, 1, rows.data() + i * stride, &err), SL_OK);
    std::vector<float> decoded(src.size());
    for (uint32_t i = 0; i < n_rows; ++i)
      ASSERT_EQ(c.api()->decode(keys.get(), rows.data() + i * stride, 1, decoded.data() + i * head_dim, &err), SL_OK);

    // Keys.
    const auto q = random_values(head_dim, 99);
    std::vector<std::byte> state(c.api()->query_state_bytes(keys.get()));
    c.api()->prepare_query(keys.get(), q.data(), state.data());
    std::vector<float> scores(n_rows, NAN);
    c.api()->score_keys(keys.get(), state.data(), rows.data(), stride, n_rows, scores.data());
    for (uint32_t i = 0; i < n_rows; ++i) {
      double ref = 0, magnitude = 0;
      for (uint32_t d = 0; d < head_dim; ++d) {
        ref += static_cast<double>(q[d]) * decoded[i * head_dim + d];
        magnitude += std::abs(static_cast<double>(q[d]) * decoded[i * head_dim + d]);
      }
      EXPECT_NEAR(scores[i], ref, 1e-5 * magnitude + 1e-6) << "row " << i;
    }

    // Values: acc starts non-zero to show the hook adds rather than overwrites.
    const auto weights = random_values(n_rows, 5);
    const sl_kv_format vf = values.format();
    std::vector<float> acc(vf.domain_dim, 0.5f), out(head_dim, NAN);
    c.api()->accumulate_values(values.get(), rows.data(), stride, n_rows, weights.data(), acc.data());
    c.api()->finish_values(values.get(), acc.data(), out.data());
    for (uint32_t d = 0; d < head_dim; ++d) {
      double ref = 0.5, magnitude = 0.5;
      for (uint32_t i = 0; i < n_rows; ++i) {
        ref += static_cast<double>(weights[i]) * decoded[i * head_dim + d];
        magnitude += std::abs(static_cast<double>(weights[i]) * decoded[i * head_dim + d]);
      }
      EXPECT_NEAR(out[d], ref, 1e-5 * magnitude + 1e-6) << "dim " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, BuiltinCodec, ::testing::ValuesIn(kCodecs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BuiltinF16Codec, RoundsToNearestHalf) {
  Codec codec(builtin_f16_codec(), 4, SL_KV_KEYS);
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties go to even (1.0).
  const float src[4] = {1.0f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 65504.0f};
  uint16_t stored[4];
  float back[4];
  sl_error err{};
  ASSERT_EQ(builtin_f16_codec()->encode(codec.get(), src, 1, stored, &err), SL_OK);
  ASSERT_EQ(builtin_f16_codec()->decode(codec.get(), stored, 1, back, &err), SL_OK);
  EXPECT_EQ(stored[0], 0x3c00);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], 1.0f + 4.0f / 2048.0f);
  EXPECT_EQ(back[3], 65504.0f);
}

}  // namespace
}  // namespace sluice
