// The KV codec plugins driven through their C tables, as loaded by the host from build/lib:
// formats and bits per value, encode→decode round trips, fused hooks equal to decode-then-dot and
// decode-then-accumulate, degenerate rows, options and head_dim validation, OpenCL sources.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

struct CodecSpec {
  std::string name;
  double max_relative_mse;  // E‖x − x̂‖² / ‖x‖² for Gaussian rows, with margin
  double bits_at_64, bits_at_128;
  uint32_t head_dim_multiple = 16;  // head dims the codec accepts
};

const CodecSpec kSpecs[] = {
    {"q8", 2e-4, 8.5, 8.5, 8},  // the 8× outlier channel sets its block's scale
    {"q4", 0.2, 4.5, 4.5, 32},  // q4_0: no rotation, so the outlier costs its whole block
    {"turbo4", 0.0093 * 1.25, 4.25, 4.125},
    {"turbo3", 0.034 * 1.25, 3.25, 3.125},
    {"turbo2", 0.117 * 1.25, 2.25, 2.125},
    {"turbo-prod", 0.034 * 2.5, 4.5, 4.25},  // 3-bit MSE + the QJL term (unbiased, not MSE-optimal)
};
void PrintTo(const CodecSpec& s, std::ostream* os) { *os << s.name; }

const uint32_t kHeadDims[] = {64, 80, 96, 128, 256};

const PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    reg->scan(test::binary_path("lib"));
    return reg;
  }();
  return *r;
}

const sl_kvcodec_api* api_of(const std::string& name) {
  const auto* rec = registry().find(SL_PLUGIN_KVCODEC, name);
  return rec ? static_cast<const sl_kvcodec_api*>(rec->descriptor->api) : nullptr;
}

class Instance {
 public:
  Instance(const sl_kvcodec_api* api, uint32_t head_dim, sl_kv_role role, const char* options = "") : api_(api) {
    sl_error err{};
    status_ = api_->create(head_dim, role, options, &codec_, &err);
    message_ = err.message;
    if (codec_) {
      format_.struct_size = sizeof(format_);
      api_->get_format(codec_, &format_);
    }
  }
  ~Instance() {
    if (codec_) api_->destroy(codec_);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  sl_status status() const { return status_; }
  const std::string& message() const { return message_; }
  const sl_kvcodec* get() const { return codec_; }
  const sl_kv_format& format() const { return format_; }
  const sl_kvcodec_api* api() const { return api_; }

  std::vector<std::byte> encode(const std::vector<float>& x, uint32_t rows) const {
    std::vector<std::byte> out(static_cast<std::size_t>(rows) * format_.row_bytes);
    sl_error err{};
    EXPECT_EQ(api_->encode(codec_, x.data(), rows, out.data(), &err), SL_OK) << err.message;
    return out;
  }
  std::vector<float> decode(const std::vector<std::byte>& rows_bytes, uint32_t rows) const {
    std::vector<float> out(static_cast<std::size_t>(rows) * format_.head_dim);
    sl_error err{};
    EXPECT_EQ(api_->decode(codec_, rows_bytes.data(), rows, out.data(), &err), SL_OK) << err.message;
    return out;
  }

 private:
  const sl_kvcodec_api* api_;
  sl_kvcodec* codec_ = nullptr;
  sl_status status_;
  std::string message_;
  sl_kv_format format_{};
};

std::vector<float> gaussian(std::size_t n, unsigned seed, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(mean, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

class KvCodecPlugin : public ::testing::TestWithParam<CodecSpec> {
 protected:
  void SetUp() override {
    api_ = api_of(GetParam().name);
    ASSERT_NE(api_, nullptr) << "no kvcodec plugin '" << GetParam().name << "' in " << test::binary_path("lib");
  }
  const sl_kvcodec_api* api_ = nullptr;
};

TEST_P(KvCodecPlugin, TableIsCompleteWithFusedHooks) {
  EXPECT_EQ(api_->struct_size, sizeof(sl_kvcodec_api));
  EXPECT_NE(api_->query_state_bytes, nullptr);
  EXPECT_NE(api_->prepare_query, nullptr);
  EXPECT_NE(api_->score_keys, nullptr);
  EXPECT_NE(api_->accumulate_values, nullptr);
  EXPECT_NE(api_->finish_values, nullptr);
}

TEST_P(KvCodecPlugin, FormatAndBitsPerValueForEveryHeadDim) {
  for (uint32_t d : kHeadDims) {
    if (d % GetParam().head_dim_multiple) continue;
    Instance c(api_, d, SL_KV_KEYS);
    ASSERT_EQ(c.status(), SL_OK) << d << ": " << c.message();
    const auto& f = c.format();
    EXPECT_EQ(f.head_dim, d);
    EXPECT_GE(f.domain_dim, d);
    EXPECT_FLOAT_EQ(f.bits_per_value, f.row_bytes * 8.0f / d);
    EXPECT_EQ(f.row_bytes % f.bytes_per_block, 0u);
    EXPECT_EQ(d % f.values_per_block, 0u);
    if (d == 64) {
      EXPECT_FLOAT_EQ(f.bits_per_value, GetParam().bits_at_64);
    }
    if (d == 128) {
      EXPECT_FLOAT_EQ(f.bits_per_value, GetParam().bits_at_128);
    }
  }
}

TEST_P(KvCodecPlugin, EncodeDecodeRoundTripWithinTheCodecsDistortion) {
  for (uint32_t d : kHeadDims)
    for (sl_kv_role role : {SL_KV_KEYS, SL_KV_VALUES}) {
      if (d % GetParam().head_dim_multiple) continue;
      Instance c(api_, d, role);
      ASSERT_EQ(c.status(), SL_OK) << c.message();
      const uint32_t rows = 200;
      // Rows with an offset and one outlier channel, like real keys.
      auto x = gaussian(static_cast<std::size_t>(rows) * d, d + role, 0.3f);
      for (uint32_t r = 0; r < rows; ++r) x[r * d + 3] *= 8.0f;
      const auto back = c.decode(c.encode(x, rows), rows);
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        err += (x[i] - back[i]) * (x[i] - back[i]);
        norm += x[i] * x[i];
      }
      EXPECT_LT(err / norm, GetParam().max_relative_mse) << "head_dim " << d << " role " << role;
    }
}

TEST_P(KvCodecPlugin, FusedScoresEqualDecodeThenDot) {
  for (uint32_t d : kHeadDims) {
    if (d % GetParam().head_dim_multiple) continue;
    Instance c(api_, d, SL_KV_KEYS);
    const uint32_t rows = 37;
    const auto x = gaussian(static_cast<std::size_t>(rows) * d, 11 * d);
    const auto q = gaussian(d, 5 * d);
    const auto stored = c.encode(x, rows);
    const auto decoded = c.decode(stored, rows);
    std::vector<std::byte> state(api_->query_state_bytes(c.get()));
    api_->prepare_query(c.get(), q.data(), state.data());
    std::vector<float> scores(rows);
    api_->score_keys(c.get(), state.data(), stored.data(), c.format().row_bytes, rows, scores.data());
    for (uint32_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (uint32_t j = 0; j < d; ++j) {
        ref += static_cast<double>(q[j]) * decoded[r * d + j];
        mag += std::fabs(q[j] * decoded[r * d + j]);
      }
      EXPECT_NEAR(scores[r], ref, 1e-5 * mag + 1e-6) << "head_dim " << d << " row " << r;
    }
  }
}

TEST_P(KvCodecPlugin, FusedValuesEqualDecodeThenAccumulate) {
  for (uint32_t d : kHeadDims) {
    if (d % GetParam().head_dim_multiple) continue;
    Instance c(api_, d, SL_KV_VALUES);
    const uint32_t rows = 41;
    const auto x = gaussian(static_cast<std::size_t>(rows) * d, 13 * d);
    auto w = gaussian(rows, 3 * d);
    w[5] = 0.0f;
    const auto stored = c.encode(x, rows);
    const auto decoded = c.decode(stored, rows);
    std::vector<float> acc(c.format().domain_dim, 0.0f), out(d);
    // Two calls (as the backend does per page run) into one accumulator.
    api_->accumulate_values(c.get(), stored.data(), c.format().row_bytes, 20, w.data(), acc.data());
    api_->accumulate_values(c.get(), stored.data() + 20 * c.format().row_bytes, c.format().row_bytes, rows - 20,
                            w.data() + 20, acc.data());
    api_->finish_values(c.get(), acc.data(), out.data());
    for (uint32_t j = 0; j < d; ++j) {
      double ref = 0, mag = 0;
      for (uint32_t r = 0; r < rows; ++r) {
        ref += static_cast<double>(w[r]) * decoded[r * d + j];
        mag += std::fabs(w[r] * decoded[r * d + j]);
      }
      EXPECT_NEAR(out[j], ref, 1e-5 * mag + 1e-6) << "head_dim " << d << " coordinate " << j;
    }
  }
}

TEST_P(KvCodecPlugin, ZeroAndNonFiniteRowsDecodeToFiniteValues) {
  const uint32_t d = 64;
  Instance c(api_, d, SL_KV_KEYS);
  std::vector<float> x(3 * d, 0.0f);
  x[d + 1] = NAN;
  x[2 * d + 2] = INFINITY;
  const auto back = c.decode(c.encode(x, 3), 3);
  for (uint32_t j = 0; j < d; ++j) EXPECT_EQ(back[j], 0.0f);
  for (float v : back) EXPECT_TRUE(std::isfinite(v));
}

TEST_P(KvCodecPlugin, BadOptionsAndHeadDimsAreRefusedWithAMessage) {
  Instance typo(api_, 64, SL_KV_KEYS, "nrom=raw");
  EXPECT_EQ(typo.status(), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(typo.message().find("nrom"), std::string::npos) << typo.message();
  Instance malformed(api_, 64, SL_KV_KEYS, "justtext");
  EXPECT_EQ(malformed.status(), SL_ERR_INVALID_ARGUMENT);
  Instance odd(api_, 36, SL_KV_KEYS);
  EXPECT_EQ(odd.status(), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(odd.message().find("head_dim"), std::string::npos) << odd.message();
}

INSTANTIATE_TEST_SUITE_P(All, KvCodecPlugin, ::testing::ValuesIn(kSpecs),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(KvCodecOptions, TurboTakesSeedNormAndProdBits) {
  const auto* t4 = api_of("turbo4");
  const auto* prod = api_of("turbo-prod");
  ASSERT_TRUE(t4 && prod);
  Instance a(t4, 64, SL_KV_KEYS, "seed=7:norm=ls");
  EXPECT_EQ(a.status(), SL_OK) << a.message();
  Instance bad(t4, 64, SL_KV_KEYS, "norm=maybe");
  EXPECT_EQ(bad.status(), SL_ERR_INVALID_ARGUMENT);
  Instance three_rotations(t4, 64, SL_KV_KEYS, "rot=3");
  EXPECT_EQ(three_rotations.status(), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(three_rotations.message().find("rotations"), std::string::npos) << three_rotations.message();
  // The fused domain holds one rotated copy per candidate; bits per value do not change.
  Instance one(t4, 64, SL_KV_VALUES, "rot=1"), sixteen(t4, 64, SL_KV_VALUES, "rot=16");
  EXPECT_EQ(one.format().domain_dim, 64u);
  EXPECT_EQ(sixteen.format().domain_dim, 16u * 64u);
  EXPECT_EQ(one.format().row_bytes, sixteen.format().row_bytes);
  Instance p3(prod, 64, SL_KV_KEYS, "bits=3");
  ASSERT_EQ(p3.status(), SL_OK) << p3.message();
  EXPECT_FLOAT_EQ(p3.format().bits_per_value, 3.5f);  // 2-bit MSE + f16 scale, 1-bit signs + f16 norm
  Instance p9(prod, 64, SL_KV_KEYS, "bits=9");
  EXPECT_EQ(p9.status(), SL_ERR_INVALID_ARGUMENT);
}

TEST(KvCodecOptions, DifferentSeedsGiveDifferentRotations) {
  const auto* t4 = api_of("turbo4");
  ASSERT_TRUE(t4);
  Instance a(t4, 64, SL_KV_KEYS, "seed=1"), b(t4, 64, SL_KV_KEYS, "seed=2");
  const auto x = gaussian(64, 1);
  EXPECT_NE(a.encode(x, 1), b.encode(x, 1));
}

TEST(KvCodecOpenCl, BlockAndTurboCodecsGiveSourceForTheBackendContract) {
  // docs/PLUGINS.md: encode_row and load, named through SL_KV_FN (compiled and checked against the
  // host codec in kvcodec_opencl_source_test where an OpenCL device exists).
  for (const char* name : {"turbo2", "turbo3", "turbo4", "q8", "q4"}) {
    const auto* api = api_of(name);
    ASSERT_TRUE(api);
    Instance k(api, 96, SL_KV_KEYS);
    const char* src = api->opencl_source(k.get());
    ASSERT_NE(src, nullptr) << name;
    const std::string s(src);
    EXPECT_NE(s.find("SL_KV_FN(encode_row)"), std::string::npos) << name;
    EXPECT_NE(s.find("SL_KV_FN(load)"), std::string::npos) << name;
    if (s.rfind("#define SL_TQ(", 0) == 0) {
      EXPECT_NE(s.find("SL_TQ_N_BLOCKS 2u"), std::string::npos);  // 96 = 64 + 32
    }
  }
  Instance prod(api_of("turbo-prod"), 64, SL_KV_KEYS);
  EXPECT_EQ(api_of("turbo-prod")->opencl_source(prod.get()), nullptr);  // host path on an OpenCL backend
}

}  // namespace
}  // namespace sluice
