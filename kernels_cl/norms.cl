// Row-wise reductions: RMS norm, layer norm, softmax, top-k routing. One work-group of WG items per
// row; partial sums meet in local memory (WG is a power of two, set at build time).

#ifndef WG
#define WG 64
#endif

// The sum of v over a work-group of n items (a power of two; scratch: n floats).
inline float wg_sum_n(__local float* scratch, float v, uint n) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float wg_sum(__local float* scratch, float v) { return wg_sum_n(scratch, v, WG); }

// RMS norm with its own, larger work-group: decode normalises one row of a few thousand values,
// and with WG items each walking dim / WG values the kernel is a chain of dependent loads (measured
// ~30 us a launch on an H100 at WG 64). NORM_WG items with float4 loads cut the chain to a few steps.
#define NORM_WG 256

// The sum of v over the NORM_WG work-items: warp shuffles, then one exchange in local memory (PTX);
// else a tree in local memory.
inline float norm_sum(__local float* scratch, float v) {
#ifdef SLUICE_PTX_SHFL
  v = warp_sum(v);
  const uint lid = get_local_id(0);
  if (lid % 32u == 0u) scratch[lid / 32u] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  float total = 0.0f;
  for (uint w = 0; w < NORM_WG / 32u; ++w) total += scratch[w];
  return total;
#else
  return wg_sum_n(scratch, v, NORM_WG);
#endif
}

// Four consecutive weight values from 4i on, with one load for each form.
inline float4 load_value4(__global const uchar* base, uint dtype, uint i) {
  if (dtype == DT_F32) return vload4(i, (__global const float*)base);
  if (dtype == DT_F16) return vload_half4(i, (__global const half*)base);
  const uint4 u = convert_uint4(vload4(i, (__global const ushort*)base)) << 16;
  return as_float4(u);
}

// Rows of whole 1024-value runs up to NORM_REG of them (every hidden size of the models we run): a
// work-item keeps its float4s in registers between the sum and the scaling instead of reading them
// again — decode normalises one row, so the kernel is a chain of latencies, not a stream.
#define NORM_REG 8

// One row: out = x / rms(x) * (w + w_offset), after x += delta where add (x written back in place:
// the residual stream). Each work-item reads back only the values it wrote, so no barrier is needed
// between the add and the normalisation.
// q15 (decode on NVIDIA, rows in registers: every warp's lanes run every float4 step): the output's
// 15-bit form too (kernels_cl/warp.cl), from the registers.
inline void rms_norm_row(__global float* xr, __global const float* dr, uint add, __global const uchar* w, uint w_dtype,
                         float w_offset, __global float* orow, uint dim, float eps, __local float* scratch, uint q15,
                         __global uchar* xq, __global float2* blocks) {
  const uint lid = get_local_id(0);
  if (dim % 1024u == 0u && dim <= 1024u * NORM_REG) {
    const uint n = dim / 1024u;
    // Every load — the row, the delta, the weights — issued before the sum is needed: one memory
    // round trip for the kernel instead of one before and one after the reduction.
    float4 v[NORM_REG], wv[NORM_REG];
    for (uint k = 0; k < NORM_REG; ++k) {
      if (k < n) {
        const uint i = lid + k * NORM_WG;
        v[k] = vload4(i, xr);
        if (add) v[k] += vload4(i, dr);
        wv[k] = load_value4(w, w_dtype, i) + w_offset;
      }
    }
    float ss = 0.0f;
    for (uint k = 0; k < NORM_REG; ++k) {
      if (k < n) {
        if (add) vstore4(v[k], lid + k * NORM_WG, xr);
        ss += dot(v[k], v[k]);
      }
    }
    const float inv = 1.0f / sqrt(norm_sum(scratch, ss) / (float)dim + eps);
    for (uint k = 0; k < NORM_REG; ++k) {
      if (k >= n) break;
      const uint i = lid + k * NORM_WG;
      const float4 o = wv[k] * (v[k] * inv);
      vstore4(o, i, orow);
#ifdef SLUICE_PTX_SHFL
      if (q15) int15_store4(o, 4u * i, dim, xq, blocks);
#endif
    }
    return;
  }
  const bool vec = dim % 4u == 0u;
  float ss = 0.0f;
  if (vec) {
    for (uint i = lid; i < dim / 4u; i += NORM_WG) {
      float4 v = vload4(i, xr);
      if (add) {
        v += vload4(i, dr);
        vstore4(v, i, xr);
      }
      ss += dot(v, v);
    }
  } else {
    for (uint i = lid; i < dim; i += NORM_WG) {
      float v = xr[i];
      if (add) xr[i] = v = v + dr[i];
      ss += v * v;
    }
  }
  const float inv = 1.0f / sqrt(norm_sum(scratch, ss) / (float)dim + eps);
  if (vec) {
    for (uint i = lid; i < dim / 4u; i += NORM_WG) {
      const float4 v = vload4(i, xr);
      const float4 wv = (float4)(load_value(w, w_dtype, 4 * i), load_value(w, w_dtype, 4 * i + 1),
                                 load_value(w, w_dtype, 4 * i + 2), load_value(w, w_dtype, 4 * i + 3)) + w_offset;
      vstore4(wv * (v * inv), i, orow);
    }
  } else {
    for (uint i = lid; i < dim; i += NORM_WG) orow[i] = (load_value(w, w_dtype, i) + w_offset) * (xr[i] * inv);
  }
}

// Decode (q15 set by the host on NVIDIA: one row, or a batch the dp4a batch kernel takes): the
// output's 15-bit form for the dp4a product that reads it next (kernels_cl/warp.cl), from the values
// this work-group just wrote.
inline void rms_norm_int15(__global const float* orow, uint dim, uint q15, __global uchar* xq, __global float2* blocks) {
#ifdef SLUICE_PTX_SHFL
  if (q15 && !(dim % 1024u == 0u && dim <= 1024u * NORM_REG)) {  // otherwise rms_norm_row made it
    barrier(CLK_GLOBAL_MEM_FENCE);
    int15_row(orow, dim, NORM_WG, xq, blocks);
  }
#endif
}

__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1)))
void rms_norm(__global const float* x, __global const uchar* w, ulong w_off, uint w_dtype, float w_offset, __global float* out,
              uint dim, float eps, __global uchar* xq, __global float2* blocks, uint q15) {
  __local float scratch[NORM_WG];
  const ulong row = get_group_id(0);
  __global uchar* rq = xq + row * 2u * dim;  // the row's form (one row, or a decode batch's rows one after another)
  __global float2* rb = blocks + row * (dim / 32u);
  rms_norm_row((__global float*)x + row * dim, 0, 0u, w + w_off, w_dtype, w_offset, out + row * dim, dim, eps, scratch, q15, rq, rb);
  rms_norm_int15(out + row * dim, dim, q15, rq, rb);
}

// The pre-norm residual step: x += delta, out = rms_norm(x).
__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1)))
void add_rms_norm(__global float* x, __global const float* delta, __global const uchar* w, ulong w_off, uint w_dtype,
                  float w_offset, __global float* out, uint dim, float eps, __global uchar* xq, __global float2* blocks,
                  uint q15) {
  __local float scratch[NORM_WG];
  const ulong row = get_group_id(0);
  __global uchar* rq = xq + row * 2u * dim;
  __global float2* rb = blocks + row * (dim / 32u);
  rms_norm_row(x + row * dim, delta + row * dim, 1u, w + w_off, w_dtype, w_offset, out + row * dim, dim, eps, scratch, q15, rq, rb);
  rms_norm_int15(out + row * dim, dim, q15, rq, rb);
}
