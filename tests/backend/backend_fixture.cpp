#include "backend_fixture.h"

#include <cctype>
#include <cstring>

#include "util/vec.h"

namespace sluice::test {

void PrintTo(const BackendUnderTest& b, std::ostream* os) {
  *os << b.name << (b.device.empty() ? "" : ":" + b.device) << " from " << b.plugin_dir.string();
}

std::string backend_test_name(const ::testing::TestParamInfo<BackendUnderTest>& info) {
  std::string name = info.param.name + info.param.device + (info.param.options.empty() ? "" : "_" + info.param.options);
  for (auto& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

const char* dtype_name(sl_dtype dtype) {
  switch (dtype) {
    case SL_DTYPE_F32: return "f32";
    case SL_DTYPE_F16: return "f16";
    case SL_DTYPE_BF16: return "bf16";
    default: return "other";
  }
}

namespace {

uint16_t f32_to_bf16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace

float round_to_dtype(float v, sl_dtype dtype) {
  switch (dtype) {
    case SL_DTYPE_F16: return cpu::f16_to_f32(cpu::f32_to_f16(v));
    case SL_DTYPE_BF16: return cpu::bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

void BackendOpsTest::SetUp() {
  const auto& under_test = GetParam();
  registry_ = std::make_unique<PluginRegistry>();
  registry_->scan(under_test.plugin_dir);
  const PluginRecord* record = nullptr;
  for (const auto& r : registry_->records())
    if (r.kind == "backend" && r.name == under_test.name) record = &r;
  ASSERT_NE(record, nullptr) << "no backend plugin '" << under_test.name << "' in " << under_test.plugin_dir;
  if (!record->loaded) GTEST_SKIP() << "backend '" << under_test.name << "' " << record->status;
  auto opened = BackendHandle::open(static_cast<const sl_backend_api*>(record->descriptor->api), under_test.name,
                                    under_test.device, 2, under_test.options);
  if (!opened) GTEST_SKIP() << opened.message();
  backend_ = std::move(*opened);
  ops_ = std::make_unique<OpCalls>(*backend_);
}

void BackendOpsTest::TearDown() {
  ops_.reset();
  backend_.reset();  // before the registry unmaps the plugin
  registry_.reset();
}

Buffer BackendOpsTest::upload_bytes(const void* data, std::size_t bytes) {
  auto buffer = backend_->alloc(bytes);
  EXPECT_TRUE(buffer) << buffer.message();
  if (!buffer) return {};
  auto status = backend_->upload(*buffer, 0, data, bytes);
  EXPECT_TRUE(status) << status.message();
  return std::move(*buffer);
}

Buffer BackendOpsTest::upload(const std::vector<float>& values) {
  return upload_bytes(values.data(), values.size() * sizeof(float));
}

Buffer BackendOpsTest::zeros(std::size_t n_floats) { return upload(std::vector<float>(n_floats, 0.0f)); }

std::vector<float> BackendOpsTest::download(const Buffer& buffer, std::size_t n_floats) {
  std::vector<float> out(n_floats, NAN);
  auto status = backend_->download(buffer, 0, out.data(), n_floats * sizeof(float));
  EXPECT_TRUE(status) << status.message();
  return out;
}

std::vector<float> BackendOpsTest::random(std::size_t n, float stddev, float mean) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng_);
  return v;
}

DeviceWeight BackendOpsTest::make_weight(sl_dtype dtype, uint32_t rows, uint32_t cols, float stddev, float mean) {
  DeviceWeight w;
  w.values = random(static_cast<std::size_t>(rows) * cols, stddev, mean);
  for (auto& v : w.values) v = round_to_dtype(v, dtype);
  if (dtype == SL_DTYPE_F32) {
    w.buffer = upload(w.values);
  } else {
    std::vector<uint16_t> packed(w.values.size());
    for (std::size_t i = 0; i < packed.size(); ++i)
      packed[i] = dtype == SL_DTYPE_F16 ? cpu::f32_to_f16(w.values[i]) : f32_to_bf16(w.values[i]);
    w.buffer = upload_bytes(packed.data(), packed.size() * 2);
  }
  w.weight.struct_size = sizeof(sl_weight);
  w.weight.data = w.buffer.get();
  w.weight.dtype = dtype;
  w.weight.rows = rows;
  w.weight.cols = cols;
  return w;
}

void BackendOpsTest::begin_batch(const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_slots,
                                 uint32_t n_seqs, uint32_t max_pages, const std::vector<int32_t>& page_table,
                                 const std::vector<int32_t>* window_table, const std::vector<int32_t>* state_slots,
                                 const std::vector<int32_t>* recent_table) {
  const sl_batch batch = batch_view(positions, seq_slots, n_seqs, max_pages, page_table, window_table, state_slots, recent_table);
  sl_error err{};
  ASSERT_EQ(ops().begin_batch(&batch, &err), SL_OK) << err.message;
}

}  // namespace sluice::test
