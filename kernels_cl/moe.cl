// Mixture-of-Experts with the experts chosen on the device (ABI 2.5): routing a token's logits to its
// top k experts, the products of each token with its experts' matrices in a stacked weight, and the
// weighted sum of the experts' outputs. Built into the "matvec" programs (it uses their team sums
// and quantized row loops: WG, TEAM, MAX_T, team_finish, quant_row_*).

#ifndef ROUTE_WG
#define ROUTE_WG 64
#endif
#define ROUTE_MAX_E 1024
#define ROUTE_MAX_K 64

// A NaN ranks below every number (the host's order: core/graph/moe_route.h).
inline float route_rank(float v) { return isnan(v) ? -INFINITY : v; }

// MOE_ROUTE: a work-group a token. The values ranked are the softmax's probabilities (SOFTMAX_TOPK)
// or the logits (TOPK_SOFTMAX); k rounds of a work-group argmax pick the best, ties to the lower
// index; one work-item forms the weights in the host's order and writes the k pairs by increasing id.
__kernel __attribute__((reqd_work_group_size(ROUTE_WG, 1, 1)))
void moe_route(__global const float* logits, uint E, uint k, uint kind, uint normalize, __global const float* factors, uint has_factors,
               __global int* ids, __global float* weights) {
  __local float val[ROUTE_MAX_E];
  __local uchar taken[ROUTE_MAX_E];
  __local float best_v[ROUTE_WG];
  __local uint best_i[ROUTE_WG];
  __local uint chosen[ROUTE_MAX_K];
  __local float shared_max, shared_sum;
  const uint lid = get_local_id(0);
  const ulong t = get_group_id(0);
  __global const float* row = logits + t * E;
  for (uint e = lid; e < E; e += ROUTE_WG) {
    val[e] = row[e];
    taken[e] = 0;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (kind == 0u) {  // SOFTMAX_TOPK: probabilities, summed in index order as the host does
    if (lid == 0) {
      float m = -INFINITY;
      for (uint e = 0; e < E; ++e) m = route_rank(val[e]) > m ? val[e] : m;
      shared_max = m;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < E; e += ROUTE_WG) val[e] = exp(val[e] - shared_max);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
      float sum = 0.0f;
      for (uint e = 0; e < E; ++e) sum += val[e];
      shared_sum = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint e = lid; e < E; e += ROUTE_WG) val[e] /= shared_sum;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint j = 0; j < k; ++j) {
    float bv = -INFINITY;
    uint bi = 0xFFFFFFFFu;
    for (uint e = lid; e < E; e += ROUTE_WG) {
      const float v = route_rank(val[e]);
      if (!taken[e] && (bi == 0xFFFFFFFFu || v > bv)) {  // strided in increasing e: the first of equals stays
        bv = v;
        bi = e;
      }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = ROUTE_WG / 2; s > 0; s >>= 1) {
      if (lid < s) {
        const float ov = best_v[lid + s];
        const uint oi = best_i[lid + s];
        if (oi != 0xFFFFFFFFu && (best_i[lid] == 0xFFFFFFFFu || ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid]))) {
          best_v[lid] = ov;
          best_i[lid] = oi;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
      chosen[j] = best_i[0];
      taken[best_i[0]] = 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid != 0) return;
  float w[ROUTE_MAX_K];
  if (kind == 1u) {  // TOPK_SOFTMAX: softmax over the k logits, best first
    const float m = val[chosen[0]];
    float sum = 0.0f;
    for (uint j = 0; j < k; ++j) sum += (w[j] = exp(val[chosen[j]] - m));
    for (uint j = 0; j < k; ++j) w[j] = w[j] / sum;
  } else {
    float top = 0.0f;
    for (uint j = 0; j < k; ++j) top += val[chosen[j]];
    for (uint j = 0; j < k; ++j) w[j] = normalize ? val[chosen[j]] / top : val[chosen[j]];
  }
  if (has_factors)
    for (uint j = 0; j < k; ++j) w[j] *= factors[chosen[j]];
  // The k pairs in increasing id order (insertion sort: k is small).
  uint order[ROUTE_MAX_K];
  for (uint j = 0; j < k; ++j) {
    uint at = j;
    while (at > 0 && chosen[order[at - 1]] > chosen[j]) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = j;
  }
  for (uint j = 0; j < k; ++j) {
    ids[t * k + j] = (int)chosen[order[j]];
    weights[t * k + j] = w[order[j]];
  }
}

// MATMUL_ID: out[s, r] = sum_c x[xs, c] * w[ids[s] * R + r, c] for slot s (a token's j-th expert,
// s = i * k + j; xs = s, or i where x has a row a token). A work-group serves WG / TEAM rows of one
// slot (group id 1) as matvec_quant does one row (the team's quantized row loops); an id outside the
// experts gives a row of zeros. Plain weights (bits 0) are read value by value (load_value).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_id(__global const uchar* wbase, ulong w_off, uint dtype, uint bits, ulong words_per_row, __global const uchar* sbase, ulong s_off,
               __global const uchar* bbase, ulong b_off, uint scale_dtype, uint group_size, uint R, uint n_experts, uint cols,
               __global const float* x, uint x_per_slot, uint k, __global const int* ids, __global float* out) {
  __local float red[MAX_T * WG];
  const uint lid = get_local_id(0), lane = lid % TEAM;
  const uint row = get_group_id(0) * ROWS_PER_WG + lid / TEAM;
  const uint slot = get_group_id(1);
  const int id = ids[slot];
  const bool live = id >= 0 && (uint)id < n_experts && row < R;
  float acc[MAX_T];
  for (uint t = 0; t < MAX_T; ++t) acc[t] = 0.0f;
  __global const float* xs = x + (ulong)(x_per_slot ? slot : slot / k) * cols;
  if (live) {
    const ulong wrow = (ulong)id * R + row;
    if (bits == 0u) {
      __global const uchar* w = wbase + w_off;
      for (uint c = lane; c < cols; c += TEAM) acc[0] += load_value(w, dtype, wrow * cols + c) * xs[c];
    } else {
      __global const uint* wr = (__global const uint*)(wbase + w_off) + wrow * words_per_row;
      const uint groups = cols / group_size;
      const uint ssize = scale_dtype == DT_F32 ? 4u : 2u;
      __global const uchar* sr = sbase + s_off + wrow * groups * ssize;
      __global const uchar* br = bbase + b_off + wrow * groups * ssize;
      const bool whole_words = (32u % bits == 0u) && (group_size % (32u / bits) == 0u);
      if (bits == 4u && words_per_row % 4u == 0u && group_size % 32u == 0u) {
        quant_row_q4x4(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, xs, cols, 1u, acc);
      } else if (whole_words && bits == 4u) {
        quant_row_words(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, xs, cols, 1u, acc, 4u);
      } else if (whole_words && bits == 8u) {
        quant_row_words(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, xs, cols, 1u, acc, 8u);
      } else {
        for (uint c = lane; c < cols; c += TEAM) {
          const uint g = c / group_size;
          acc[0] += (load_value(sr, scale_dtype, g) * (float)quant_code(wr, c, bits) + load_value(br, scale_dtype, g)) * xs[c];
        }
      }
    }
  }
  // Every team reaches the sums (a barrier inside); a dead row's zeros are written only where it is one.
  team_finish(acc, 1u, red, row, R, out + (ulong)slot * R, 0u, 0u, (__global const uchar*)ids, 0u, 0u);
}

// MOE_COMBINE: out[i, c] += sum_j weights[i, j] * x[i * k + j, c], j in order. Global (dim, n).
__kernel void moe_combine(__global const float* x, __global const float* weights, uint k, uint dim, __global float* out) {
  const uint c = get_global_id(0);
  const ulong i = get_global_id(1);
  if (c >= dim) return;
  float acc = out[i * dim + c];
  for (uint j = 0; j < k; ++j) acc += weights[i * k + j] * x[(i * k + j) * dim + c];
  out[i * dim + c] = acc;
}

// MATMUL_ID's common case — 4-bit rows in groups of 32k columns — with each team computing ID_R rows
// of its slot's expert: a work-item loads its 32 activations once a step and applies them to ID_R
// weight rows (one row a team read the slot's input once a row: 8 bytes of activations for every
// weight byte, which capped the first kernel at a fiftieth of the memory's speed), and the ID_R
// independent weight loads keep more requests in flight. Global (teams · WG / TEAM… as matvec_id).
#ifndef ID_R
#define ID_R 4
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_id_q4(__global const uchar* wbase, ulong w_off, ulong words_per_row, __global const uchar* sbase, ulong s_off,
                  __global const uchar* bbase, ulong b_off, uint scale_dtype, uint group_size, uint R, uint n_experts, uint cols,
                  __global const float* x, uint x_per_slot, uint k, __global const int* ids, __global float* out) {
  __local float red[MAX_T * WG];
  const uint lid = get_local_id(0), lane = lid % TEAM;
  const uint first = (get_group_id(0) * (WG / TEAM) + lid / TEAM) * ID_R;
  const uint slot = get_group_id(1);
  const int id = ids[slot];
  const uint live = first < R ? min((uint)ID_R, R - first) : 0u;  // the team's rows (zeros for an id outside the experts)
  float acc[MAX_T];
  for (uint t = 0; t < MAX_T; ++t) acc[t] = 0.0f;
  if (live && id >= 0 && (uint)id < n_experts) {
    __global const float* xs = x + (ulong)(x_per_slot ? slot : slot / k) * cols;
    const ulong row0 = (ulong)id * R + first;
    const uint groups = cols / group_size, ssize = scale_dtype == DT_F32 ? 4u : 2u;
    __global const uint* w = (__global const uint*)(wbase + w_off) + row0 * words_per_row;
    __global const uchar* sr = sbase + s_off + row0 * groups * ssize;
    __global const uchar* br = bbase + b_off + row0 * groups * ssize;
    for (uint i = lane; i < words_per_row / 4u; i += TEAM) {
      const uint c0 = i * 32u, g = c0 / group_size;
      float8 xv[4];
      float sx = 0.0f;
      for (uint q = 0; q < 4; ++q) {
        xv[q] = vload8(q, xs + c0);
        sx += (xv[q].s0 + xv[q].s1) + (xv[q].s2 + xv[q].s3) + (xv[q].s4 + xv[q].s5) + (xv[q].s6 + xv[q].s7);
      }
      uint4 w4[ID_R];
      float s[ID_R], b[ID_R];
      for (uint r = 0; r < ID_R; ++r) {  // every row's loads before any is used
        const bool on = r < live;
        w4[r] = on ? vload4(i, w + (ulong)r * words_per_row) : (uint4)(0u);
        s[r] = on ? load_value(sr, scale_dtype, (ulong)r * groups + g) : 0.0f;
        b[r] = on ? load_value(br, scale_dtype, (ulong)r * groups + g) : 0.0f;
      }
      for (uint r = 0; r < ID_R; ++r) {
        const uint wv[4] = {w4[r].s0, w4[r].s1, w4[r].s2, w4[r].s3};
        float qx = 0.0f;
        for (uint q = 0; q < 4; ++q) {
          const float4 p = fma(q4_hi(wv[q]), xv[q].hi, q4_lo(wv[q]) * xv[q].lo);
          qx += (p.s0 + p.s1) + (p.s2 + p.s3);
        }
        acc[r] += s[r] * qx + b[r] * sx;
      }
    }
  }
  // The team's ID_R sums meet; lane 0 writes the live ones (acc[r] as team_finish's "token" r, stride 1).
  team_finish(acc, live, red, 0u, 1u, out + (ulong)slot * R + first, 1u, 0u, (__global const uchar*)ids, 0u, 0u);
}
