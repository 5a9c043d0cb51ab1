// Attention through the codecs' fused device functions (docs/PLUGINS.md, "The fused device path"):
// keys are scored against the query rotated once into the K codec's domain, values accumulate in
// the V codec's domain and are mapped back once — no stored row is ever decoded to head_dim floats.
// A codec without them keeps its role on the generic element loads (SL_KV_FN(load)).
//
// Pasted after attention.cl (its helpers), built with HEAD_DIM, GROUP, WG and:
//   K_FUSED, V_FUSED  1 when the K / V codec's source has the fused functions
//   HPW               query heads per work-group (a divisor of GROUP): the local memory below is
//                     HPW × (K domain + V domain) floats, so the host picks HPW to fit the device
//   K_HEADS           1 when the K codec also has fused_prepare_queries and fused_score_heads (their
//                     own layout of q_slots: one unpack of a key for every head of the work-group)
//   V_FINISH_HEADS    1 when the V codec also has fused_finish_heads (one barrier per stage for all heads)
//   V_SLOTS           the V codec's accumulator slots (domain_dim / HEAD_DIM). With one slot (one
//                     rotation) values accumulate in registers and only the final rotation back
//                     uses local memory — q_slots', when the keys are fused too (acc is then unused)
//   V_VALUES8         1 when the V codec has fused_values8 (eight neighbouring coordinates at once)
// Local memory arguments: q_slots (HPW × k_area floats: the K codec's query area, domain_dim +
// domain_dim / head_dim + 64 floats — the query under each rotation and the codec's tables),
// acc (HPW × V domain floats: the value accumulators of every V rotation).
//
// The query area does not depend on the key split: attention_fused_queries builds it once per
// (token, HPW heads) into q_images, and every split's work-group copies it. Rotating the query in
// each split cost the turbo keys (16 rotations × 4 heads, 7 transform stages) as much as scoring
// four tiles of keys, which made more splits a loss.
#if K_FUSED || V_FUSED

#if V_FUSED && V_SLOTS == 1
#define V_IN_REGISTERS 1
#else
#define V_IN_REGISTERS 0
#endif

// Values by octets: with one slot and fused_values8, the HEAD_DIM / 8 work-items of a value lane
// take a key's row together, each eight neighbouring coordinates (one header, BITS bytes, eight
// lookups and one load of each head's weight for eight coordinates — per coordinate, fused_value
// pays all of that), and WG / (HEAD_DIM / 8) lanes take different keys; the lanes' sums are added
// once at the end.
#if V_IN_REGISTERS && defined(V_VALUES8) && V_VALUES8 && HEAD_DIM % 8 == 0 && WG >= HEAD_DIM / 8
#define V_OCTETS 1
#define V_OCT (HEAD_DIM / 8)
#define V_LANES (WG / V_OCT)
#define V_AHEAD 4u
#else
#define V_OCTETS 0
#endif

// The number of float4s of one work-group's query area (the host allocates this many).
#define Q_IMAGE4(k_area) ((HPW * (k_area) + 3u) / 4u)

// A query area (n float4s) from global into local memory by the work-group, IMAGE_AHEAD loads a
// work-item in flight before their stores. One load then its store a step made every work-group wait
// ~66 round trips to L2 for a 16-rotation area of 4 heads before its first key (H200: the kernel with
// no scoring and no values still took 31 of its 86 µs).
#define IMAGE_AHEAD 8u
inline void att_copy_image(__local float4* to, __global const float4* from, uint n, uint lid) {
  for (uint i0 = lid; i0 < n; i0 += IMAGE_AHEAD * WG) {
    float4 t[IMAGE_AHEAD];
#pragma unroll
    for (uint k = 0; k < IMAGE_AHEAD; ++k) t[k] = i0 + k * WG < n ? from[i0 + k * WG] : (float4)(0.0f);
#pragma unroll
    for (uint k = 0; k < IMAGE_AHEAD; ++k)
      if (i0 + k * WG < n) to[i0 + k * WG] = t[k];
  }
}

#if K_FUSED
// The K codec's query area for HPW heads of one token, into q_images[(t, head group)]: one
// work-group of WIDE_WG (up to 256: the transforms of 16 rotations × HPW heads) per (HPW query heads,
// token, part). With K_QUERY_PARTS (the codec has fused_prepare_queries_part) the host may split an
// area's rotations over several work-groups (the third dimension): a decode step has few areas, and
// one work-group's transforms of all 16 rotations took 12 µs a layer on the H200.
__kernel __attribute__((reqd_work_group_size(WIDE_WG, 1, 1)))
void attention_fused_queries(__global const float* q, __global float4* q_images, uint n_kv_heads, __local float4* q_slots4,
                             uint k_area) {
  __local float* q_slots = (__local float*)q_slots4;  // declared float4: 16-byte aligned for the codec
  __local float q_orig[HPW][HEAD_DIM];
  const uint hg = get_group_id(0), head0 = hg * HPW, t = get_group_id(1), lid = get_local_id(0);
  const uint n_heads = n_kv_heads * GROUP;
  for (uint i = lid; i < HPW * HEAD_DIM; i += WIDE_WG)
    q_orig[i / HEAD_DIM][i % HEAD_DIM] = q[((ulong)t * n_heads + head0 + i / HEAD_DIM) * HEAD_DIM + i % HEAD_DIM];
  barrier(CLK_LOCAL_MEM_FENCE);
#if K_HEADS && K_QUERY_PARTS
  uint first, count;
  sl_k_fused_prepare_queries_part(q_slots, k_area, &q_orig[0][0], HPW, get_group_id(2), get_num_groups(2), lid, WIDE_WG,
                                  &first, &count);  // has barriers
  barrier(CLK_LOCAL_MEM_FENCE);
  __global float* part_image = (__global float*)(q_images + ((ulong)t * (n_heads / HPW) + hg) * Q_IMAGE4(k_area));
  for (uint i = lid; i < count; i += WIDE_WG) part_image[first + i] = q_slots[first + i];
#else
#if K_HEADS
  sl_k_fused_prepare_queries(q_slots, k_area, &q_orig[0][0], HPW, lid, WIDE_WG);  // every head at once; has barriers
#else
  for (uint g = 0; g < HPW; ++g) {
    for (uint i = lid; i < HEAD_DIM; i += WIDE_WG) q_slots[g * k_area + i] = q_orig[g][i];
    sl_k_fused_prepare_query(q_slots + g * k_area, lid, WIDE_WG);  // has barriers: every work-item calls it
  }
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  __global float4* image = q_images + ((ulong)t * (n_heads / HPW) + hg) * Q_IMAGE4(k_area);
  for (uint i = lid; i < Q_IMAGE4(k_area); i += WIDE_WG) image[i] = q_slots4[i];
#endif
}
#endif

// One work-group per (HPW query heads of one KV head, token, key split), as `attention` but with
// HPW heads instead of GROUP: work-item j scores key j of each tile of WG keys; then the tile's
// values are accumulated, each work-item owning the dims lid, lid + WG, ... of every accumulator.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void attention_fused(__global const float* q, __global float* out, __global const uchar* layer, ulong page_bytes,
                     uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes,
                     __global const int* positions, __global const int* seq_slots, __global const int* page_table,
                     uint max_pages, float scale, uint window, float softcap, __global const float* sinks,
                     uint has_sinks, uint n_splits, __global float* partial, __global const half* recent_layer,
                     __global const int* recent_table, uint recent_window, __local float4* q_slots4, uint k_area,
                     __local float* acc, uint v_domain, __global const float4* q_images, __global uchar* oq,
                     __global float2* oblocks, uint q15) {
  __local float* q_slots = (__local float*)q_slots4;  // declared float4: 16-byte aligned for the codec
  __local float q_orig[HPW][HEAD_DIM];
  __local float p[HPW * WG];
  __local float red[HPW * WG];
  __local ulong v_at[WG];  // the tile's value rows (byte offsets in layer)
#if V_FUSED
  __local float v_tables[64];  // the V codec's lookup tables (docs/PLUGINS.md)
#endif
  const uint head0 = get_group_id(0) * HPW, t = get_group_id(1), split = get_group_id(2), lid = get_local_id(0);
  const uint kvh = head0 / GROUP;
  const uint n_heads = n_kv_heads * GROUP;
  const int pos = positions[t];
  int lo_all, lo, hi;
  att_split_range(pos, window, n_splits, split, &lo_all, &lo, &hi);
  __global const int* table = page_table + (ulong)seq_slots[t] * max_pages;
  __global const int* recent = recent_table + (ulong)seq_slots[t] * max_pages;
  const int exact = att_exact_from(recent, recent_window, page_tokens, pos, lo_all);
  const ulong v_region = (ulong)n_kv_heads * page_tokens * k_row_bytes;

  for (uint i = lid; i < HPW * HEAD_DIM; i += WG)
    q_orig[i / HEAD_DIM][i % HEAD_DIM] = q[((ulong)t * n_heads + head0 + i / HEAD_DIM) * HEAD_DIM + i % HEAD_DIM];
#if K_FUSED
  __global const float4* image = q_images + ((ulong)t * (n_heads / HPW) + get_group_id(0)) * Q_IMAGE4(k_area);
  att_copy_image(q_slots4, image, Q_IMAGE4(k_area), lid);
#endif
#if V_FUSED
#if !V_IN_REGISTERS
  for (uint i = lid; i < HPW * v_domain; i += WG) acc[i] = 0.0f;
#endif
  sl_v_fused_prepare_values(v_tables, lid, WG);
#endif
  barrier(CLK_LOCAL_MEM_FENCE);

  // acc_o: values read in the original domain (the recent window's rows; a V codec without fused
  // functions). acc_v: the V codec's single domain, when it has one slot.
  float acc_o[HPW][DIMS_PER_ITEM];
  float m[HPW], l[HPW];
#if V_OCTETS
  // This work-item's eight coordinates of value lane v_lane (lanes past V_LANES idle in the values).
  const uint v_lane = lid / V_OCT, v_oct = lid % V_OCT;
  float acc_v[HPW][8];
#elif V_IN_REGISTERS
  float acc_v[HPW][DIMS_PER_ITEM];
#endif
  for (uint g = 0; g < HPW; ++g) {
    const bool sink = has_sinks && split == 0;
    m[g] = sink ? sinks[head0 + g] : -INFINITY;
    l[g] = sink ? 1.0f : 0.0f;
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc_o[g][d] = 0.0f;
#if V_OCTETS
    for (uint e = 0; e < 8; ++e) acc_v[g][e] = 0.0f;
#elif V_IN_REGISTERS
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc_v[g][d] = 0.0f;
#endif
  }

  for (int tile = lo; tile <= hi; tile += WG) {
    const int j = tile + (int)lid;
    float s[HPW];
    if (j <= hi) {
      if (j >= exact) {
        __global const half* kx = att_recent_row(recent_layer, recent[j / (int)page_tokens], 0u, n_kv_heads, kvh, page_tokens, (uint)j);
        for (uint g = 0; g < HPW; ++g) s[g] = 0.0f;
        for (uint d = 0; d < HEAD_DIM; ++d) {
          const float kv = vload_half(d, kx);
          for (uint g = 0; g < HPW; ++g) s[g] += q_orig[g][d] * kv;
        }
      } else {
        const ulong page = kv_page_of(table, (uint)j, page_tokens);
        __global const uchar* krow = layer + page * page_bytes + ((ulong)kvh * page_tokens + (uint)j % page_tokens) * k_row_bytes;
        v_at[lid] = page * page_bytes + v_region + ((ulong)kvh * page_tokens + (uint)j % page_tokens) * v_row_bytes;
#if K_FUSED && K_HEADS
        sl_k_fused_score_heads(krow, q_slots, k_area, HPW, s);  // the row unpacked once for every head
#elif K_FUSED
        for (uint g = 0; g < HPW; ++g) s[g] = sl_k_fused_score(krow, q_slots + g * k_area);
#else
        for (uint g = 0; g < HPW; ++g) s[g] = 0.0f;
        for (uint d = 0; d < HEAD_DIM; ++d) {
          const float kv = sl_k_load(krow, d);
          for (uint g = 0; g < HPW; ++g) s[g] += q_orig[g][d] * kv;
        }
#endif
      }
      for (uint g = 0; g < HPW; ++g) s[g] = att_scaled(s[g], scale, softcap);
    } else {
      for (uint g = 0; g < HPW; ++g) s[g] = -INFINITY;
    }
    float corr[HPW];
    att_online_steps(red, HPW, s, j <= hi, m, l, p, corr);
    for (uint g = 0; g < HPW; ++g) {
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc_o[g][d] *= corr[g];
#if V_OCTETS
      for (uint e = 0; e < 8; ++e) acc_v[g][e] *= corr[g];
#elif V_IN_REGISTERS
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc_v[g][d] *= corr[g];
#elif V_FUSED
      // Every slot's entries of this work-item's dims (only it ever touches them).
      if (corr[g] != 1.0f)
        for (uint slot = 0; slot < V_SLOTS; ++slot)
          for (uint dim = lid; dim < HEAD_DIM; dim += WG) acc[g * v_domain + slot * HEAD_DIM + dim] *= corr[g];
#endif
    }
    const int n_keys = min(WG, hi - tile + 1);
    const int n_stored = clamp(exact - tile, 0, n_keys);  // keys [tile, tile + n_stored) read from the pages
    int jj = 0;
#if V_OCTETS
    // The stored rows, lane by lane; V_AHEAD keys' loads before their use (with two, the values took
    // 23 of the kernel's 86 µs on the H200 at depth 32768: each step waited on its loads).
    if (v_lane < V_LANES) {
      int key = (int)v_lane;
      for (; key + (int)((V_AHEAD - 1u) * V_LANES) < n_stored; key += (int)(V_AHEAD * V_LANES)) {
        float va[V_AHEAD][8];
        uint slot;
#pragma unroll
        for (uint u = 0; u < V_AHEAD; ++u) sl_v_fused_values8(layer + v_at[key + u * V_LANES], v_oct, v_tables, va[u], &slot);
        for (uint g = 0; g < HPW; ++g)
#pragma unroll
          for (uint u = 0; u < V_AHEAD; ++u) {
            const float pu = p[g * WG + key + u * V_LANES];
            for (uint e = 0; e < 8; ++e) acc_v[g][e] += pu * va[u][e];
          }
      }
      for (; key < n_stored; key += (int)V_LANES) {
        float va[8];
        uint slot;
        sl_v_fused_values8(layer + v_at[key], v_oct, v_tables, va, &slot);
        for (uint g = 0; g < HPW; ++g) {
          const float pa = p[g * WG + key];
          for (uint e = 0; e < 8; ++e) acc_v[g][e] += pa * va[e];
        }
      }
    }
    jj = n_stored;
#endif
    // The stored rows, ATT_VU keys' loads before their use.
    for (; jj + ATT_VU <= n_stored; jj += ATT_VU) {
      float vv[ATT_VU][DIMS_PER_ITEM];
#if V_FUSED
      uint slot[ATT_VU][DIMS_PER_ITEM];
#endif
      for (uint u = 0; u < ATT_VU; ++u) {
        __global const uchar* vrow = layer + v_at[jj + u];
        for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
          const uint dim = lid + d * WG;
#if V_FUSED
          vv[u][d] = dim < HEAD_DIM ? sl_v_fused_value(vrow, dim, v_tables, &slot[u][d]) : 0.0f;
#else
          vv[u][d] = dim < HEAD_DIM ? sl_v_load(vrow, dim) : 0.0f;
#endif
        }
      }
      for (uint u = 0; u < ATT_VU; ++u)
        for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
#if V_IN_REGISTERS
          for (uint g = 0; g < HPW; ++g) acc_v[g][d] += p[g * WG + jj + u] * vv[u][d];
#elif V_FUSED
          const uint dim = lid + d * WG;
          if (dim < HEAD_DIM) {
            __local float* a = acc + slot[u][d] * HEAD_DIM + dim;
            for (uint g = 0; g < HPW; ++g) a[g * v_domain] += p[g * WG + jj + u] * vv[u][d];
          }
#else
          for (uint g = 0; g < HPW; ++g) acc_o[g][d] += p[g * WG + jj + u] * vv[u][d];
#endif
        }
    }
    for (; jj < n_stored; ++jj) {
      __global const uchar* vrow = layer + v_at[jj];
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
        const uint dim = lid + d * WG;
        if (dim < HEAD_DIM) {
#if V_FUSED
          uint slot;
          const float vv = sl_v_fused_value(vrow, dim, v_tables, &slot);  // once for every head of the group
#if V_IN_REGISTERS
          for (uint g = 0; g < HPW; ++g) acc_v[g][d] += p[g * WG + jj] * vv;
#else
          __local float* a = acc + slot * HEAD_DIM + dim;
          for (uint g = 0; g < HPW; ++g) a[g * v_domain] += p[g * WG + jj] * vv;
#endif
#else
          const float vv = sl_v_load(vrow, dim);
          for (uint g = 0; g < HPW; ++g) acc_o[g][d] += p[g * WG + jj] * vv;
#endif
        }
      }
    }
    // The recent window's exact rows.
    for (; jj < n_keys; ++jj) {
      const uint key = (uint)(tile + jj);
      __global const half* vx = att_recent_row(recent_layer, recent[key / page_tokens], 1u, n_kv_heads, kvh, page_tokens, key);
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
        const uint dim = lid + d * WG;
        if (dim < HEAD_DIM) {
          const float vv = vload_half(dim, vx);
          for (uint g = 0; g < HPW; ++g) acc_o[g][d] += p[g * WG + jj] * vv;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#if V_FUSED
  // Back to the original domain once: fin[g][0, HEAD_DIM) then holds the codec's part.
#if V_IN_REGISTERS && K_FUSED
  __local float* fin = q_slots;  // the keys are scored: their area holds the values' now
  const uint fin_stride = k_area;
#else
  __local float* fin = acc;
  const uint fin_stride = v_domain;
#endif
#if V_OCTETS
  // The lanes' sums, one lane after another (a fixed count of barriers).
  for (uint lane = 0; lane < V_LANES; ++lane) {
    if (v_lane == lane)
      for (uint g = 0; g < HPW; ++g)
        for (uint e = 0; e < 8; ++e) {
          __local float* f = fin + g * fin_stride + v_oct * 8 + e;
          *f = (lane ? *f : 0.0f) + acc_v[g][e];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#elif V_IN_REGISTERS
  for (uint g = 0; g < HPW; ++g)
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
      const uint dim = lid + d * WG;
      if (dim < HEAD_DIM) fin[g * fin_stride + dim] = acc_v[g][d];
    }
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
#if V_FINISH_HEADS
  sl_v_fused_finish_heads(fin, fin_stride, HPW, lid, WG);
#else
  for (uint g = 0; g < HPW; ++g) sl_v_fused_finish(fin + g * fin_stride, lid, WG);
#endif
  for (uint g = 0; g < HPW; ++g)
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
      const uint dim = lid + d * WG;
      if (dim < HEAD_DIM) acc_o[g][d] += fin[g * fin_stride + dim];
    }
#endif

  for (uint g = 0; g < HPW; ++g) att_write(out, partial, (ulong)t * n_heads + head0 + g, n_splits, split, m[g], l[g], acc_o[g], lid, oq, oblocks,
                                        q15, n_heads * HEAD_DIM);
}

#undef V_IN_REGISTERS
#undef V_OCTETS
#undef V_OCT
#undef V_LANES
#undef V_AHEAD
#undef Q_IMAGE4
#undef IMAGE_AHEAD
#endif
