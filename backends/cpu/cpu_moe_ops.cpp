// Row movement for Mixture-of-Experts layers: gathering the tokens routed to an expert, and adding
// the expert's weighted output back into their rows; and (ABI 2.5) the experts chosen on the device.
#include <algorithm>
#include <numeric>
#include <vector>

#include "cpu_backend.h"
#include "graph/moe_route.h"
#include "graph/stacked_weight.h"
#include "util/vec.h"

namespace sluice::cpu {

sl_status gather_rows(sl_backend*, const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim, sl_buffer* dst,
                      sl_error* err) {
  const uint64_t src_rows = src->bytes / 4 / (dim ? dim : 1);
  if (!fits(dst->bytes / 4, 0, static_cast<uint64_t>(n) * dim)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: destination too small");
  for (uint32_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<uint64_t>(rows[i]) >= src_rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: row " + std::to_string(rows[i]) + " out of range");
    std::memcpy(f32(dst) + static_cast<std::size_t>(i) * dim, f32(src) + static_cast<std::size_t>(rows[i]) * dim, dim * 4ull);
  }
  return SL_OK;
}

sl_status scatter_add_rows(sl_backend*, const sl_buffer* src, const int32_t* rows, const float* weights, uint32_t n,
                           uint32_t dim, sl_buffer* dst, sl_error* err) {
  const uint64_t dst_rows = dst->bytes / 4 / (dim ? dim : 1);
  if (!fits(src->bytes / 4, 0, static_cast<uint64_t>(n) * dim)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: source too small");
  for (uint32_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<uint64_t>(rows[i]) >= dst_rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: row " + std::to_string(rows[i]) + " out of range");
    axpy(weights[i], f32(src) + static_cast<std::size_t>(i) * dim, f32(dst) + static_cast<std::size_t>(rows[i]) * dim, dim);
  }
  return SL_OK;
}

}  // namespace sluice::cpu

// Experts chosen on the device (ABI 2.5): routing, products by expert id, and the weighted sum.
namespace sluice::cpu {

sl_status moe_route(sl_backend*, const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p,
                    sl_buffer* ids, sl_buffer* weights, sl_error* err) {
  if (!fits(logits->bytes / 4, 0, uint64_t(n) * E) || !fits(ids->bytes / 4, 0, uint64_t(n) * p.k) || !fits(weights->bytes / 4, 0, uint64_t(n) * p.k))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_route: a buffer is smaller than its tensor");
  const float* f = nullptr;
  if (factors) {
    if (!factors->data || !fits(factors->data->bytes, factors->offset, uint64_t(E) * 4))
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_route: the experts' factors lie past their buffer");
    f = reinterpret_cast<const float*>(weight_data(factors));
  }
  graph::RouteScratch scratch;
  std::vector<uint32_t> chosen(p.k);
  std::vector<float> w(p.k), sorted_w(p.k);
  std::vector<uint32_t> by_id(p.k);
  auto* out_ids = reinterpret_cast<int32_t*>(ids->data);
  float* out_w = f32(weights);
  for (uint32_t t = 0; t < n; ++t) {
    graph::route_row(f32(logits) + std::size_t(t) * E, E, p.k, p.kind, p.normalize != 0, f, scratch, chosen.data(), w.data());
    std::iota(by_id.begin(), by_id.end(), 0u);  // the k pairs in increasing id order (MOE_COMBINE's order)
    std::sort(by_id.begin(), by_id.end(), [&](uint32_t a, uint32_t b) { return chosen[a] < chosen[b]; });
    for (uint32_t j = 0; j < p.k; ++j) {
      out_ids[std::size_t(t) * p.k + j] = static_cast<int32_t>(chosen[by_id[j]]);
      out_w[std::size_t(t) * p.k + j] = w[by_id[j]];
    }
  }
  return SL_OK;
}

// Slots routed to one expert are multiplied together: their inputs gathered into rows, one product
// reading the expert's matrix once, the results put back in slot order.
sl_status matmul_id(sl_backend* be, const sl_buffer* x, uint32_t x_rows, const sl_weight* w, const sl_buffer* ids, uint32_t n, uint32_t k,
                    uint32_t n_experts, sl_buffer* out, sl_error* err) {
  if (!w || n_experts == 0 || w->rows % n_experts) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_id: the weight is not n_experts stacked matrices");
  const uint32_t R = w->rows / n_experts, cols = w->cols;
  const uint64_t slots = uint64_t(n) * k;
  if (!fits(ids->bytes / 4, 0, slots) || !fits(out->bytes / 4, 0, slots * R) || !fits(x->bytes / 4, 0, uint64_t(x_rows) * cols) ||
      (x_rows != n && x_rows != slots))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_id: x, ids or the output do not fit");
  const auto* id = reinterpret_cast<const int32_t*>(ids->data);
  std::vector<std::vector<uint32_t>> by_expert(n_experts);
  for (uint64_t s = 0; s < slots; ++s) {
    if (id[s] < 0 || static_cast<uint32_t>(id[s]) >= n_experts) {
      std::fill_n(f32(out) + s * R, R, 0.0f);  // an id outside the experts: a row of zeros
      continue;
    }
    by_expert[id[s]].push_back(static_cast<uint32_t>(s));
  }
  // Every routed slot's input gathered by expert (each expert's rows together), its products, and the
  // results put back in slot order.
  std::vector<sl_weight> slices;
  std::vector<uint32_t> experts;
  std::vector<std::size_t> first_row;  // each expert's first row in `in` and `res`
  std::size_t total = 0;
  bool decode = true;  // every expert few rows: their products in one parallel region
  for (uint32_t e = 0; e < n_experts; ++e) {
    if (by_expert[e].empty()) continue;
    const auto slice = graph::expert_slice(*w, n_experts, e);
    if (!slice) return set_error(err, SL_ERR_UNSUPPORTED, "matmul_id: a weight form without rows of a fixed size");
    slices.push_back(*slice);
    experts.push_back(e);
    first_row.push_back(total);
    total += by_expert[e].size();
    decode = decode && few_rows(static_cast<uint32_t>(by_expert[e].size()));
  }
  std::vector<float> in(total * cols), res(total * R);
  std::vector<FewRowsProduct> products;
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const auto& ss = by_expert[experts[i]];
    for (std::size_t j = 0; j < ss.size(); ++j) {
      const uint64_t xi = x_rows == slots ? ss[j] : ss[j] / k;
      std::memcpy(in.data() + (first_row[i] + j) * cols, f32(x) + xi * cols, cols * 4ull);
    }
    products.push_back({in.data() + first_row[i] * cols, static_cast<uint32_t>(ss.size()), &slices[i], res.data() + first_row[i] * R});
  }
  if (decode) {
    // One region an expert cost a fork and a join each — three products × 8 experts a layer, each under
    // 1 MB of weights split over every thread — and on 16 threads the waits, not the weights, were most
    // of a token's time.
    for (const FewRowsProduct& p : products)
      if (auto s = check_weight_form("matmul_id", p.w, err); s != SL_OK) return s;
    try {
      matvec_products(be, products.data(), products.size());
    } catch (const std::bad_alloc&) {
      return set_error(err, SL_ERR_OUT_OF_MEMORY, "matmul_id: out of memory for scratch");
    }
  } else {  // more rows: a GEMM an expert, bound by arithmetic
    for (const FewRowsProduct& p : products) {
      sl_buffer in_view{reinterpret_cast<std::byte*>(const_cast<float*>(p.x)), uint64_t(p.n_rows) * cols * 4, false};
      sl_buffer res_view{reinterpret_cast<std::byte*>(p.out), uint64_t(p.n_rows) * R * 4, false};
      if (auto s = matmul(be, &in_view, p.n_rows, p.w, nullptr, &res_view, err); s != SL_OK) return s;
    }
  }
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const auto& ss = by_expert[experts[i]];
    for (std::size_t j = 0; j < ss.size(); ++j)
      std::memcpy(f32(out) + uint64_t(ss[j]) * R, res.data() + (first_row[i] + j) * R, R * 4ull);
  }
  return SL_OK;
}

sl_status moe_combine(sl_backend*, const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out,
                      sl_error* err) {
  if (!fits(x->bytes / 4, 0, uint64_t(n) * k * dim) || !fits(weights->bytes / 4, 0, uint64_t(n) * k) ||
      !fits(out->bytes / 4, 0, uint64_t(n) * dim))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_combine: a buffer is smaller than its tensor");
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t j = 0; j < k; ++j)
      axpy(f32(weights)[std::size_t(t) * k + j], f32(x) + (std::size_t(t) * k + j) * dim, f32(out) + std::size_t(t) * dim, dim);
  return SL_OK;
}

}  // namespace sluice::cpu
