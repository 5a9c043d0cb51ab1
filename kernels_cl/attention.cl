// Attention over the paged KV cache, on the device, for codecs that give OpenCL source.
//
// The host prepends the K codec's source with SL_KV_FN(name) defined as sl_k_##name and the V codec's
// with sl_v_##name; each defines
//   void  SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint head_dim);
//   float SL_KV_FN(load)(__global const uchar* row, uint i);      // element i of a stored row
// Layout of one layer's buffer: n_pages pages; a page holds, for each KV head, page_tokens K rows,
// then for each KV head page_tokens V rows ([head][slot]), rows in the codec's format.
//
// The recent window (sl_kv_layout.recent_window): exact f16 copies of the newest rows, one buffer
// per layer of n_recent_pages pages, a page = [K, V][KV head][slot][HEAD_DIM] halfs; the batch's
// recent_table gives each page of positions its recent page (-1 = none). A query at pos reads the
// keys [att_exact_from, pos] from there.
//
// Built with HEAD_DIM, GROUP (query heads per KV head) and WG (work-group size, a power of two).

inline ulong kv_page_of(__global const int* table, uint position, uint page_tokens) {
  return (ulong)table[position / page_tokens];
}

// The first key a query at pos reads exactly: back from pos through the window while its pages
// have recent pages (the host keeps them contiguous at the sequence's end); pos + 1 when none.
inline int att_exact_from(__global const int* recent, uint recent_window, uint page_tokens, int pos, int lo) {
  if (recent_window == 0u) return pos + 1;
  const int pt = (int)page_tokens;
  const int start = max(lo, pos - (int)recent_window + 1);
  int from = pos + 1;
  for (int p = pos / pt; p >= 0 && p >= start / pt && recent[p] >= 0; --p) from = max(start, p * pt);
  return from;
}

// The exact row of position `position` (kv 0 = K, 1 = V), in recent page `rpage`.
inline __global const half* att_recent_row(__global const half* recent_layer, int rpage, uint kv, uint n_kv_heads,
                                          uint kvh, uint page_tokens, uint position) {
  return recent_layer + ((((ulong)rpage * 2u + kv) * n_kv_heads + kvh) * page_tokens + position % page_tokens) * HEAD_DIM;
}

// One work-group per (token, KV head, role): encode the row into its page slot — by the whole
// group where the codec has encode_row_group (K_ENCODE_GROUP / V_ENCODE_GROUP), else by one
// work-item — and keep its exact copy where the batch gives the page a recent page.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void kv_write(__global const float* k, __global const float* v, __global uchar* layer, ulong page_bytes,
              uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes,
              __global const int* positions, __global const int* seq_slots, __global const int* page_table,
              uint max_pages, uint n_tokens, __global half* recent_layer, __global const int* recent_table,
              uint has_recent) {
#if K_ENCODE_GROUP || V_ENCODE_GROUP
  __local float scratch[32 * HEAD_DIM + 2 * WG];  // encode_row_group's (docs/PLUGINS.md)
#endif
  const uint item = get_group_id(0), lid = get_local_id(0);
  if (item >= n_tokens * n_kv_heads) return;
  const uint t = item / n_kv_heads, h = item % n_kv_heads;
  const uint pos = (uint)positions[t];
  const ulong page = kv_page_of(page_table + (ulong)seq_slots[t] * max_pages, pos, page_tokens);
  const uint slot = pos % page_tokens;
  __global uchar* base = layer + page * page_bytes;
  const uint role = get_group_id(1);
  __global const float* src = (role == 0 ? k : v) + (ulong)item * HEAD_DIM;
  if (role == 0) {
    __global uchar* dst = base + ((ulong)h * page_tokens + slot) * k_row_bytes;
#if K_ENCODE_GROUP
    sl_k_encode_row_group(src, dst, HEAD_DIM, lid, WG, scratch);
#else
    if (lid == 0) sl_k_encode_row(src, dst, HEAD_DIM);
#endif
  } else {
    __global uchar* dst = base + (ulong)n_kv_heads * page_tokens * k_row_bytes + ((ulong)h * page_tokens + slot) * v_row_bytes;
#if V_ENCODE_GROUP
    sl_v_encode_row_group(src, dst, HEAD_DIM, lid, WG, scratch);
#else
    if (lid == 0) sl_v_encode_row(src, dst, HEAD_DIM);
#endif
  }
  if (has_recent) {
    const int rpage = recent_table[(ulong)seq_slots[t] * max_pages + pos / page_tokens];
    if (rpage >= 0) {
      __global half* dst = recent_layer + ((((ulong)rpage * 2u + role) * n_kv_heads + h) * page_tokens + slot) * HEAD_DIM;
      for (uint d = lid; d < HEAD_DIM; d += WG) vstore_half_rte(src[d], d, dst);
    }
  }
}

#define DIMS_PER_ITEM ((HEAD_DIM + WG - 1) / WG)

inline float att_reduce_max(__local float* red, float v) {
  const uint lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float att_reduce_sum(__local float* red, float v) {
  const uint lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// This split's share [lo, hi] of the keys [lo_all, pos] a query at pos attends (lo_all: the sliding
// window's start, or 0).
inline void att_split_range(int pos, uint window, uint n_splits, uint split, int* lo_all, int* lo, int* hi) {
  *lo_all = window ? max(0, pos - (int)window + 1) : 0;
  const int per_split = (pos - *lo_all + 1 + (int)n_splits - 1) / (int)n_splits;
  *lo = *lo_all + (int)split * per_split;
  *hi = min(pos, *lo + per_split - 1);
}

inline float att_scaled(float s, float scale, float softcap) {
  s *= scale;
  return softcap > 0.0f ? tanh(s / softcap) * softcap : s;
}

// One online-softmax step for one head over a tile: s is this work-item's score (-INFINITY past the
// range); updates m and l, stores the work-item's weight in *p_mine and returns the factor that
// rescales what was accumulated before.
inline float att_online_step(__local float* red, float s, bool valid, float* m, float* l, __local float* p_mine) {
  const float m_new = fmax(*m, att_reduce_max(red, s));
  const float e = valid ? exp(s - m_new) : 0.0f;
  *p_mine = e;
  const float corr = exp(*m - m_new);
  *l = *l * corr + att_reduce_sum(red, e);
  *m = m_new;
  return corr;
}

// One head's result: normalised into out with one split, else the unnormalised partial (m, l, acc)
// of this split for attention_merge. acc: this work-item's DIMS_PER_ITEM dims (lid, lid + WG, ...).
inline void att_write(__global float* out, __global float* partial, ulong head, uint n_splits, uint split, float m, float l,
                      const float* acc, uint lid) {
  if (n_splits == 1) {
    const float inv = 1.0f / l;
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
      const uint dim = lid + d * WG;
      if (dim < HEAD_DIM) out[head * HEAD_DIM + dim] = acc[d] * inv;
    }
    return;
  }
  // partial: per (head, split): m, l, then HEAD_DIM accumulators.
  __global float* part = partial + (head * n_splits + split) * (HEAD_DIM + 2);
  if (lid == 0) {
    part[0] = m;
    part[1] = l;
  }
  for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
    const uint dim = lid + d * WG;
    if (dim < HEAD_DIM) part[2 + dim] = acc[d];
  }
}

// One work-group per (KV head, token, key split): the GROUP query heads that share the KV head attend
// over keys [lo, pos] (or this split's share of them) in tiles of WG keys with an online softmax:
// work-item j scores key j of the tile; then each work-item accumulates the weighted values of its
// dims. With n_splits > 1 each group writes its unnormalised partial (m, l, acc) for attention_merge.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void attention(__global const float* q, __global float* out, __global const uchar* layer, ulong page_bytes,
               uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes, __global const int* positions,
               __global const int* seq_slots, __global const int* page_table, uint max_pages, float scale,
               uint window, float softcap, __global const float* sinks, uint has_sinks, uint n_splits,
               __global float* partial, __global const half* recent_layer, __global const int* recent_table,
               uint recent_window) {
  __local float qs[GROUP][HEAD_DIM];
  __local float p[GROUP][WG];
  __local float red[WG];
  const uint kvh = get_group_id(0), t = get_group_id(1), split = get_group_id(2), lid = get_local_id(0);
  const uint n_heads = n_kv_heads * GROUP;
  const int pos = positions[t];
  int lo_all, lo, hi;
  att_split_range(pos, window, n_splits, split, &lo_all, &lo, &hi);
  __global const int* table = page_table + (ulong)seq_slots[t] * max_pages;
  __global const int* recent = recent_table + (ulong)seq_slots[t] * max_pages;
  const int exact = att_exact_from(recent, recent_window, page_tokens, pos, lo_all);
  const ulong v_region = (ulong)n_kv_heads * page_tokens * k_row_bytes;

  for (uint i = lid; i < GROUP * HEAD_DIM; i += WG)
    qs[i / HEAD_DIM][i % HEAD_DIM] = q[((ulong)t * n_heads + kvh * GROUP + i / HEAD_DIM) * HEAD_DIM + i % HEAD_DIM];
  barrier(CLK_LOCAL_MEM_FENCE);

  float m[GROUP], l[GROUP], acc[GROUP][DIMS_PER_ITEM];
  for (uint g = 0; g < GROUP; ++g) {
    // A sink joins the softmax as one extra logit with no value: start from it (first split only).
    const bool sink = has_sinks && split == 0;
    m[g] = sink ? sinks[kvh * GROUP + g] : -INFINITY;
    l[g] = sink ? 1.0f : 0.0f;
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc[g][d] = 0.0f;
  }

  for (int tile = lo; tile <= hi; tile += WG) {
    const int j = tile + (int)lid;
    float s[GROUP];
    if (j <= hi) {
      const ulong page = kv_page_of(table, (uint)j, page_tokens);
      __global const uchar* krow = layer + page * page_bytes + ((ulong)kvh * page_tokens + (uint)j % page_tokens) * k_row_bytes;
      for (uint g = 0; g < GROUP; ++g) s[g] = 0.0f;
      if (j >= exact) {
        __global const half* kx = att_recent_row(recent_layer, recent[j / (int)page_tokens], 0u, n_kv_heads, kvh, page_tokens, (uint)j);
        for (uint d = 0; d < HEAD_DIM; ++d) {
          const float kv = vload_half(d, kx);
          for (uint g = 0; g < GROUP; ++g) s[g] += qs[g][d] * kv;
        }
      } else {
        for (uint d = 0; d < HEAD_DIM; ++d) {
          const float kv = sl_k_load(krow, d);
          for (uint g = 0; g < GROUP; ++g) s[g] += qs[g][d] * kv;
        }
      }
      for (uint g = 0; g < GROUP; ++g) s[g] = att_scaled(s[g], scale, softcap);
    } else {
      for (uint g = 0; g < GROUP; ++g) s[g] = -INFINITY;
    }
    for (uint g = 0; g < GROUP; ++g) {
      const float corr = att_online_step(red, s[g], j <= hi, &m[g], &l[g], &p[g][lid]);
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc[g][d] *= corr;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n_keys = min(WG, hi - tile + 1);
    for (int jj = 0; jj < n_keys; ++jj) {
      const uint key = (uint)(tile + jj);
      const ulong page = kv_page_of(table, key, page_tokens);
      __global const uchar* vrow =
          layer + page * page_bytes + v_region + ((ulong)kvh * page_tokens + key % page_tokens) * v_row_bytes;
      __global const half* vx =
          (int)key >= exact ? att_recent_row(recent_layer, recent[key / page_tokens], 1u, n_kv_heads, kvh, page_tokens, key) : 0;
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
        const uint dim = lid + d * WG;
        if (dim < HEAD_DIM) {
          const float vv = vx ? vload_half(dim, vx) : sl_v_load(vrow, dim);
          for (uint g = 0; g < GROUP; ++g) acc[g][d] += p[g][jj] * vv;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (uint g = 0; g < GROUP; ++g) att_write(out, partial, (ulong)t * n_heads + kvh * GROUP + g, n_splits, split, m[g], l[g], acc[g], lid);
}

// Combines the splits of each (token, head): one work-item per output value.
__kernel void attention_merge(__global const float* partial, __global float* out, uint n_splits, uint n_rows) {
  const uint dim = get_global_id(0), head = get_global_id(1);
  if (dim >= HEAD_DIM || head >= n_rows) return;
  __global const float* part = partial + (ulong)head * n_splits * (HEAD_DIM + 2);
  float m = -INFINITY;
  for (uint s = 0; s < n_splits; ++s) m = fmax(m, part[s * (HEAD_DIM + 2)]);
  float l = 0.0f, a = 0.0f;
  for (uint s = 0; s < n_splits; ++s) {
    __global const float* ps = part + s * (HEAD_DIM + 2);
    if (ps[1] == 0.0f) continue;  // an empty split
    const float w = exp(ps[0] - m);
    l += ps[1] * w;
    a += ps[2 + dim] * w;
  }
  out[(ulong)head * HEAD_DIM + dim] = a / l;
}
