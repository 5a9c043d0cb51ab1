// Mixture-of-Experts routing and the weighted sum of the experts' outputs on the device (ABI 2.5,
// kernels_cl/moe.cl): a decode step chooses its experts without the host reading the router's
// logits. The products by expert id (MATMUL_ID) are cl_matmul.cpp's.
#include <string>

#include "cl_backend.h"

namespace sluice::ocl {

namespace {
constexpr uint32_t kRouteWg = 64;       // ROUTE_WG in kernels_cl/moe.cl
constexpr uint32_t kRouteMaxE = 1024;   // ROUTE_MAX_E
constexpr uint32_t kRouteMaxK = 64;     // ROUTE_MAX_K
}  // namespace

bool routes_on_device(uint32_t n_experts, uint32_t k) { return n_experts >= 1 && n_experts <= kRouteMaxE && k >= 1 && k <= kRouteMaxK; }

sl_status moe_route(sl_backend* be, const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p,
                    sl_buffer* ids, sl_buffer* weights, sl_error* err) {
  if (!logits || !ids || !weights) return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_route: missing buffers");
  if (!routes_on_device(E, p.k) || p.k > E)
    return set_error(err, SL_ERR_UNSUPPORTED, "moe_route: " + std::to_string(E) + " experts, top " + std::to_string(p.k) +
                                                  " (this backend routes up to " + std::to_string(kRouteMaxE) + " experts, top " +
                                                  std::to_string(kRouteMaxK) + ")");
  if (uint64_t(n) * E * 4 > logits->bytes || uint64_t(n) * p.k * 4 > ids->bytes || uint64_t(n) * p.k * 4 > weights->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_route: a buffer is smaller than its tensor");
  if (factors && (factors->bits || factors->dtype != SL_DTYPE_F32 || !factors->data || factors->cols != E))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_route: the experts' factors must be F32 [1, E]");
  if (n == 0) return SL_OK;
  return guarded(err, "moe_route", [&] {
    DevPtr f = factors ? read_range(be, factors->data, factors->offset, uint64_t(E) * 4, 4) : DevPtr{single(logits), 0};
    if (f.offset != 0) throw std::runtime_error("the experts' factors must start their buffer");
    auto& k = kernel(be, "matvec", "moe_route");
    k.setArg(0, single(logits));
    k.setArg(1, static_cast<cl_uint>(E));
    k.setArg(2, static_cast<cl_uint>(p.k));
    k.setArg(3, static_cast<cl_uint>(p.kind));
    k.setArg(4, static_cast<cl_uint>(p.normalize ? 1 : 0));
    k.setArg(5, f.buffer);
    k.setArg(6, static_cast<cl_uint>(factors ? 1 : 0));
    k.setArg(7, single(ids));
    k.setArg(8, single(weights));
    launch(be, k, cl::NDRange(size_t(n) * kRouteWg), cl::NDRange(kRouteWg));
    return SL_OK;
  });
}

sl_status moe_combine(sl_backend* be, const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out,
                      sl_error* err) {
  if (!x || !weights || !out) return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_combine: missing buffers");
  if (uint64_t(n) * k * dim * 4 > x->bytes || uint64_t(n) * k * 4 > weights->bytes || uint64_t(n) * dim * 4 > out->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "moe_combine: a buffer is smaller than its tensor");
  if (n == 0 || k == 0 || dim == 0) return SL_OK;
  return guarded(err, "moe_combine", [&] {
    auto& kn = kernel(be, "matvec", "moe_combine");
    kn.setArg(0, single(x));
    kn.setArg(1, single(weights));
    kn.setArg(2, static_cast<cl_uint>(k));
    kn.setArg(3, static_cast<cl_uint>(dim));
    kn.setArg(4, single(out));
    launch(be, kn, cl::NDRange(round_up(dim, 64), n), cl::NDRange(64, 1));
    return SL_OK;
  });
}

}  // namespace sluice::ocl
