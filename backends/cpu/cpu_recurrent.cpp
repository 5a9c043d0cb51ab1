// Recurrent layers' ops (ABI 2.2): the causal depthwise convolution and the gated delta rule of
// Gated DeltaNet, each reading and writing its sequences' states in the cache's STATE layer. Both
// walk a sequence's tokens in order (the recurrence needs it); the work splits across sequences and
// channels (convolution) or value heads (delta rule), whose states are independent.
//
// Prefill runs the same token loop as decode: per token and head it is O(k_head_dim * v_head_dim),
// the state stays in cache, and the result is the recurrence itself — what transformers' chunked
// form computes in a different order. A chunked (WY / UT-transform) form would trade this loop for
// matrix products; it is the fast path to add if long prompts on the CPU need it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_backend.h"

namespace sluice::cpu {
namespace {

// Each sequence's tokens of the step, in batch order (the host puts them in order of position).
std::vector<std::vector<uint32_t>> tokens_by_sequence(const sl_backend* be) {
  std::vector<std::vector<uint32_t>> out(be->n_seqs);
  for (uint32_t t = 0; t < be->seq_slots.size(); ++t) out[static_cast<std::size_t>(be->seq_slots[t])].push_back(t);
  return out;
}

// The step's sequences' states in `layer` from byte `offset`, `bytes` each, checked.
sl_status states_of(sl_backend* be, sl_kv_cache* cache, const sl_tensor& state, uint64_t bytes, std::vector<float*>& out,
                    const char* op, sl_error* err) {
  if (!cache) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": a state without a KV cache in the step");
  if (state.rows != be->n_seqs) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": the state has a row for each sequence");
  if (state.state_layer >= cache->layout.n_layers || cache->layers[state.state_layer].kind != SL_KV_STATE)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": layer " + std::to_string(state.state_layer) + " keeps no state");
  if (!fits(cache->layers[state.state_layer].state_bytes, state.offset, bytes))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": the state tensor lies past the layer's state");
  out.assign(be->n_seqs, nullptr);
  for (uint32_t s = 0; s < be->n_seqs; ++s) {
    std::byte* p = state_of(be, cache, state.state_layer, s, err);
    if (!p) return SL_ERR_INVALID_ARGUMENT;
    out[s] = reinterpret_cast<float*>(p + state.offset);
  }
  return SL_OK;
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

sl_status causal_conv(sl_backend* be, sl_kv_cache* cache, const sl_buffer* x, const sl_weight* w, uint32_t activation, sl_buffer* out,
                      const sl_tensor& window, sl_error* err) {
  const uint32_t C = w->rows, K = w->cols, n = static_cast<uint32_t>(be->seq_slots.size());
  if (x->bytes != uint64_t(n) * C * 4 || out->bytes != x->bytes) return set_error(err, SL_ERR_INVALID_ARGUMENT, "causal_conv: x or out is not [tokens, C]");
  if (!weight_dtype_supported(w)) return set_error(err, SL_ERR_UNSUPPORTED, "causal_conv: weight dtype");
  std::vector<float*> states;
  if (auto s = states_of(be, cache, window, uint64_t(K - 1) * C * 4, states, "causal_conv", err); s != SL_OK) return s;
  std::vector<float> taps(uint64_t(C) * K);
  for (uint32_t c = 0; c < C; ++c) weight_row_to_f32(w, c, taps.data() + uint64_t(c) * K);
  const auto seqs = tokens_by_sequence(be);
  const float* in = f32(x);
  float* o = f32(out);
  // One job per (sequence, block of channels): a channel's window is its own.
  constexpr uint32_t kBlock = 64;
  const uint32_t blocks = (C + kBlock - 1) / kBlock;
  be->pool->parallel_for(std::size_t(be->n_seqs) * blocks, 1, [&](std::size_t b, std::size_t e, unsigned) {
    std::vector<float> hist(K);
    for (std::size_t job = b; job < e; ++job) {
      const uint32_t s = static_cast<uint32_t>(job / blocks), c0 = static_cast<uint32_t>(job % blocks) * kBlock;
      const uint32_t c1 = std::min(C, c0 + kBlock);
      float* win = states[s];  // [K - 1][C], oldest first
      for (uint32_t c = c0; c < c1; ++c) {
        for (uint32_t k = 0; k + 1 < K; ++k) hist[k] = win[uint64_t(k) * C + c];
        const float* tap = taps.data() + uint64_t(c) * K;
        for (uint32_t t : seqs[s]) {
          hist[K - 1] = in[uint64_t(t) * C + c];
          float acc = 0.0f;
          for (uint32_t k = 0; k < K; ++k) acc += tap[k] * hist[k];
          o[uint64_t(t) * C + c] = activation == SL_ACT_SILU ? silu(acc) : acc;
          for (uint32_t k = 0; k + 1 < K; ++k) hist[k] = hist[k + 1];
        }
        for (uint32_t k = 0; k + 1 < K; ++k) win[uint64_t(k) * C + c] = hist[k];
      }
    }
  });
  return SL_OK;
}

sl_status gated_delta(sl_backend* be, sl_kv_cache* cache, const sl_buffer* qkv, const sl_buffer* a, const sl_buffer* b, const sl_weight* a_log,
                      const sl_gated_delta_params& p, sl_buffer* out, const sl_tensor& state, sl_error* err) {
  const uint32_t NK = p.n_k_heads, NV = p.n_v_heads, DK = p.k_head_dim, DV = p.v_head_dim;
  const uint32_t n = static_cast<uint32_t>(be->seq_slots.size());
  const uint64_t width = 2ull * NK * DK + uint64_t(NV) * DV;
  if (qkv->bytes != n * width * 4 || a->bytes != uint64_t(n) * NV * 4 || b->bytes != a->bytes || out->bytes != uint64_t(n) * NV * DV * 4)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "gated_delta: qkv, a, b or out do not fit the heads");
  if (!weight_dtype_supported(a_log)) return set_error(err, SL_ERR_UNSUPPORTED, "gated_delta: A_log dtype");
  std::vector<float*> states;
  if (auto s = states_of(be, cache, state, uint64_t(NV) * DK * DV * 4, states, "gated_delta", err); s != SL_OK) return s;
  std::vector<float> decay_rate(NV);
  weight_row_to_f32(a_log, 0, decay_rate.data());
  for (float& r : decay_rate) r = std::exp(r);  // A = exp(A_log)
  const auto seqs = tokens_by_sequence(be);
  const float* X = f32(qkv);
  const float* A = f32(a);
  const float* B = f32(b);
  float* O = f32(out);
  const uint32_t group = NV / NK;
  be->pool->parallel_for(std::size_t(be->n_seqs) * NV, 1, [&](std::size_t lo, std::size_t hi, unsigned) {
    std::vector<float> q(DK), k(DK), kv(DV);
    for (std::size_t job = lo; job < hi; ++job) {
      const uint32_t s = static_cast<uint32_t>(job / NV), h = static_cast<uint32_t>(job % NV), kh = h / group;
      float* S = states[s] + uint64_t(h) * DK * DV;  // [DK][DV]
      for (uint32_t t : seqs[s]) {
        const float* row = X + uint64_t(t) * width;
        const float* qs = row + uint64_t(kh) * DK;
        const float* ks = row + uint64_t(NK) * DK + uint64_t(kh) * DK;
        const float* vs = row + 2ull * NK * DK + uint64_t(h) * DV;
        float qq = 0.0f, kk = 0.0f;
        for (uint32_t i = 0; i < DK; ++i) {
          qq += qs[i] * qs[i];
          kk += ks[i] * ks[i];
        }
        const float qn = p.scale / std::sqrt(qq + p.l2_eps), kn = 1.0f / std::sqrt(kk + p.l2_eps);
        for (uint32_t i = 0; i < DK; ++i) {
          q[i] = qs[i] * qn;
          k[i] = ks[i] * kn;
        }
        const float decay = std::exp(-decay_rate[h] * softplus(A[uint64_t(t) * NV + h]));
        const float beta = 1.0f / (1.0f + std::exp(-B[uint64_t(t) * NV + h]));
        std::fill(kv.begin(), kv.end(), 0.0f);
        for (uint32_t i = 0; i < DK; ++i) {
          float* Si = S + uint64_t(i) * DV;
          for (uint32_t j = 0; j < DV; ++j) {
            Si[j] *= decay;
            kv[j] += Si[j] * k[i];
          }
        }
        for (uint32_t j = 0; j < DV; ++j) kv[j] = (vs[j] - kv[j]) * beta;  // the delta
        float* o = O + uint64_t(t) * NV * DV + uint64_t(h) * DV;
        std::fill(o, o + DV, 0.0f);
        for (uint32_t i = 0; i < DK; ++i) {
          float* Si = S + uint64_t(i) * DV;
          for (uint32_t j = 0; j < DV; ++j) {
            Si[j] += k[i] * kv[j];
            o[j] += Si[j] * q[i];
          }
        }
      }
    }
  });
  return SL_OK;
}

}  // namespace sluice::cpu
