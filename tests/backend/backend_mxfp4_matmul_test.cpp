// MATMUL with MXFP4 weights (ABI 2.3: e2m1 codes, a power-of-two scale per 32 columns) on a backend
// that says it runs them, against double-precision sums of the decoded values (every MXFP4 value and
// its product with a float32 activation are exact in double). The bound is float32 accumulation's:
// a sum of m terms in float32, in any order and with or without fused multiply-adds, lies within
// gamma_m = m u / (1 - m u), u = 2^-24, of the exact sum, relative to the sum of the terms' magnitudes
// (m: the columns, and one more for a bias). Below float32's normal range (2^-126) a device may flush
// values to zero (OpenCL allows it for single precision): a weight that small may count as zero, and
// each product and each partial sum may lose up to 2^-126 — allowed for by name, never by widening
// the relative bound. Shapes: output rows that are no multiple of anything, 1 to 17 activation rows
// (decode and prefill paths), one to 90 blocks a row; every code in every row; scales from 2^-127 to
// 2^127 with activations that keep the products inside float32's range.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend_fixture.h"

namespace sluice::test {
namespace {

constexpr double kE2m1[16] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};
const double kSmallest = std::ldexp(1.0, -126);  // float32's smallest normal value

struct Mxfp4Weight {
  std::vector<double> values;  // decoded [rows * cols]
  Buffer codes, scales;
  sl_weight weight{};
};

class Mxfp4Matmul : public BackendOpsTest {
 protected:
  bool supported() { return backend().runs_mxfp4(16, 64); }
  static sl_weight mxfp4_form(uint32_t rows, uint32_t cols) {
    sl_weight form{};
    form.struct_size = sizeof(form);
    form.dtype = SL_DTYPE_E2M1;
    form.bits = 4;
    form.group_size = 32;
    form.scale_dtype = SL_DTYPE_E8M0;
    form.rows = rows;
    form.cols = cols;
    return form;
  }

  // code_of(r, c) and scale_of(r, block) give each value's code and its block's scale byte.
  template <class Code, class Scale>
  Mxfp4Weight make(uint32_t rows, uint32_t cols, Code code_of, Scale scale_of) {
    Mxfp4Weight w;
    std::vector<uint8_t> codes(std::size_t(rows) * cols / 2, 0), scales(std::size_t(rows) * cols / 32);
    w.values.resize(std::size_t(rows) * cols);
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t b = 0; b < cols / 32; ++b) scales[std::size_t(r) * cols / 32 + b] = scale_of(r, b);
      for (uint32_t c = 0; c < cols; ++c) {
        const uint8_t code = code_of(r, c) & 15;
        const std::size_t i = std::size_t(r) * cols + c;
        codes[i / 2] |= static_cast<uint8_t>(c % 2 ? code << 4 : code);
        w.values[i] = std::ldexp(kE2m1[code], int(scales[i / 32]) - 127);
      }
    }
    w.codes = upload_bytes(codes.data(), codes.size());
    w.scales = upload_bytes(scales.data(), scales.size());
    sl_weight& s = w.weight;
    s.struct_size = sizeof(s);
    s.data = w.codes.get();
    s.dtype = SL_DTYPE_E2M1;
    s.rows = rows;
    s.cols = cols;
    s.bits = 4;
    s.group_size = 32;
    s.scale_dtype = SL_DTYPE_E8M0;
    s.scales = w.scales.get();
    return w;
  }

  // out = x · wᵀ (+ bias) on the backend, each output against the reference within the bound above.
  void expect_matches(const Mxfp4Weight& w, const std::vector<float>& x, uint32_t n, const DeviceWeight* bias, const std::string& what) {
    const uint32_t rows = w.weight.rows, cols = w.weight.cols;
    auto xb = upload(x);
    auto out = zeros(std::size_t(n) * rows);
    sl_error err{};
    ASSERT_EQ(ops().matmul(xb.get(), n, &w.weight, bias ? bias->get() : nullptr, out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, std::size_t(n) * rows);
    const double m = cols + (bias ? 1 : 0), u = std::ldexp(1.0, -24), gamma = m * u / (1 - m * u);
    int failures = 0;
    for (uint32_t t = 0; t < n && failures < 5; ++t)
      for (uint32_t r = 0; r < rows && failures < 5; ++r) {
        double ref = bias ? bias->values[r] : 0.0, mag = std::abs(ref), flushed = 2 * m * kSmallest;
        for (uint32_t k = 0; k < cols; ++k) {
          const double wv = w.values[std::size_t(r) * cols + k], p = wv * double(x[std::size_t(t) * cols + k]);
          ref += p;
          mag += std::abs(p);
          if (std::abs(wv) < kSmallest) flushed += std::abs(p);
        }
        const double g = got[std::size_t(t) * rows + r];
        const bool ok = std::abs(g - ref) <= gamma * mag + flushed;
        failures += !ok;
        EXPECT_TRUE(ok) << what << ": " << rows << "x" << cols << " n=" << n << " token " << t << " row " << r << ": got " << g
                        << ", reference " << ref << ", bound " << gamma * mag + flushed;
      }
  }

  std::vector<float> activations(std::size_t count, int exponent) {
    std::vector<float> x = random(count);
    for (float& v : x) v = std::ldexp(v, exponent);
    return x;
  }
};

TEST_P(Mxfp4Matmul, EveryShapeMatchesTheDecodedValues) {
  if (!supported()) GTEST_SKIP() << "this backend does not multiply MXFP4 weights";
  std::uniform_int_distribution<int> code(0, 15), scale(117, 137);  // blocks from 2^-10 to 2^10
  for (uint32_t cols : {32u, 96u, 416u, 2880u})  // 2880: gpt-oss's hidden and expert widths
    for (uint32_t rows : {1u, 3u, 67u, 130u}) {
      auto w = make(rows, cols, [&](uint32_t, uint32_t) { return static_cast<uint8_t>(code(rng_)); },
                    [&](uint32_t, uint32_t) { return static_cast<uint8_t>(scale(rng_)); });
      for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 17u}) {
        expect_matches(w, activations(std::size_t(n) * cols, 0), n, nullptr, "random codes");
        if (HasFailure()) return;
      }
    }
}

TEST_P(Mxfp4Matmul, BiasIsAddedOnBothPaths) {
  if (!supported()) GTEST_SKIP() << "this backend does not multiply MXFP4 weights";
  std::uniform_int_distribution<int> code(0, 15), scale(120, 130);
  const uint32_t rows = 37, cols = 192;
  auto w = make(rows, cols, [&](uint32_t, uint32_t) { return static_cast<uint8_t>(code(rng_)); },
                [&](uint32_t, uint32_t) { return static_cast<uint8_t>(scale(rng_)); });
  const DeviceWeight bias = make_weight(SL_DTYPE_F32, 1, rows);
  for (uint32_t n : {1u, 4u, 12u}) expect_matches(w, activations(std::size_t(n) * cols, 0), n, &bias, "with bias");
}

// Each row one scale for both its blocks, each block every code twice (in an order of its own). The
// scales run to both ends of e8m0 — 2^-127 (a subnormal scale), 2^127 — with activations that bring the
// products back to ordinary magnitudes: small scales against large activations, large against small.
// At the top, codes whose value would leave float32's range (6 · 2^127 is past its largest value;
// the form takes values as float32, sluice/graph.h) are replaced by smaller ones.
TEST_P(Mxfp4Matmul, EveryCodeAndExtremeScales) {
  if (!supported()) GTEST_SKIP() << "this backend does not multiply MXFP4 weights";
  struct Range {
    std::vector<uint8_t> scales;
    int x_exponent;
  };
  const Range ranges[] = {{{0, 1, 2, 3, 10, 64, 126, 127}, 100}, {{128, 150, 200, 250, 251, 252, 253, 254}, -100}};
  for (const Range& range : ranges) {
    const uint32_t rows = static_cast<uint32_t>(range.scales.size()) * 2, cols = 64;
    std::vector<std::vector<uint8_t>> order(rows);  // a permutation of 0..31 per row: code = index % 16
    for (auto& o : order) {
      for (uint8_t i = 0; i < 32; ++i) o.push_back(i);
      std::shuffle(o.begin(), o.end(), rng_);
    }
    auto scale_of = [&](uint32_t r, uint32_t) { return range.scales[r / 2]; };
    auto code_of = [&](uint32_t r, uint32_t c) {
      uint8_t code = order[r][c % 32] % 16;
      const uint8_t s = scale_of(r, 0), magnitude = code & 7;
      if (s == 254 && magnitude > 3) code -= 4;  // |value| <= 1.5 · 2^127
      if (s == 253 && magnitude > 5) code -= 2;  // |value| <= 3 · 2^126
      return code;
    };
    auto w = make(rows, cols, code_of, scale_of);
    for (uint32_t n : {1u, 3u, 9u}) {
      expect_matches(w, activations(std::size_t(n) * cols, range.x_exponent), n, nullptr,
                     "scales " + std::to_string(range.scales.front()) + ".." + std::to_string(range.scales.back()));
      if (HasFailure()) return;
    }
  }
}

TEST_P(Mxfp4Matmul, OnlyProductsTakeTheFormAndMalformedWeightsAreRefused) {
  if (!supported()) GTEST_SKIP() << "this backend does not multiply MXFP4 weights";
  EXPECT_FALSE(backend().runs_weight(SL_OP_EMBED, mxfp4_form(16, 64)));
  // Columns that are not whole blocks: a status, nothing computed.
  auto w = make(4, 64, [](uint32_t, uint32_t) { return uint8_t(3); }, [](uint32_t, uint32_t) { return uint8_t(127); });
  sl_weight bad = w.weight;
  bad.cols = 48;
  auto x = zeros(64);
  auto out = zeros(4);
  sl_error err{};
  EXPECT_NE(ops().matmul(x.get(), 1, &bad, nullptr, out.get(), &err), SL_OK);
  EXPECT_STRNE(err.message, "");
  bad = w.weight;
  bad.scales = nullptr;
  err = {};
  EXPECT_NE(ops().matmul(x.get(), 1, &bad, nullptr, out.get(), &err), SL_OK);
  EXPECT_STRNE(err.message, "");
}

// The host offers the form only to a table of ABI 2.3 or later: the same plugin's table declared 2.2
// (what a plugin built before the form looks like to the host) is not asked, though it would answer yes.
TEST_P(Mxfp4Matmul, TheHostOffersTheFormOnlyToTablesOfTwoPointThree) {
  if (!supported()) GTEST_SKIP() << "this backend does not multiply MXFP4 weights";
  sl_backend_api older = *api();
  older.abi_version = SL_ABI_VERSION_OF(2, 2);
  auto handle = BackendHandle::open(&older, GetParam().name, GetParam().device, 1, GetParam().options);
  ASSERT_TRUE(handle.ok()) << handle.message();
  EXPECT_TRUE((*handle)->runs_weight(SL_OP_MATMUL, mxfp4_form(16, 64)));  // its supports_node alone says yes
  EXPECT_FALSE((*handle)->runs_mxfp4(16, 64));
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backend, Mxfp4Matmul, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace sluice::test
