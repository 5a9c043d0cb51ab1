#pragma once
// What the conformance checks share (core/conformance/*.cpp): the runner that keeps one result row
// per op, uploads inputs, builds weights of every form with the float values the reference uses, and
// compares values against their bounds; and the error bounds of float32 arithmetic.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "conformance/conformance.h"
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

class Runner {
 public:
  Runner(const BackendHandle& be, const Options& o) : be_(be), opt_(o), rng_(o.seed) {}

  std::vector<OpResult> results;

  // Runs body(cases) for one result row; body calls check() for each value.
  void op(const std::string& name, const sl_op_query* query, const std::function<void()>& body) {
    OpResult r;
    r.op = name;
    if (query && !be_.supports(*query)) {
      r.status = "skipped: unsupported";
      results.push_back(r);
      return;
    }
    current_ = &r;
    const auto t0 = Clock::now();
    try {
      body();
      r.status = r.worst_ratio <= 1.0 ? "pass" : "FAIL";
    } catch (const CaseFailed& f) {
      r.status = "FAIL";
      if (r.detail.empty()) r.detail = f.what;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    current_ = nullptr;
    results.push_back(r);
  }

  // A result row for an op the backend does not offer at all (an optional table entry it lacks).
  void skipped(const std::string& name, const std::string& why) {
    OpResult r;
    r.op = name;
    r.status = "skipped: " + why;
    results.push_back(r);
  }

  bool supports(const sl_op_query& q) const { return be_.supports(q); }

  // Whether the device has matrix units: prefill-sized products and attention may then take f16
  // inputs, and are checked to that precision.
  bool matrix_units() const {
    sl_device_info info{};
    info.struct_size = sizeof(info);
    sl_error err{};
    return be_.api()->get_device_info(be_.raw(), &info, &err) == SL_OK && (info.caps & SL_CAP_MATRIX);
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
      current_->detail = case_ + ", " + where + ": got " + std::to_string(got) + ", want " + std::to_string(ref);
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
    auto b = be_.alloc(std::max<std::size_t>(bytes, 4));
    expect_ok(b ? Status{} : Status(b.error()), "alloc");
    expect_ok(be_.upload(*b, 0, p, bytes), "upload");
    return std::move(*b);
  }
  Buffer upload(const std::vector<float>& v) { return upload_bytes(v.data(), v.size() * 4); }
  Buffer zeros(std::size_t n) { return upload(std::vector<float>(n, 0.0f)); }
  std::vector<float> download(const Buffer& b, std::size_t n) {
    std::vector<float> out(n);
    expect_ok(be_.download(b, 0, out.data(), n * 4), "download");
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

  void begin_batch(const std::vector<int32_t>& positions, const std::vector<int32_t>& slots, uint32_t n_seqs,
                   uint32_t max_pages, const std::vector<int32_t>& table) {
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = static_cast<uint32_t>(positions.size());
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = n_seqs;
    b.max_pages = max_pages;
    b.page_table = table.data();
    sl_error err{};
    expect_ok(api()->begin_batch(raw(), &b, &err), err, "begin_batch");
  }

  const sl_backend_api* api() const { return be_.api(); }
  sl_backend* raw() const { return be_.raw(); }
  const Options& options() const { return opt_; }
  std::mt19937& rng() { return rng_; }

 private:
  const BackendHandle& be_;
  Options opt_;
  std::mt19937 rng_;
  OpResult* current_ = nullptr;
  std::string case_;
};

inline sl_op_query query(sl_op op, uint32_t dtype = SL_DTYPE_F32, uint32_t bits = 0) {
  sl_op_query q{};
  q.struct_size = sizeof(q);
  q.op = op;
  q.weight_dtype = dtype;
  q.weight_bits = bits;
  return q;
}

inline constexpr double kRel = 1e-5, kFloor = 1e-6;

// The op groups in files of their own beside conformance.cpp.
void run_fused(Runner& r);  // ABI 1.3's matmul_multi and add_rms_norm (fused_ops.cpp)
void run_row_moves(Runner& r);  // ABI 1.1's gather_rows and scatter_add_rows (row_moves.cpp)

}  // namespace sluice::conformance
