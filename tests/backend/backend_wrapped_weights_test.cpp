// A quantized weight whose words, scales and biases are wrapped host memory at any address — as the
// resident expert store lends them: a tensor's offset in a safetensors file is whatever the writer
// made it, often two bytes past a word. A backend that reads host memory in place must still give
// the product of the same weight uploaded (PoCL read vectors from such a start and faulted).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant_weight_test.h"

namespace sluice::test {
namespace {

class WrappedWeightTest : public QuantWeightTest {};

TEST_P(WrappedWeightTest, QuantizedWeightWrappedAtAnOddAddressMultipliesAsUploaded) {
  constexpr uint32_t rows = 96, cols = 704;  // Gemma 4 26B-A4B's expert width
  const QWeight uploaded = make_quantized(4, 64, rows, cols);
  const std::size_t word_bytes = std::size_t(rows) * cols / 2, param_bytes = std::size_t(rows) * (cols / 64) * 2;
  std::vector<std::byte> words(word_bytes), scales(param_bytes), biases(param_bytes);
  ASSERT_TRUE(backend().download(uploaded.words, 0, words.data(), word_bytes));
  ASSERT_TRUE(backend().download(uploaded.scales, 0, scales.data(), param_bytes));
  ASSERT_TRUE(backend().download(uploaded.biases, 0, biases.data(), param_bytes));
  const auto x = activations(3, cols);
  auto xb = upload(x);
  sl_error err{};
  std::vector<float> expected[4];  // by activation rows: the uploaded weight's product
  for (uint32_t n : {1u, 3u}) {
    auto want = zeros(std::size_t(n) * rows);
    ASSERT_EQ(ops().matmul(xb.get(), n, &uploaded.weight, nullptr, want.get(), &err), SL_OK) << err.message;
    expected[n] = download(want, std::size_t(n) * rows);
  }
  for (std::size_t shift : {2u, 6u, 18u, 64u}) {  // past 2-, 4-, 16-byte and page-friendly starts
    // One host block holding the three parts back to back, each `shift` bytes past a 128-byte line.
    std::vector<std::byte> host(3 * (word_bytes + 256));
    auto* base = host.data() + (128 - reinterpret_cast<uintptr_t>(host.data()) % 128) % 128;
    std::byte* at[3] = {base + shift, base + word_bytes + 128 + shift, base + word_bytes + param_bytes + 256 + shift};
    std::memcpy(at[0], words.data(), word_bytes);
    std::memcpy(at[1], scales.data(), param_bytes);
    std::memcpy(at[2], biases.data(), param_bytes);
    auto w = backend().wrap_host(at[0], word_bytes);
    auto s = backend().wrap_host(at[1], param_bytes);
    auto b = backend().wrap_host(at[2], param_bytes);
    ASSERT_TRUE(w && s && b);
    sl_weight wrapped = uploaded.weight;
    wrapped.data = w->get();
    wrapped.scales = s->get();
    wrapped.biases = b->get();
    for (uint32_t n : {1u, 3u}) {  // the one-row decode kernels and the batched ones
      auto out = zeros(std::size_t(n) * rows);
      ASSERT_EQ(ops().matmul(xb.get(), n, &wrapped, nullptr, out.get(), &err), SL_OK) << err.message;
      const auto got = download(out, std::size_t(n) * rows);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], expected[n][i], 1e-5f * (1.0f + std::abs(expected[n][i]))) << "shift " << shift << " n " << n << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backend, WrappedWeightTest, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace
}  // namespace sluice::test
