#pragma once
// A backend plugin under test, opened through the host's loader, and helpers to move data in and out
// of it. The op tests are TEST_Ps on BackendOpsTest (or fixtures derived from it), instantiated over
// backends_under_test(), which each backend's test executable defines in one small file.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/backend_handle.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"

namespace sluice::test {

struct BackendUnderTest {
  std::string name;                   // the plugin's descriptor name: "cpu", "opencl"
  std::filesystem::path plugin_dir;   // where its sluice-*.so lies
  std::string device;                 // "" = the plugin's best device
  std::string options = {};           // sl_backend_config.options
};
void PrintTo(const BackendUnderTest& b, std::ostream* os);

// The backends this test executable runs the suite on (defined per executable, e.g. the CPU's).
std::vector<BackendUnderTest> backends_under_test();
// Test name suffix: the backend's name.
std::string backend_test_name(const ::testing::TestParamInfo<BackendUnderTest>& info);

// Values rounded to a weight dtype, as the backend will see them.
float round_to_dtype(float v, sl_dtype dtype);

// A weight uploaded to the backend; `values` are the rounded floats the reference must use.
struct DeviceWeight {
  std::vector<float> values;  // [rows * cols]
  Buffer buffer;
  sl_weight weight{};
  const sl_weight* get() const { return &weight; }
};

class BackendOpsTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override;
  void TearDown() override;

  const sl_backend_api* api() const { return backend_->api(); }
  // The backend's ops one at a time, each a graph of its node(s) (plugin/op_calls.h).
  OpCalls& ops() { return *ops_; }
  sl_backend* be() const { return backend_->raw(); }
  BackendHandle& backend() const { return *backend_; }

  Buffer upload(const std::vector<float>& values);
  Buffer upload_bytes(const void* data, std::size_t bytes);
  Buffer zeros(std::size_t n_floats);
  std::vector<float> download(const Buffer& buffer, std::size_t n_floats);
  // rows x cols of N(0, stddev) rounded to dtype.
  DeviceWeight make_weight(sl_dtype dtype, uint32_t rows, uint32_t cols, float stddev = 1.0f, float mean = 0.0f);
  // One batch: each token's sequence slot and position, the sequences' page tables and, where
  // given, their window tables (WINDOW layers), state slots (STATE layers) and recent tables: batch_view (op_calls.h).
  void begin_batch(const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_slots, uint32_t n_seqs,
                   uint32_t max_pages, const std::vector<int32_t>& page_table, const std::vector<int32_t>* window_table = nullptr,
                   const std::vector<int32_t>* state_slots = nullptr, const std::vector<int32_t>* recent_table = nullptr);

  std::vector<float> random(std::size_t n, float stddev = 1.0f, float mean = 0.0f);

  std::mt19937 rng_{1234};

 private:
  std::unique_ptr<PluginRegistry> registry_;
  std::unique_ptr<BackendHandle> backend_;
  std::unique_ptr<OpCalls> ops_;
};

const char* dtype_name(sl_dtype dtype);
inline const sl_dtype kWeightDtypes[] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};

// |got - ref| <= rel * magnitude + abs, where magnitude is the sum of the absolute terms that made ref
// (so cancellation does not make the bound meaninglessly tight).
#define EXPECT_CLOSE_TO_REFERENCE(got, ref, magnitude, rel, abs_floor) \
  EXPECT_NEAR((got), (ref), (rel) * (magnitude) + (abs_floor))

}  // namespace sluice::test
