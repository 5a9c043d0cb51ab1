// Recurrent layers' ops (ABI 2.2) over the sequences' states in a STATE layer of the cache: each
// work-item owns independent state (a channel's window, a value column of a head's matrix) and walks
// the batch's tokens of its sequence in order, passing over the others. States lie at
// states[slots[s] * state_stride + state_offset] (floats).

#define CONV_MAX_K 64

// The causal depthwise convolution (SL_OP_CAUSAL_CONV): one work-item a (channel, sequence); the
// K - 1 inputs before the step's first token in the window, the newest K - 1 written back.
__kernel void causal_conv(__global const float* x, __global const uchar* w, ulong w_off, uint w_dtype, __global float* out,
                          __global float* states, ulong state_stride, ulong state_offset, __global const int* slots,
                          __global const int* seq_of_token, uint n_tokens, uint n_seqs, uint C, uint K, uint silu) {
  const uint c = get_global_id(0), s = get_global_id(1);
  if (c >= C || s >= n_seqs) return;
  __global float* win = states + (ulong)slots[s] * state_stride + state_offset;
  __global const uchar* taps = w + w_off;
  float hist[CONV_MAX_K];
  for (uint k = 0; k + 1 < K; ++k) hist[k] = win[(ulong)k * C + c];
  for (uint t = 0; t < n_tokens; ++t) {
    if (seq_of_token[t] != (int)s) continue;
    hist[K - 1] = x[(ulong)t * C + c];
    float acc = 0.0f;
    for (uint k = 0; k < K; ++k) acc += load_value(taps, w_dtype, (ulong)c * K + k) * hist[k];
    out[(ulong)t * C + c] = silu ? acc / (1.0f + exp(-acc)) : acc;
    for (uint k = 0; k + 1 < K; ++k) hist[k] = hist[k + 1];
  }
  for (uint k = 0; k + 1 < K; ++k) win[(ulong)k * C + c] = hist[k];
}

// torch.nn.functional.softplus (beta 1, threshold 20).
inline float softplus_of(float x) { return x > 20.0f ? x : log1p(exp(x)); }

// The gated delta rule (SL_OP_GATED_DELTA): one work-item a (value column j, value head h, sequence s),
// owning column j of the head's [k_head_dim, v_head_dim] state. q and k L2-normalised (each
// work-item sums them itself: no barrier, any work-group size).
__kernel void gated_delta(__global const float* qkv, __global const float* a, __global const float* b, __global const uchar* a_log,
                          ulong a_log_off, uint a_log_dtype, __global float* out, __global float* states, ulong state_stride,
                          ulong state_offset, __global const int* slots, __global const int* seq_of_token, uint n_tokens, uint n_seqs,
                          uint NK, uint NV, uint DK, uint DV, float scale, float l2_eps) {
  const uint j = get_global_id(0), h = get_global_id(1), s = get_global_id(2);
  if (j >= DV || h >= NV || s >= n_seqs) return;
  const uint kh = h / (NV / NK);
  const ulong width = 2ul * NK * DK + (ulong)NV * DV;
  __global float* S = states + (ulong)slots[s] * state_stride + state_offset + (ulong)h * DK * DV + j;  // S[i * DV]
  const float rate = exp(load_value(a_log + a_log_off, a_log_dtype, h));
  for (uint t = 0; t < n_tokens; ++t) {
    if (seq_of_token[t] != (int)s) continue;
    __global const float* q = qkv + (ulong)t * width + (ulong)kh * DK;
    __global const float* k = qkv + (ulong)t * width + (ulong)NK * DK + (ulong)kh * DK;
    const float v = qkv[(ulong)t * width + 2ul * NK * DK + (ulong)h * DV + j];
    float qq = 0.0f, kk = 0.0f;
    for (uint i = 0; i < DK; ++i) {
      qq += q[i] * q[i];
      kk += k[i] * k[i];
    }
    const float qn = scale / sqrt(qq + l2_eps), kn = 1.0f / sqrt(kk + l2_eps);
    const float decay = exp(-rate * softplus_of(a[(ulong)t * NV + h]));
    const float beta = 1.0f / (1.0f + exp(-b[(ulong)t * NV + h]));
    float kv = 0.0f;
    for (uint i = 0; i < DK; ++i) {
      const float sij = S[(ulong)i * DV] * decay;
      S[(ulong)i * DV] = sij;
      kv += sij * k[i] * kn;
    }
    const float delta = (v - kv) * beta;
    float o = 0.0f;
    for (uint i = 0; i < DK; ++i) {
      const float sij = S[(ulong)i * DV] + k[i] * kn * delta;
      S[(ulong)i * DV] = sij;
      o += sij * q[i] * qn;
    }
    out[(ulong)t * NV * DV + (ulong)h * DV + j] = o;
  }
}
