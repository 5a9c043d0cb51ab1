// Rotary embedding. style 0: NeoX (rotate halves), 1: interleaved pairs. The angle is a float32
// product, as the reference computes it, then full-precision cos/sin.

// The rotation of pair i (< half_rot) at `position`: (cos, sin) of its angle, times factor —
// computed once per (position, pair) into a table (rope_table_fill; the host grows it with the
// positions it is given: cl_ops.cpp) and read from there; then a pair (va, vb) rotated by it, its
// new (a, b). Why a table: a decode step's attention rotates its queries first, and four
// full-precision cos/sin pairs a work-item there cost ~2.5 µs a layer on the H100, ~3 % of a
// token (perf/NOTES.md). The rope kernel below, kv_write_rope and attention_short_join
// (kernels_cl/attention.cl, attention_short.cl, whose program includes this file) all rotate
// through these, so every path uses the same bits.
__kernel void rope_table_fill(__global float2* table, __global const float* inv_freq, uint half_rot, float factor,
                              uint from, uint n_positions) {
  const uint i = get_global_id(0), position = from + get_global_id(1);
  if (i >= half_rot || position >= n_positions) return;
  const float angle = (float)position * inv_freq[i];
  table[(ulong)position * half_rot + i] = (float2)(cos(angle) * factor, sin(angle) * factor);
}

inline float2 rope_cs(uint i, int position, __global const float2* table, uint half_rot) {
  return table[(ulong)position * half_rot + i];
}
inline float2 rope_apply(float va, float vb, float2 cs) { return (float2)(va * cs.x - vb * cs.y, vb * cs.x + va * cs.y); }

// The dims of pair i (< half_rot): NeoX (style 0) rotates halves, interleaved neighbours.
inline uint rope_dim_a(uint i, uint half_rot, uint style) { return style == 0u ? i : 2u * i; }
inline uint rope_dim_b(uint i, uint half_rot, uint style) { return style == 0u ? i + half_rot : 2u * i + 1u; }

// Rotates pair i (< half_rot) of the head at v for a token at `position`, in place.
inline void rope_rotate_pair(__global float* v, uint i, int position, __global const float2* table, uint half_rot,
                             uint style) {
  const uint a = rope_dim_a(i, half_rot, style), b = rope_dim_b(i, half_rot, style);
  const float2 r = rope_apply(v[a], v[b], rope_cs(i, position, table, half_rot));
  v[a] = r.x;
  v[b] = r.y;
}

// In place on x [n_tokens, n_heads, head_dim] at each token's position — and on a second tensor
// x2 [n_tokens, n_heads2, head_dim] in the same launch (the host joins the rope of q and of k: one
// launch fewer per layer; n_heads2 = 0 for one tensor).
__kernel void rope(__global float* x, __global const int* positions, __global const float2* table, uint n_heads,
                   uint head_dim, uint half_rot, uint style, __global float* x2, uint n_heads2) {
  const uint i = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
  if (i >= half_rot) return;
  __global float* v = h < n_heads ? x + ((ulong)t * n_heads + h) * head_dim : x2 + ((ulong)t * n_heads2 + (h - n_heads)) * head_dim;
  rope_rotate_pair(v, i, positions[t], table, half_rot, style);
}
