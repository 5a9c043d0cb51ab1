// Attention in short passes, for codecs read through SL_KV_FN(load) (pasted after attention.cl, whose
// helpers and defines it uses; built where warps of 32 exchange values: SLUICE_PTX_SHFL, or the
// local-memory emulation ATT_SHFL_LOCAL that checks the same code on other devices).
//
// Why: the generic kernel (attention.cl) is a chain of waits — the keys' loads, then two block-wide
// reductions of the online softmax (about 17 barriers a tile), then the value rows in groups, each
// group's loads issued after the previous group's arrived. On the H100 at depth 0 (≤ 80 keys) that
// chain cost 19 µs a layer, 16 % of a decode token (perf/NOTES.md). Here every warp of the work-group
// owns SHORT_KPW keys of each pass and issues the loads of their key AND value rows together; it
// scores them with the halving sums (att_halve: lane x ends with the score of key x / SHORT_GP for
// head x % SHORT_GP), keeps its own online softmax with shuffles — no barrier inside the loop — and
// the warps meet once, at the end, through local memory.
//
// One work-group of WIDE_WG per (KV head, token, key split), the same arguments as `attention`; with
// n_splits > 1 it writes the split's partial (m, l, acc) for attention_merge as att_write does.
//
// attention_short_join also does the decode layer's kv_write — and the deferred rope of q and k
// before it — in its own launch (the host defers them: cl_kv_cache.cpp). Why: a launch costs 5-7 µs
// of the H100's time even when it does almost nothing; kv_write_rope was 6 µs a layer, 0.19 ms a
// token. Only for a batch whose tokens are of different sequences (no token reads another's new
// row). Each work-group rotates its GROUP query heads in registers (rope_cs/rope_apply, the rope
// kernel's arithmetic); the split whose keys hold pos rotates k's head kvh in place and encodes the
// token's K and V rows (kv_write_rows, as kv_write does), and a barrier makes them visible to its
// own passes, which then read key pos like any other. The rotated query goes back to q for the
// caller: with one split by the group itself, after every work-item has read it; with several,
// where one split's write could race another's read, by attention_merge.
#if ATT_SHUFFLES && HEAD_DIM % 32 == 0 && HEAD_DIM <= 128 && GROUP <= 16 && WIDE_WG % 32 == 0 && \
    (WIDE_WG / 32) * GROUP * HEAD_DIM <= 8192
#define SHORT_WARPS (WIDE_WG / 32)
#define SHORT_GP (ATT_GP < 4 ? 4 : ATT_GP)  // heads a pass's 32 scores cover (lanes past GROUP idle)
#define SHORT_KPW (32 / SHORT_GP)          // keys a warp takes a pass: SHORT_KPW × SHORT_GP = 32 scores
#define SHORT_DPL (HEAD_DIM / 32)           // dims of a row a lane holds: lane + 32·i

// v of lane `src` of this warp.
#ifdef SLUICE_PTX_SHFL
inline float att_shfl_idx(float v, uint src, __local float* scratch) {
  int o;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_int(v)), "r"(src));
  return as_float(o);
}
#else
inline float att_shfl_idx(float v, uint src, __local float* scratch) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  const float o = scratch[(lid & ~31u) | src];
  barrier(CLK_LOCAL_MEM_FENCE);
  return o;
}
#endif

// attention_short's arguments (those of `attention` in attention.cl), shared by both kernels and the
// passes' body.
#define SHORT_ARGS                                                                                                     \
  __global float *q, __global float *out, __global uchar *layer, ulong page_bytes, uint page_tokens, uint n_kv_heads,  \
      uint k_row_bytes, uint v_row_bytes, __global const int *positions, __global const int *seq_slots,               \
      __global const int *page_table, uint max_pages, float scale, uint window, float softcap,                        \
      __global const float *sinks, uint has_sinks, uint n_splits, __global float *partial, __global half *recent_layer, \
      __global const int *recent_table, uint recent_window, __global uchar *oq, __global float2 *oblocks, uint q15
#define SHORT_PASS                                                                                                  \
  q, out, layer, page_bytes, page_tokens, n_kv_heads, k_row_bytes, v_row_bytes, positions, seq_slots, page_table, \
      max_pages, scale, window, softcap, sinks, has_sinks, n_splits, partial, recent_layer, recent_table,         \
      recent_window, oq, oblocks, q15

// The kernels' body; `join` is a constant in each (the deferred work: attention_short_join's
// arguments k .. style, kv_scratch the encoders' local memory).
inline void short_passes(SHORT_ARGS, __local float* scratch,
                         __local float (*warp_m)[GROUP], __local float (*warp_l)[GROUP],
                         __local float (*warp_acc)[GROUP][HEAD_DIM], const bool join, __global float* k,
                         __global const float* v, __global const float2* rope_table, uint half_rot, uint style,
                         __local float* kv_scratch) {
  const uint kvh = get_group_id(0), t = get_group_id(1), split = get_group_id(2), lid = get_local_id(0);
  const uint warp = lid / 32u, lane = lid % 32u;
  const uint n_heads = n_kv_heads * GROUP;
  const int pos = positions[t];
  int lo_all, lo, hi;
  att_split_range(pos, window, n_splits, split, &lo_all, &lo, &hi);
  __global const int* table = page_table + (ulong)seq_slots[t] * max_pages;
  __global const int* recent = recent_table + (ulong)seq_slots[t] * max_pages;
  const int exact = att_exact_from(recent, recent_window, page_tokens, pos, lo_all);
  const ulong v_region = (ulong)n_kv_heads * page_tokens * k_row_bytes;

  // This lane's dims of the GROUP queries; joined, the rotary ones rotated from both dims of their pair.
  float qr[GROUP][SHORT_DPL];
#pragma unroll
  for (uint i = 0; i < SHORT_DPL; ++i) {
    const uint d = lane + 32u * i;
    const bool rotary = join && d < 2u * half_rot;
    const uint pair = style == 0u ? (d < half_rot ? d : d - half_rot) : d / 2u;
    const uint a = rope_dim_a(pair, half_rot, style), b = rope_dim_b(pair, half_rot, style);
    const float2 cs = rotary ? rope_cs(pair, pos, rope_table, half_rot) : (float2)(1.0f, 0.0f);
#pragma unroll
    for (uint g = 0; g < GROUP; ++g) {
      __global const float* row = q + ((ulong)t * n_heads + kvh * GROUP + g) * HEAD_DIM;
      float x = row[d];
      if (rotary) {
        const float2 r = rope_apply(row[a], row[b], cs);
        x = d == a ? r.x : r.y;
      }
      qr[g][i] = x;
    }
  }
  if (join) {
    // The split whose keys hold pos writes the token's rows (the others never read key pos): k's
    // head rotated in place, then encoded as kv_write encodes it.
    const bool writer = lo <= pos && pos <= hi;
    __global float* krow = k + ((ulong)t * n_kv_heads + kvh) * HEAD_DIM;
    if (writer)
      for (uint i = lid; i < half_rot; i += WIDE_WG) rope_rotate_pair(krow, i, pos, rope_table, half_rot, style);
    barrier(CLK_GLOBAL_MEM_FENCE);  // the rotated K row before it is encoded; every query read before it is written
    // No barrier inside this branch (PoCL miscompiles one under a work-group-uniform if): the
    // encoders get scratch of their own, and the host joins only codecs whose encoders have none.
    if (writer)
      kv_write_rows(k, v, layer, page_bytes, page_tokens, n_kv_heads, k_row_bytes, v_row_bytes, positions, seq_slots,
                    page_table, max_pages, recent_layer, recent_table, recent_window != 0u, kv_scratch,
                    kv_scratch + KV_WRITE_SCRATCH, false, t, kvh);
    if (n_splits == 1u && warp == 0u) {
#pragma unroll
      for (uint g = 0; g < GROUP; ++g)
#pragma unroll
        for (uint i = 0; i < SHORT_DPL; ++i)
          if (lane + 32u * i < 2u * half_rot) q[((ulong)t * n_heads + kvh * GROUP + g) * HEAD_DIM + lane + 32u * i] = qr[g][i];
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);  // the new rows visible to the passes; kv_scratch free again
  }

  // The score this lane holds after the halving: key my_key of the warp's pass, head my_head. The
  // warp's running maximum and sum of head my_head (every lane of that head holds the same).
  const uint my_head = lane % SHORT_GP, my_key = lane / SHORT_GP;
  float m_mine = -INFINITY, l_mine = 0.0f;
  float acc[GROUP][SHORT_DPL];
#pragma unroll
  for (uint g = 0; g < GROUP; ++g)
#pragma unroll
    for (uint i = 0; i < SHORT_DPL; ++i) acc[g][i] = 0.0f;

  // Every work-item runs every pass (the emulated shuffles have barriers); keys past hi load nothing.
  for (int base = lo; base <= hi; base += SHORT_WARPS * SHORT_KPW) {
    const int first = base + (int)(warp * SHORT_KPW);
    float kv[SHORT_KPW][SHORT_DPL], vv[SHORT_KPW][SHORT_DPL];
#pragma unroll
    for (uint u = 0; u < SHORT_KPW; ++u) {
      const int j = first + (int)u;
#pragma unroll
      for (uint i = 0; i < SHORT_DPL; ++i) kv[u][i] = vv[u][i] = 0.0f;
      if (j > hi) continue;
      if (j >= exact) {
        const int rpage = recent[j / (int)page_tokens];
        __global const half* kx = att_recent_row(recent_layer, rpage, 0u, n_kv_heads, kvh, page_tokens, (uint)j);
        __global const half* vx = att_recent_row(recent_layer, rpage, 1u, n_kv_heads, kvh, page_tokens, (uint)j);
#pragma unroll
        for (uint i = 0; i < SHORT_DPL; ++i) {
          kv[u][i] = vload_half(lane + 32u * i, kx);
          vv[u][i] = vload_half(lane + 32u * i, vx);
        }
      } else {
        const ulong page = kv_page_of(table, (uint)j, page_tokens);
        const ulong slot_row = (ulong)kvh * page_tokens + (uint)j % page_tokens;
        __global const uchar* krow = layer + page * page_bytes + slot_row * k_row_bytes;
        __global const uchar* vrow = layer + page * page_bytes + v_region + slot_row * v_row_bytes;
#pragma unroll
        for (uint i = 0; i < SHORT_DPL; ++i) {
          kv[u][i] = sl_k_load(krow, lane + 32u * i);
          vv[u][i] = sl_v_load(vrow, lane + 32u * i);
        }
      }
    }
    // This lane's part of every (key, head) dot product, then the warp's sums: after five halvings
    // lane x holds the whole of product x.
    float part[32];
#pragma unroll
    for (uint x = 0; x < 32; ++x) part[x] = 0.0f;
#pragma unroll
    for (uint u = 0; u < SHORT_KPW; ++u)
#pragma unroll
      for (uint g = 0; g < GROUP; ++g)
#pragma unroll
        for (uint i = 0; i < SHORT_DPL; ++i) part[u * SHORT_GP + g] += qr[g][i] * kv[u][i];
#pragma unroll
    for (uint m = 16; m > 0; m >>= 1) {
      const bool upper = (lane & m) != 0;
#pragma unroll
      for (uint x = 0; x < 16; ++x)
        if (x < m) part[x] = att_halve(part[x], part[x + m], upper, (int)m, scratch);
    }
    const bool valid = my_head < GROUP && first + (int)my_key <= hi;
    const float s = valid ? att_scaled(part[0], scale, softcap) : -INFINITY;
    // The online softmax of each head over the warp's keys: lanes of one head differ in the bits
    // from SHORT_GP up.
    float top = s;
#pragma unroll
    for (uint m = SHORT_GP; m < 32; m <<= 1) top = fmax(top, att_shfl_xor(top, (int)m, scratch));
    const float m_new = fmax(m_mine, top);
    const float corr = m_new == -INFINITY ? 1.0f : exp(m_mine - m_new);  // no key of the head yet: nothing to rescale
    const float e = valid ? exp(s - m_new) : 0.0f;
    float sum = e;
#pragma unroll
    for (uint m = SHORT_GP; m < 32; m <<= 1) sum += att_shfl_xor(sum, (int)m, scratch);
    l_mine = l_mine * corr + sum;
    m_mine = m_new;
    // Every lane's dims of every head: the head's correction from lane g (key 0), key u's weight
    // from lane u·SHORT_GP + g.
#pragma unroll
    for (uint g = 0; g < GROUP; ++g) {
      const float c = att_shfl_idx(corr, g, scratch);
#pragma unroll
      for (uint i = 0; i < SHORT_DPL; ++i) acc[g][i] *= c;
    }
#pragma unroll
    for (uint u = 0; u < SHORT_KPW; ++u)
#pragma unroll
      for (uint g = 0; g < GROUP; ++g) {
        const float w = att_shfl_idx(e, u * SHORT_GP + g, scratch);
#pragma unroll
        for (uint i = 0; i < SHORT_DPL; ++i) acc[g][i] += w * vv[u][i];
      }
  }

  // The warps' softmaxes meet: each warp's (m, l, acc) through local memory, then one (head, dim) a
  // work-item a round.
  if (lane < GROUP) {  // lane g holds head g's (key 0)
    warp_m[warp][lane] = m_mine;
    warp_l[warp][lane] = l_mine;
  }
#pragma unroll
  for (uint g = 0; g < GROUP; ++g)
#pragma unroll
    for (uint i = 0; i < SHORT_DPL; ++i) warp_acc[warp][g][lane + 32u * i] = acc[g][i];
  barrier(CLK_LOCAL_MEM_FENCE);
  const bool sink = has_sinks && split == 0;  // a sink: one extra logit with no value, in the first split
  for (uint x0 = 0; x0 < GROUP * HEAD_DIM; x0 += WIDE_WG) {
    const uint x = x0 + lid;
    const bool live = x < GROUP * HEAD_DIM;  // whole warps: GROUP · HEAD_DIM is a multiple of 32
    const uint g = live ? x / HEAD_DIM : 0u, dim = x % HEAD_DIM;
    const ulong head = (ulong)t * n_heads + kvh * GROUP + g;
    const float sink_logit = sink ? sinks[kvh * GROUP + g] : -INFINITY;
    float m = sink_logit;
    for (uint w = 0; w < SHORT_WARPS; ++w) m = fmax(m, warp_m[w][g]);
    float l = sink ? exp(sink_logit - m) : 0.0f, a = 0.0f;
    for (uint w = 0; w < SHORT_WARPS; ++w) {
      const float f = warp_m[w][g] == -INFINITY ? 0.0f : exp(warp_m[w][g] - m);  // a warp without keys weighs nothing
      l += warp_l[w][g] * f;
      a += warp_acc[w][g][dim] * f;
    }
    if (n_splits == 1) {
      const float v = live ? a / l : 0.0f;
      if (live) out[head * HEAD_DIM + dim] = v;
#ifdef SLUICE_PTX_SHFL
      if (q15) int15_store_rows(v, head * HEAD_DIM + dim, live, n_heads * HEAD_DIM, oq, oblocks);  // as att_write's
#endif
    } else if (live) {
      __global float* part = partial + (head * n_splits + split) * (HEAD_DIM + 2);
      if (dim == 0u) {
        part[0] = m;
        part[1] = l;
      }
      part[2 + dim] = a;
    }
  }
}

__kernel __attribute__((reqd_work_group_size(WIDE_WG, 1, 1)))
void attention_short(SHORT_ARGS) {
  __local float scratch[WIDE_WG];  // the emulated shuffles' (ATT_SHFL_LOCAL); unused with PTX
  __local float warp_m[SHORT_WARPS][GROUP], warp_l[SHORT_WARPS][GROUP];
  __local float warp_acc[SHORT_WARPS][GROUP][HEAD_DIM];
  short_passes(SHORT_PASS, scratch, warp_m, warp_l, warp_acc, false, q, q, (__global const float2*)q, 0u, 0u, scratch);
}

// attention_short's arguments, then kv_write's k and v and the deferred rope's (half_rot 0: none).
// The codecs' encoders borrow the passes' meeting area (used only after the passes), one part each.
#define SHORT_ACC (SHORT_WARPS * GROUP * HEAD_DIM)
#define SHORT_POOL (SHORT_ACC > 2 * KV_WRITE_SCRATCH ? SHORT_ACC : 2 * KV_WRITE_SCRATCH)
__kernel __attribute__((reqd_work_group_size(WIDE_WG, 1, 1)))
void attention_short_join(SHORT_ARGS, __global float* k, __global const float* v, __global const float2* rope_table,
                          uint half_rot, uint style) {
  __local float scratch[WIDE_WG];
  __local float warp_m[SHORT_WARPS][GROUP], warp_l[SHORT_WARPS][GROUP];
  __local float pool[SHORT_POOL];
  short_passes(SHORT_PASS, scratch, warp_m, warp_l, (__local float (*)[GROUP][HEAD_DIM])pool, true, k, v, rope_table, half_rot,
               style, pool);
}
#undef SHORT_ACC
#undef SHORT_POOL
#undef SHORT_ARGS
#undef SHORT_PASS

#undef SHORT_WARPS
#undef SHORT_GP
#undef SHORT_KPW
#undef SHORT_DPL
#endif
