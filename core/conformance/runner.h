#pragma once
// What the conformance checks share (core/conformance/*.cpp): the runner that keeps one result row
// per op, runs its cases on the backend under test (and first on the backend compared with, on the same
// inputs), uploads inputs, builds weights of every form with the float values the reference uses, and
// compares values against their bounds; and the error bounds of float32 arithmetic.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conformance/attention_bounds.h"
#include "conformance/conformance.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"
#include "util/vec.h"

namespace sluice::conformance {

using Clock = std::chrono::steady_clock;

inline uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float round_to(float v, sl_dtype d) {
  if (d == SL_DTYPE_F16) return cpu::f16_to_f32(cpu::f32_to_f16(v));
  if (d == SL_DTYPE_BF16) return cpu::bf16_to_f32(to_bf16(v));
  return v;
}

inline const char* form_name(sl_dtype d, uint32_t bits) {
  static const char* q[] = {"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"};
  if (bits) return q[bits];
  return d == SL_DTYPE_F32 ? "f32" : d == SL_DTYPE_F16 ? "f16" : "bf16";
}

// A failure inside a case: stops that op's remaining cases.
struct CaseFailed {
  std::string what;
};

// One weight on the backend with the float values the reference uses.
struct Weight {
  std::vector<float> values;  // [rows * cols], exactly as the backend should see them
  Buffer data, scales, biases;
  sl_weight w{};
};

// What an op needs of a backend: "" when the backend offers it, else why not ("unsupported",
// "not implemented").
using Needs = std::function<std::string(const BackendHandle&)>;

// Runs each op's cases on the backend under test and checks every value against reference math. With
// a second backend (Options::against) it runs them on that backend first, with the random generator
// reseeded to the op's seed for both passes so the inputs are the same: that pass records each value
// and its bound (and is checked against reference math too), and the pass under test then compares its
// i-th value with the i-th recorded one within the sum of their bounds. Each pass asks its own backend
// (api(), raw(), supports(), matrix_units()), so bodies must ask inside op(), not before it.
class Runner {
 public:
  Runner(const BackendHandle& be, const Options& o) : under_test_(be), be_(&be), opt_(o) {}

  std::vector<OpResult> results;

  // Runs body (its cases) for one result row; body calls check() for each value. An op the backend
  // under test does not offer is a "skipped" row; one the second backend does not offer runs against
  // reference math alone, and the row says why in `against`.
  void op(const std::string& name, const Needs& needs, const std::function<void()>& body) {
    OpResult r;
    r.op = name;
    if (const std::string why = needs ? needs(under_test_) : ""; !why.empty()) {
      r.status = "skipped: " + why;
      results.push_back(r);
      return;
    }
    if (opt_.against) {
      const std::string why = needs ? needs(*opt_.against) : "";
      r.against = why.empty() ? recording_pass(name, body, r.detail) : why;
    }
    pass_ = r.against == "compared" ? Pass::compared : Pass::alone;
    be_ = &under_test_;
    rng_.seed(op_seed(name));
    next_ = 0;
    current_ = &r;
    bool case_failed = false;
    const auto t0 = Clock::now();
    try {
      body();
      if (pass_ == Pass::compared && next_ != recorded_.size()) {
        r.against_worst_ratio = INFINITY;
        if (r.detail.empty())
          r.detail = std::to_string(next_) + " values checked, " + std::to_string(recorded_.size()) + " on " + against_name() +
                     ": the cases differ between the backends";
      }
    } catch (const CaseFailed& f) {
      case_failed = true;
      if (r.detail.empty()) r.detail = f.what;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const bool ok = !case_failed && r.worst_ratio <= 1.0 && r.against_worst_ratio <= 1.0 && r.against != "FAIL";
    r.status = ok ? "pass" : "FAIL";
    current_ = nullptr;
    pass_ = Pass::alone;
    results.push_back(r);
  }

  // The ops of this pass's backend, one graph each (plugin/op_calls.h).
  OpCalls& ops() {
    if (ops_for_ != be_) {
      ops_ = std::make_unique<OpCalls>(*be_);
      ops_for_ = be_;
    }
    return *ops_;
  }

  // Whether the device has matrix units: prefill-sized products and attention may then take f16
  // inputs, and are checked to that precision.
  bool matrix_units() const {
    sl_device_info info{};
    info.struct_size = sizeof(info);
    sl_error err{};
    return be_->api()->get_device_info(be_->raw(), &info, &err) == SL_OK && (info.caps & SL_CAP_MATRIX);
  }

  void new_case(const std::string& what) {
    ++current_->cases;
    case_ = what;
  }

  void check(double got, double ref, double bound, const std::string& where) {
    const double e = std::abs(got - ref);
    current_->max_error = std::max(current_->max_error, std::isnan(got) ? INFINITY : e);
    const double ratio = std::isnan(got) ? INFINITY : e / bound;
    if (ratio > current_->worst_ratio) current_->worst_ratio = ratio;
    if (!(ratio <= 1.0) && current_->detail.empty())
      current_->detail = case_ + ", " + where + ": got " + number(got) + ", want " + number(ref);
    if (pass_ == Pass::recording) recorded_.push_back({got, bound});
    if (pass_ == Pass::compared) compare(got, bound, where);
  }

  void expect_ok(const Status& s, const char* what) {
    if (!s) throw CaseFailed{case_ + ": " + what + ": " + s.message()};
  }
  void expect_ok(sl_status s, const sl_error& err, const char* what) {
    if (s != SL_OK) throw CaseFailed{case_ + ": " + what + ": " + err.message};
  }

  std::vector<float> random(std::size_t n, float stddev = 1.0f, float mean = 0.0f) {
    std::normal_distribution<float> d(mean, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }

  Buffer upload_bytes(const void* p, std::size_t bytes) {
    auto b = be_->alloc(std::max<std::size_t>(bytes, 4));
    expect_ok(b ? Status{} : Status(b.error()), "alloc");
    expect_ok(be_->upload(*b, 0, p, bytes), "upload");
    return std::move(*b);
  }
  Buffer upload(const std::vector<float>& v) { return upload_bytes(v.data(), v.size() * 4); }
  Buffer zeros(std::size_t n) { return upload(std::vector<float>(n, 0.0f)); }
  std::vector<float> download(const Buffer& b, std::size_t n) {
    std::vector<float> out(n);
    expect_ok(be_->download(b, 0, out.data(), n * 4), "download");
    return out;
  }

  Weight weight(sl_dtype dtype, uint32_t rows, uint32_t cols, float stddev = 0.5f, float mean = 0.0f) {
    Weight w;
    w.values = random(std::size_t(rows) * cols, stddev, mean);
    for (auto& v : w.values) v = round_to(v, dtype);
    if (dtype == SL_DTYPE_F32) {
      w.data = upload(w.values);
    } else {
      std::vector<uint16_t> h(w.values.size());
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = dtype == SL_DTYPE_F16 ? cpu::f32_to_f16(w.values[i]) : to_bf16(w.values[i]);
      w.data = upload_bytes(h.data(), h.size() * 2);
    }
    w.w.struct_size = sizeof(sl_weight);
    w.w.data = w.data.get();
    w.w.dtype = dtype;
    w.w.rows = rows;
    w.w.cols = cols;
    return w;
  }

  // Affine-quantized: random codes, bf16 scales and biases; values = scale * q + bias.
  // lead: bytes of padding before the packed words in their buffer (sl_weight.offset), to test
  // kernels whose loads depend on the weights' alignment.
  Weight quant_weight(uint32_t bits, uint32_t group, uint32_t rows, uint32_t cols, uint32_t lead = 0) {
    Weight w;
    const uint32_t groups = cols / group;
    std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1);
    std::uniform_real_distribution<float> sdist(0.5f / (1u << bits), 2.0f / (1u << bits));
    std::vector<uint16_t> s(std::size_t(rows) * groups), b(s.size());
    std::vector<float> sf(s.size()), bf(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      s[i] = to_bf16(sdist(rng_));
      b[i] = to_bf16(random(1, 0.5f)[0]);
      sf[i] = cpu::bf16_to_f32(s[i]);
      bf[i] = cpu::bf16_to_f32(b[i]);
    }
    const std::size_t words_per_row = std::size_t(cols) * bits / 32;
    std::vector<uint32_t> words(rows * words_per_row, 0);
    w.values.resize(std::size_t(rows) * cols);
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        const uint32_t q = code(rng_);
        const std::size_t bit = std::size_t(c) * bits;
        uint32_t* row = words.data() + r * words_per_row;
        row[bit / 32] |= q << (bit % 32);
        if (bit % 32 + bits > 32) row[bit / 32 + 1] |= q >> (32 - bit % 32);
        const std::size_t g = std::size_t(r) * groups + c / group;
        w.values[std::size_t(r) * cols + c] = sf[g] * static_cast<float>(q) + bf[g];
      }
    }
    std::vector<uint32_t> padded(lead / 4, 0xA5A5A5A5u);
    padded.insert(padded.end(), words.begin(), words.end());
    w.data = upload_bytes(padded.data(), padded.size() * 4);
    w.w.offset = lead;
    w.scales = upload_bytes(s.data(), s.size() * 2);
    w.biases = upload_bytes(b.data(), b.size() * 2);
    w.w.struct_size = sizeof(sl_weight);
    w.w.data = w.data.get();
    w.w.dtype = SL_DTYPE_U32;
    w.w.rows = rows;
    w.w.cols = cols;
    w.w.bits = bits;
    w.w.group_size = group;
    w.w.scale_dtype = SL_DTYPE_BF16;
    w.w.scales = w.scales.get();
    w.w.biases = w.biases.get();
    return w;
  }

  // The step's batch (batch_view: the window table and state slots where given).
  void begin_batch(const std::vector<int32_t>& positions, const std::vector<int32_t>& slots, uint32_t n_seqs,
                   uint32_t max_pages, const std::vector<int32_t>& table, const std::vector<int32_t>* window_table = nullptr,
                   const std::vector<int32_t>* state_slots = nullptr) {
    const sl_batch b = batch_view(positions, slots, n_seqs, max_pages, table, window_table, state_slots);
    sl_error err{};
    expect_ok(ops().begin_batch(&b, &err), err, "begin_batch");
  }

  const sl_backend_api* api() const { return be_->api(); }
  sl_backend* raw() const { return be_->raw(); }
  const Options& options() const { return opt_; }
  std::mt19937& rng() { return rng_; }  // reseeded for each op and pass: draw from it, not another

 private:
  enum class Pass { alone, recording, compared };  // recording: the second backend's pass
  struct Recorded {
    double got, bound;
  };

  // The second backend's pass of an op: "compared" when it met reference math, else "FAIL" (and the
  // first failure, named as that backend's, in detail).
  std::string recording_pass(const std::string& name, const std::function<void()>& body, std::string& detail) {
    OpResult scratch;
    pass_ = Pass::recording;
    be_ = opt_.against;
    rng_.seed(op_seed(name));
    recorded_.clear();
    current_ = &scratch;
    bool ok = true;
    try {
      body();
      ok = scratch.worst_ratio <= 1.0;
    } catch (const CaseFailed& f) {
      ok = false;
      if (scratch.detail.empty()) scratch.detail = f.what;
    }
    current_ = nullptr;
    be_ = &under_test_;
    if (ok) return "compared";
    detail = "on " + against_name() + " (the backend compared with): " + scratch.detail;
    return "FAIL";
  }

  void compare(double got, double bound, const std::string& where) {
    if (next_ >= recorded_.size())
      throw CaseFailed{case_ + ", " + where + ": more values checked than on " + against_name() + ": the cases differ between the backends"};
    const Recorded& theirs = recorded_[next_++];
    ++current_->compared;
    const double diff = std::abs(got - theirs.got);
    current_->against_max_diff = std::max(current_->against_max_diff, std::isnan(diff) ? INFINITY : diff);
    const double ratio = std::isnan(diff) ? INFINITY : diff / (bound + theirs.bound);
    current_->against_worst_ratio = std::max(current_->against_worst_ratio, ratio);
    if (!(ratio <= 1.0) && current_->detail.empty())
      current_->detail = case_ + ", " + where + ": got " + number(got) + ", " + against_name() + " got " + number(theirs.got) +
                         " (further apart than the sum of their bounds, " + number(bound + theirs.bound) + ")";
  }

  std::string against_name() const { return opt_.against ? opt_.against->name() : ""; }

  // The op's seed: the same in both passes, and independent of which ops ran before it.
  uint32_t op_seed(const std::string& name) const {
    uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    return h ^ (opt_.seed * 0x9e3779b9u);
  }

  static std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }

  const BackendHandle& under_test_;
  const BackendHandle* be_;  // the backend of the pass running: under_test_ or opt_.against
  Options opt_;
  std::mt19937 rng_;
  Pass pass_ = Pass::alone;
  std::unique_ptr<OpCalls> ops_;
  const BackendHandle* ops_for_ = nullptr;
  std::vector<Recorded> recorded_;  // the second backend's values of the op, in check() order
  std::size_t next_ = 0;            // the next of them to compare with
  OpResult* current_ = nullptr;
  std::string case_;
};


// An op whose weight has a form the backend may not run (dtype, quantization): asked with a weight of
// that form; a backend without it gets a "skipped: unsupported" row.
inline Needs weight_form(sl_op op, sl_dtype dtype, uint32_t bits) {
  return [op, dtype, bits](const BackendHandle& be) {
    sl_weight w{};
    w.struct_size = sizeof(w);
    w.dtype = bits ? SL_DTYPE_U32 : dtype;
    w.bits = bits;
    w.group_size = bits ? 32 : 0;
    w.scale_dtype = SL_DTYPE_F32;
    w.rows = op == SL_OP_RMS_NORM ? 1 : 64;
    w.cols = 64;
    return be.runs_weight(op, w) ? std::string() : std::string("unsupported");
  };
}

inline constexpr double kRel = 1e-5, kFloor = 1e-6;

// The op groups in files of their own beside conformance.cpp.
void run_fused(Runner& r);  // the runs of nodes backends join: products of one input, add then rms_norm (fused_ops.cpp)
void run_row_moves(Runner& r);  // COPY_COLUMNS, GET_ROWS and SCATTER_ADD_ROWS (row_moves.cpp)
void run_head_products(Runner& r);  // HEAD_MATMUL (head_products.cpp)
void run_greedy_ops(Runner& r);  // ARGMAX, EMBED of device ids, download_begin/download_wait (greedy_ops.cpp)
void run_kv_layers(Runner& r);   // per-layer caches: K/V widths, window pages, recurrent state (kv_layers.cpp)
void run_plans(Runner& r);       // graph plans replay what graph_compute computes (plans.cpp)

}  // namespace sluice::conformance
