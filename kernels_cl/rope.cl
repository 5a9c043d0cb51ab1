// Rotary embedding. style 0: NeoX (rotate halves), 1: interleaved pairs. The angle is a float32
// product, as the reference computes it, then full-precision cos/sin.

// Rotates pair i (< half_rot) of the head at v for a token at `position`. The rope kernel below and
// kv_write_rope (kernels_cl/attention.cl, whose program includes this file) both use it, so the two
// paths compute the same bits.
inline void rope_rotate_pair(__global float* v, uint i, int position, __global const float* inv_freq, uint half_rot,
                             float factor, uint style) {
  const float angle = (float)position * inv_freq[i];
  const float c = cos(angle) * factor, s = sin(angle) * factor;
  const uint a = style == 0u ? i : 2u * i, b = style == 0u ? i + half_rot : 2u * i + 1u;
  const float va = v[a], vb = v[b];
  v[a] = va * c - vb * s;
  v[b] = vb * c + va * s;
}

// In place on x [n_tokens, n_heads, head_dim] at each token's position — and on a second tensor
// x2 [n_tokens, n_heads2, head_dim] in the same launch (the host joins the rope of q and of k: one
// launch fewer per layer; n_heads2 = 0 for one tensor).
__kernel void rope(__global float* x, __global const int* positions, __global const float* inv_freq, uint n_heads,
                   uint head_dim, uint half_rot, float factor, uint style, __global float* x2, uint n_heads2) {
  const uint i = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
  if (i >= half_rot) return;
  __global float* v = h < n_heads ? x + ((ulong)t * n_heads + h) * head_dim : x2 + ((ulong)t * n_heads2 + (h - n_heads)) * head_dim;
  rope_rotate_pair(v, i, positions[t], inv_freq, half_rot, factor, style);
}
