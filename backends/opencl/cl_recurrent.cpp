// Recurrent layers' ops (ABI 2.2) on the device: the causal depthwise convolution and the gated
// delta rule (kernels_cl/recurrent.cl), over the sequences' states in the cache's STATE layers. The
// step's state slots go to the device with each launch (a few ints); the tokens' sequences are the
// batch's d_seq_slots.
#include <string>

#include "cl_backend.h"
#include "util/batch_pages.h"

namespace sluice::ocl {
namespace {

// The STATE tensor's layer, checked: its states' buffer, floats a slot and offset in floats.
sl_status state_at(sl_backend* be, sl_kv_cache* c, const sl_tensor& state, uint64_t floats, const char* op, cl::Buffer*& buffer,
                   uint64_t& stride, uint64_t& offset, sl_error* err) {
  if (!c) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": a state without a KV cache in the step");
  if (state.rows != be->n_seqs) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": the state has a row for each sequence");
  if (state.state_layer >= c->layers.size() || c->layers[state.state_layer].kind != SL_KV_STATE)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": layer " + std::to_string(state.state_layer) + " keeps no state");
  const auto& Ly = c->layers[state.state_layer];
  if (!fits(Ly.state_bytes, state.offset, floats * 4))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": the state tensor lies past the layer's state");
  if (auto s = check_state_slots(be->state_slots, be->n_seqs, c->layout, err); s != SL_OK) return s;
  buffer = &c->state_layers[state.state_layer];
  stride = Ly.state_bytes / 4;
  offset = state.offset / 4;
  return SL_OK;
}

cl::Buffer slots_on_device(sl_backend* be) {
  return cl::Buffer(be->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, be->state_slots.size() * sizeof(int32_t),
                    be->state_slots.data());
}

}  // namespace

sl_status causal_conv(sl_backend* be, sl_kv_cache* c, const sl_buffer* x, const sl_weight* w, uint32_t activation, sl_buffer* out,
                      const sl_tensor& window, sl_error* err) {
  const uint32_t C = w->rows, K = w->cols, n = static_cast<uint32_t>(be->positions.size());
  if (K < 2 || K > kConvMaxTaps) return set_error(err, SL_ERR_UNSUPPORTED, "causal_conv: 2 to 64 taps on the OpenCL backend");
  if (!weight_form_supported(w->dtype, w->bits) || w->bits) return set_error(err, SL_ERR_UNSUPPORTED, "causal_conv: weight form");
  if (x->bytes / 4 < uint64_t(n) * C || out->bytes / 4 < uint64_t(n) * C)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "causal_conv: x or out smaller than [tokens, C]");
  cl::Buffer* states = nullptr;
  uint64_t stride = 0, offset = 0;
  if (auto s = state_at(be, c, window, uint64_t(K - 1) * C, "causal_conv", states, stride, offset, err); s != SL_OK) return s;
  return guarded(err, "causal_conv", [&] {
    const DevPtr taps = vector_weight(be, w, uint64_t(C) * K);
    cl::Buffer slots = slots_on_device(be);
    auto& k = kernel(be, "ops", "causal_conv");
    cl_uint a = 0;
    k.setArg(a++, single(x));
    k.setArg(a++, taps.buffer);
    k.setArg(a++, static_cast<cl_ulong>(taps.offset));
    k.setArg(a++, static_cast<cl_uint>(w->dtype));
    k.setArg(a++, single(out));
    k.setArg(a++, *states);
    k.setArg(a++, static_cast<cl_ulong>(stride));
    k.setArg(a++, static_cast<cl_ulong>(offset));
    k.setArg(a++, slots);
    k.setArg(a++, be->d_seq_slots);
    k.setArg(a++, static_cast<cl_uint>(n));
    k.setArg(a++, static_cast<cl_uint>(be->n_seqs));
    k.setArg(a++, static_cast<cl_uint>(C));
    k.setArg(a++, static_cast<cl_uint>(K));
    k.setArg(a++, static_cast<cl_uint>(activation == SL_ACT_SILU ? 1 : 0));
    launch(be, k, cl::NDRange(round_up(C, 64), be->n_seqs), cl::NDRange(64, 1));
    return SL_OK;
  });
}

sl_status gated_delta(sl_backend* be, sl_kv_cache* c, const sl_buffer* qkv, const sl_buffer* a, const sl_buffer* b, const sl_weight* a_log,
                      const sl_gated_delta_params& p, sl_buffer* out, const sl_tensor& state, sl_error* err) {
  const uint32_t NK = p.n_k_heads, NV = p.n_v_heads, DK = p.k_head_dim, DV = p.v_head_dim, n = static_cast<uint32_t>(be->positions.size());
  if (!weight_form_supported(a_log->dtype, a_log->bits) || a_log->bits) return set_error(err, SL_ERR_UNSUPPORTED, "gated_delta: A_log form");
  const uint64_t width = 2ull * NK * DK + uint64_t(NV) * DV;
  if (qkv->bytes / 4 < n * width || a->bytes / 4 < uint64_t(n) * NV || b->bytes / 4 < uint64_t(n) * NV || out->bytes / 4 < uint64_t(n) * NV * DV)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "gated_delta: qkv, a, b or out smaller than the heads need");
  cl::Buffer* states = nullptr;
  uint64_t stride = 0, offset = 0;
  if (auto s = state_at(be, c, state, uint64_t(NV) * DK * DV, "gated_delta", states, stride, offset, err); s != SL_OK) return s;
  return guarded(err, "gated_delta", [&] {
    const DevPtr rates = vector_weight(be, a_log, NV);
    cl::Buffer slots = slots_on_device(be);
    auto& k = kernel(be, "ops", "gated_delta");
    cl_uint i = 0;
    k.setArg(i++, single(qkv));
    k.setArg(i++, single(a));
    k.setArg(i++, single(b));
    k.setArg(i++, rates.buffer);
    k.setArg(i++, static_cast<cl_ulong>(rates.offset));
    k.setArg(i++, static_cast<cl_uint>(a_log->dtype));
    k.setArg(i++, single(out));
    k.setArg(i++, *states);
    k.setArg(i++, static_cast<cl_ulong>(stride));
    k.setArg(i++, static_cast<cl_ulong>(offset));
    k.setArg(i++, slots);
    k.setArg(i++, be->d_seq_slots);
    k.setArg(i++, static_cast<cl_uint>(n));
    k.setArg(i++, static_cast<cl_uint>(be->n_seqs));
    k.setArg(i++, static_cast<cl_uint>(NK));
    k.setArg(i++, static_cast<cl_uint>(NV));
    k.setArg(i++, static_cast<cl_uint>(DK));
    k.setArg(i++, static_cast<cl_uint>(DV));
    k.setArg(i++, p.scale);
    k.setArg(i++, p.l2_eps);
    launch(be, k, cl::NDRange(DV, NV, be->n_seqs));
    return SL_OK;
  });
}

}  // namespace sluice::ocl
