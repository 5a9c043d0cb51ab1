// The ops of greedy decoding a token ahead, against the host's arithmetic:
// - ARGMAX: each row's first index of its largest value, exactly (ties to the lower index, NaN passed
//   over, a row of nothing but NaN giving 0), written at the ids' offset and nowhere else;
// - EMBED of ids in a device buffer: the rows embed gives for host ids (any form embed has), and a
//   row of zeros for an id outside the table;
// - download_begin/download_wait: the bytes as download gives them, after the work issued before,
//   with several copies in flight and waited for in any order; a ticket not in flight refused.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "conformance/runner.h"

namespace sluice::conformance {
namespace {

constexpr double kExact = 1e-30;  // check()'s bound for values that must be equal

std::vector<int32_t> download_ints(Runner& r, const Buffer& b, std::size_t n) {
  std::vector<int32_t> out(n);
  sl_error err{};
  r.expect_ok(r.api()->download(r.raw(), b.get(), 0, out.data(), n * 4, &err), err, "download");
  return out;
}

// The first index of the largest non-NaN value (0 for none), as the ABI defines argmax.
int32_t reference_argmax(const float* row, uint32_t dim) {
  int32_t best = -1;
  for (uint32_t c = 0; c < dim; ++c)
    if (!std::isnan(row[c]) && (best < 0 || row[c] > row[best])) best = static_cast<int32_t>(c);
  return best < 0 ? 0 : best;
}

// Runs argmax over rows × dim values into ids [1, 1 + rows) of a buffer of rows + 2 ids (the two
// outside must keep their sentinel) and checks every id against the reference.
void check_argmax(Runner& r, const std::vector<float>& x, uint32_t rows, uint32_t dim) {
  constexpr int32_t kSentinel = -7;
  std::vector<int32_t> ids0(rows + 2, kSentinel);
  auto dx = r.upload(x), dids = r.upload_bytes(ids0.data(), ids0.size() * 4);
  sl_error err{};
  r.expect_ok(r.ops().argmax(dx.get(), rows, dim, dids.get(), 1, &err), err, "argmax");
  const auto got = download_ints(r, dids, ids0.size());
  r.check(got.front(), kSentinel, kExact, "the id before the offset");
  r.check(got.back(), kSentinel, kExact, "the id after the rows");
  for (uint32_t i = 0; i < rows; ++i) r.check(got[1 + i], reference_argmax(x.data() + std::size_t(i) * dim, dim), kExact, "row " + std::to_string(i));
}

void run_argmax(Runner& r) {
  r.op("argmax", Needs{}, [&] {
    struct Shape {
      uint32_t rows, dim;
    };
    for (Shape s : {Shape{1, 1}, {1, 33}, {3, 1000}, {2, 4097}, {1, 128256}}) {
      r.new_case(std::to_string(s.rows) + "x" + std::to_string(s.dim) + " random");
      check_argmax(r, r.random(std::size_t(s.rows) * s.dim), s.rows, s.dim);
    }
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    r.new_case("ties: the lower index wins, across every part of a long row");
    {
      const uint32_t dim = 70000;
      auto x = r.random(dim);
      for (uint32_t c : {69999u, 40000u, 513u, 9000u}) x[c] = 9.0f;  // largest four times; 513 first
      check_argmax(r, x, 1, dim);
    }
    r.new_case("NaN passed over, -inf and +inf");
    {
      const uint32_t dim = 3000;
      std::vector<float> x(4 * dim, -inf);
      x[0] = nan;                                  // row 0: NaN first, then -inf everywhere: index 1
      for (uint32_t c = 0; c < dim; ++c) x[dim + c] = nan;  // row 1: nothing but NaN: 0
      x[2 * dim + 2999] = 1.0f;                    // row 2: one finite value at the end, NaN before it
      x[2 * dim + 5] = nan;
      x[3 * dim + 77] = inf;                       // row 3: +inf
      x[3 * dim + 2000] = inf;
      check_argmax(r, x, 4, dim);
    }
    r.new_case("ids past the buffer refused");
    auto dx = r.zeros(16), dids = r.zeros(2);
    sl_error err{};
    if (r.ops().argmax(dx.get(), 2, 8, dids.get(), 1, &err) == SL_OK)
      throw CaseFailed{"argmax of 2 rows into ids [1, 3) of a 2-id buffer returned SL_OK"};
  });
}

void run_embed_device(Runner& r) {
  struct Form {
    sl_dtype dtype;
    uint32_t bits;
  };
  for (Form f : {Form{SL_DTYPE_F32, 0}, {SL_DTYPE_F16, 0}, {SL_DTYPE_BF16, 0}, {SL_DTYPE_U32, 4}, {SL_DTYPE_U32, 8}}) {
    r.op(std::string("embed_device ") + form_name(f.dtype, f.bits), weight_form(SL_OP_EMBED, f.dtype, f.bits), [&] {
      const uint32_t cols = 128;
      Weight t = f.bits ? r.quant_weight(f.bits, 32, 40, cols) : r.weight(f.dtype, 40, cols, 1.0f);
      // ids from element 1: five in the table, then two outside it (zeros).
      const std::vector<int32_t> ids = {99, 0, 39, 7, 7, 20, -1, 40};
      auto dids = r.upload_bytes(ids.data(), ids.size() * 4);
      for (auto [first, n] : {std::pair{1u, 5u}, {6u, 2u}}) {
        r.new_case("ids " + std::to_string(first) + ".." + std::to_string(first + n - 1));
        auto out = r.random(std::size_t(n) * cols);  // not zeros: a row of zeros must be written
        auto dout = r.upload(out);
        sl_error err{};
        r.expect_ok(r.ops().embed_device(&t.w, dids.get(), first, n, dout.get(), &err), err, "embed_device");
        const auto got = r.download(dout, std::size_t(n) * cols);
        for (uint32_t i = 0; i < n; ++i) {
          const int32_t id = ids[first + i];
          const bool inside = id >= 0 && id < 40;
          for (uint32_t c = 0; c < cols; ++c) {
            const double ref = inside ? t.values[std::size_t(id) * cols + c] : 0.0;
            r.check(got[std::size_t(i) * cols + c], ref, inside ? kRel * std::abs(ref) + kFloor : kExact,
                    "id " + std::to_string(id) + " col " + std::to_string(c));
          }
        }
      }
    });
  }
}

void run_download_begin(Runner& r) {
  r.op("download_begin", Needs{}, [&] {
    r.new_case("three copies in flight, waited for out of order");
    const std::vector<std::size_t> sizes = {1, 1000, 70000};
    std::vector<std::vector<float>> values, got;
    std::vector<Buffer> bufs;
    std::vector<uint64_t> tickets(sizes.size());
    for (std::size_t n : sizes) {
      values.push_back(r.random(n));
      bufs.push_back(r.upload(values.back()));
      got.emplace_back(n, -1.0f);
    }
    sl_error err{};
    for (std::size_t i = 0; i < sizes.size(); ++i)
      r.expect_ok(r.api()->download_begin(r.raw(), bufs[i].get(), 0, got[i].data(), sizes[i] * 4, &tickets[i], &err), err,
                  "download_begin");
    for (std::size_t i : {2u, 0u, 1u}) r.expect_ok(r.api()->download_wait(r.raw(), tickets[i], &err), err, "download_wait");
    for (std::size_t i = 0; i < sizes.size(); ++i)
      for (std::size_t j = 0; j < sizes[i]; ++j) r.check(got[i][j], values[i][j], kExact, "copy " + std::to_string(i) + " value " + std::to_string(j));

    r.new_case("after the work issued before it, from an offset");
    const std::vector<float> x = r.random(1000);
    auto dx = r.upload(x), d2x = r.zeros(x.size());
    r.expect_ok(r.ops().add(dx.get(), dx.get(), d2x.get(), x.size(), &err), err, "add");  // exact: x + x
    std::vector<float> doubled(600, -1.0f);
    uint64_t ticket = 0;
    r.expect_ok(r.api()->download_begin(r.raw(), d2x.get(), 400 * 4, doubled.data(), doubled.size() * 4, &ticket, &err), err,
                "download_begin");
    r.expect_ok(r.api()->download_wait(r.raw(), ticket, &err), err, "download_wait");
    for (std::size_t j = 0; j < doubled.size(); ++j) r.check(doubled[j], 2.0 * x[400 + j], kExact, "value " + std::to_string(400 + j));

    r.new_case("a ticket not in flight refused");
    if (r.api()->download_wait(r.raw(), ticket + 1000, &err) == SL_OK)
      throw CaseFailed{"download_wait of a ticket never given returned SL_OK"};
  });
}

}  // namespace

void run_greedy_ops(Runner& r) {
  run_argmax(r);
  run_embed_device(r);
  run_download_begin(r);
}

}  // namespace sluice::conformance
