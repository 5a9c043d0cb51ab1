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
// per layer of n_recent_pages pages, a page = [K: KV head][slot][HEAD_DIM], then [V: KV head][slot]
// [V_DIM] halfs; the batch's recent_table gives each page of positions its recent page (-1 = none).
// A query at pos reads the keys [att_exact_from, pos] from there.
//
// Built with HEAD_DIM, GROUP (query heads per KV head) and WG (work-group size, a power of two);
// V_DIM where a layer's V rows are narrower or wider than its K rows (MLA's latent K): the values,
// the outputs and the partial sums are V_DIM wide, the queries and keys HEAD_DIM. Only kv_write,
// kv_write_rope, attention and attention_merge run such a layer (cl_kv_geometry.h).
#ifndef V_DIM
#define V_DIM HEAD_DIM
#endif

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

// The exact row of position `position` (kv 0 = K, 1 = V), in recent page `rpage`: a recent page of a
// layer is [K: head][slot][HEAD_DIM], then [V: head][slot][V_DIM] (backend.h).
inline __global const half* att_recent_row(__global const half* recent_layer, int rpage, uint kv, uint n_kv_heads,
                                          uint kvh, uint page_tokens, uint position) {
#if V_DIM == HEAD_DIM
  return recent_layer + ((((ulong)rpage * 2u + kv) * n_kv_heads + kvh) * page_tokens + position % page_tokens) * HEAD_DIM;
#else
  const ulong row = (ulong)kvh * page_tokens + position % page_tokens;
  return recent_layer + (ulong)rpage * n_kv_heads * page_tokens * (HEAD_DIM + V_DIM) +
         (kv ? (ulong)n_kv_heads * page_tokens * HEAD_DIM + row * V_DIM : row * HEAD_DIM);
#endif
}

// The work-group of (token t, KV head h) encodes its K row, then its V row, into their page slots —
// by the whole group where the codec has encode_row_group (K_ENCODE_GROUP / V_ENCODE_GROUP), else
// by one work-item — and keep exact copies where the batch gives the page a recent page. Both rows
// in one group and no branch on the role around the group encoders: PoCL's work-group compiler
// miscompiled their barriers inside a per-role if/else. kv_write, kv_write_rope and
// attention_short_join (attention_short.cl) share it; k_scratch and v_scratch are the encoders'
// local memory (encode_row_group's; unused without a group encoder) — one area passed between them
// (one_scratch, a constant at each call) takes a barrier in between.
// WIDE_WG: the host's wide work-group (up to 256), shared with attention_fused_queries and attention_merge.
#ifndef WIDE_WG
#define WIDE_WG WG
#endif
#if K_ENCODE_GROUP || V_ENCODE_GROUP
#define KV_WRITE_SCRATCH (32 * HEAD_DIM + 2 * WIDE_WG)  // encode_row_group's (docs/PLUGINS.md)
#else
#define KV_WRITE_SCRATCH 1
#endif
inline void kv_write_rows(__global const float* k, __global const float* v, __global uchar* layer, ulong page_bytes,
                          uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes,
                          __global const int* positions, __global const int* seq_slots, __global const int* page_table,
                          uint max_pages, __global half* recent_layer, __global const int* recent_table, uint has_recent,
                          __local float* k_scratch, __local float* v_scratch, const bool one_scratch, uint t, uint h) {
  const uint item = t * n_kv_heads + h, lid = get_local_id(0);
  const uint pos = (uint)positions[t];
  const ulong page = kv_page_of(page_table + (ulong)seq_slots[t] * max_pages, pos, page_tokens);
  const uint slot = pos % page_tokens;
  __global uchar* base = layer + page * page_bytes;
  __global const float* k_src = k + (ulong)item * HEAD_DIM;
  __global const float* v_src = v + (ulong)item * V_DIM;
  __global uchar* k_dst = base + ((ulong)h * page_tokens + slot) * k_row_bytes;
  __global uchar* v_dst = base + (ulong)n_kv_heads * page_tokens * k_row_bytes + ((ulong)h * page_tokens + slot) * v_row_bytes;
#if K_ENCODE_GROUP
  sl_k_encode_row_group(k_src, k_dst, HEAD_DIM, lid, WIDE_WG, k_scratch);
#else
  if (lid == 0) sl_k_encode_row(k_src, k_dst, HEAD_DIM);
#endif
#if K_ENCODE_GROUP && V_ENCODE_GROUP
  if (one_scratch) barrier(CLK_LOCAL_MEM_FENCE);  // the scratch passes from one encoder to the other
#endif
#if V_ENCODE_GROUP
  sl_v_encode_row_group(v_src, v_dst, V_DIM, lid, WIDE_WG, v_scratch);
#else
  if (lid == 0) sl_v_encode_row(v_src, v_dst, V_DIM);
#endif
  if (has_recent) {
    const int rpage = recent_table[(ulong)seq_slots[t] * max_pages + pos / page_tokens];
    if (rpage >= 0) {
#if V_DIM == HEAD_DIM
      __global half* k_copy = recent_layer + ((((ulong)rpage * 2u) * n_kv_heads + h) * page_tokens + slot) * HEAD_DIM;
      __global half* v_copy = recent_layer + ((((ulong)rpage * 2u + 1u) * n_kv_heads + h) * page_tokens + slot) * HEAD_DIM;
      for (uint d = lid; d < HEAD_DIM; d += WIDE_WG) {
        vstore_half_rte(k_src[d], d, k_copy);
        vstore_half_rte(v_src[d], d, v_copy);
      }
#else
      __global half* k_copy = (__global half*)att_recent_row(recent_layer, rpage, 0u, n_kv_heads, h, page_tokens, pos);
      __global half* v_copy = (__global half*)att_recent_row(recent_layer, rpage, 1u, n_kv_heads, h, page_tokens, pos);
      for (uint d = lid; d < HEAD_DIM; d += WIDE_WG) vstore_half_rte(k_src[d], d, k_copy);
      for (uint d = lid; d < V_DIM; d += WIDE_WG) vstore_half_rte(v_src[d], d, v_copy);
#endif
    }
  }
}

__kernel __attribute__((reqd_work_group_size(WIDE_WG, 1, 1)))
void kv_write(__global const float* k, __global const float* v, __global uchar* layer, ulong page_bytes,
              uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes,
              __global const int* positions, __global const int* seq_slots, __global const int* page_table,
              uint max_pages, uint n_tokens, __global half* recent_layer, __global const int* recent_table,
              uint has_recent) {
  __local float scratch[KV_WRITE_SCRATCH];
  const uint item = get_group_id(0);
  kv_write_rows(k, v, layer, page_bytes, page_tokens, n_kv_heads, k_row_bytes, v_row_bytes, positions, seq_slots, page_table,
                max_pages, recent_layer, recent_table, has_recent, scratch, scratch, true, item / n_kv_heads,
                item % n_kv_heads);
}

// kv_write with the rope of q and k before it, in one launch (the host defers the two ropes and
// joins them here: cl_kv_cache.cpp). Arguments 0-15 are kv_write's; then q [n_tokens][n_q_heads]
// [HEAD_DIM] and the rope's (cos, sin) table and parameters (kernels_cl/rope.cl). The work-group of
// (token t, KV head h) rotates k's head h and q's heads h, h + n_kv_heads, ... of t in place — their
// pairs spread over the group, no barrier inside the loop — then, after a barrier that makes its
// rotated K row visible to the whole group, encodes the rows as kv_write does.
__kernel __attribute__((reqd_work_group_size(WIDE_WG, 1, 1)))
void kv_write_rope(__global float* k, __global const float* v, __global uchar* layer, ulong page_bytes,
                   uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes,
                   __global const int* positions, __global const int* seq_slots, __global const int* page_table,
                   uint max_pages, uint n_tokens, __global half* recent_layer, __global const int* recent_table,
                   uint has_recent, __global float* q, uint n_q_heads, __global const float2* rope_table, uint half_rot,
                   uint style) {
  __local float scratch[KV_WRITE_SCRATCH];
  const uint item = get_group_id(0), lid = get_local_id(0);
  const uint t = item / n_kv_heads, h = item % n_kv_heads;
  const int pos = positions[t];
  const uint q_rows = h < n_q_heads ? (n_q_heads - h + n_kv_heads - 1u) / n_kv_heads : 0u;
  for (uint w = lid; w < (1u + q_rows) * half_rot; w += WIDE_WG) {
    const uint r = w / half_rot, i = w % half_rot;
    __global float* row = r == 0u ? k + (ulong)item * HEAD_DIM : q + ((ulong)t * n_q_heads + h + (r - 1u) * n_kv_heads) * HEAD_DIM;
    rope_rotate_pair(row, i, pos, rope_table, half_rot, style);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);  // the rotated K row, written across the group, before it is encoded
  kv_write_rows(k, v, layer, page_bytes, page_tokens, n_kv_heads, k_row_bytes, v_row_bytes, positions, seq_slots, page_table,
                max_pages, recent_layer, recent_table, has_recent, scratch, scratch, true, t, h);
}

#define DIMS_PER_ITEM ((V_DIM + WG - 1) / WG)  // a work-item's accumulators: dims lid, lid + WG, ...

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

// One online-softmax step over a tile for nh heads at once (the reductions of every head share
// their barriers): s[g] is this work-item's score for head g (-INFINITY past the range); updates
// m[g] and l[g], stores the work-item's weight at p[g * WG + lid] and sets corr[g], the factor that
// rescales what head g accumulated before. red: nh * WG floats of local memory.
inline void att_online_steps(__local float* red, uint nh, const float* s, bool valid, float* m, float* l,
                             __local float* p, float* corr) {
  const uint lid = get_local_id(0);
  for (uint g = 0; g < nh; ++g) red[g * WG + lid] = s[g];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint h = WG / 2; h > 0; h >>= 1) {
    if (lid < h)
      for (uint g = 0; g < nh; ++g) red[g * WG + lid] = fmax(red[g * WG + lid], red[g * WG + lid + h]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint g = 0; g < nh; ++g) {
    const float m_new = fmax(m[g], red[g * WG]);
    corr[g] = exp(m[g] - m_new);
    m[g] = m_new;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint g = 0; g < nh; ++g) {
    const float e = valid ? exp(s[g] - m[g]) : 0.0f;
    p[g * WG + lid] = e;
    red[g * WG + lid] = e;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint h = WG / 2; h > 0; h >>= 1) {
    if (lid < h)
      for (uint g = 0; g < nh; ++g) red[g * WG + lid] += red[g * WG + lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint g = 0; g < nh; ++g) l[g] = l[g] * corr[g] + red[g * WG];
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Keys whose values one work-item loads before using any of them: the value rows are first read
// here (the scores read only the keys), so each group of loads waits on memory; the loop over a
// tile's keys is a chain of those waits, one per ATT_VU keys. The host may set it for both kernels
// (-DATT_VU). On the H100 4 measured better than 16 for the fused kernel; for the generic one, once
// its key scoring went to teams, 16 beat 4 (204 against 188 tokens/s at depth 8192,
// perf/results/fused_decode_gpu/run8).
#ifdef ATT_VU
#define ATT_VU_GENERIC ATT_VU
#else
#define ATT_VU 4
#define ATT_VU_GENERIC 16
#endif

// One head's result: normalised into out with one split, else the unnormalised partial (m, l, acc)
// of this split for attention_merge. acc: this work-item's DIMS_PER_ITEM dims (lid, lid + WG, ...).
// q15 (decode on NVIDIA, one token: head is the column block's head): out's 15-bit form too, for the
// dp4a product of the output projection (kernels_cl/warp.cl; cols = the row's n_heads · V_DIM),
// which then needs no rounding launch.
inline void att_write(__global float* out, __global float* partial, ulong head, uint n_splits, uint split, float m, float l,
                      const float* acc, uint lid, __global uchar* oq, __global float2* oblocks, uint q15, uint cols) {
  if (n_splits == 1) {
    const float inv = 1.0f / l;
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
      const uint dim = lid + d * WG;
      const float v = dim < V_DIM ? acc[d] * inv : 0.0f;
      if (dim < V_DIM) out[head * V_DIM + dim] = v;
#ifdef SLUICE_PTX_SHFL
      // Whole warps call it: the host sets q15 only where WG and V_DIM are multiples of 32.
      if (q15) int15_store_rows(v, head * V_DIM + dim, dim < V_DIM, cols, oq, oblocks);
#endif
    }
    return;
  }
  // partial: per (head, split): m, l, then V_DIM accumulators.
  __global float* part = partial + (head * n_splits + split) * (V_DIM + 2);
  if (lid == 0) {
    part[0] = m;
    part[1] = l;
  }
  for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
    const uint dim = lid + d * WG;
    if (dim < V_DIM) part[2 + dim] = acc[d];
  }
}

// Key scoring by teams. A team of ATT_TEAM work-items (a warp on NVIDIA) reads a key row together:
// lane i loads dims i, i + ATT_TEAM, ..., so one load instruction of a warp covers a contiguous
// stretch of one row (64 bytes of an f16 row) where one work-item per key touched 32 rows 256 bytes
// apart. Team k scores keys [k·ATT_TEAM, (k + 1)·ATT_TEAM) of a tile, ATT_KPT keys a round: every
// lane first loads its dims of all ATT_KPT rows (the loads in flight together), then sums its
// products for each (key, query head), and the team's partial sums meet — by warp shuffles where
// the program is built with SLUICE_PTX_SHFL, through local memory otherwise — in the tile's scores
// p[g·WG + key], from which work-item j takes key j's scores for the online softmax.
// The host may set ATT_TEAM (8, 16 or 32; ≤ the warp with shuffles) and ATT_KPT (1, 2, 4 or 8).
// 8 by default: on the H100 (perf/results/fused_decode_gpu/run7, run8) teams of 8 decoded 202 tokens/s
// at depth 8192, 16 188–192 and 32 172–173 — fewer shuffle steps, more keys a warp load.
#ifndef ATT_TEAM
#define ATT_TEAM 8
#endif
#define ATT_TEAMS (WG / ATT_TEAM)
#define ATT_LOG_TEAM (ATT_TEAM == 8 ? 3 : ATT_TEAM == 16 ? 4 : 5)
#define ATT_DPL ((HEAD_DIM + ATT_TEAM - 1) / ATT_TEAM)  // dims per lane: lane + i·ATT_TEAM
#define ATT_DIM_OK(d) (HEAD_DIM % ATT_TEAM == 0 || (d) < HEAD_DIM)
#if defined(SLUICE_PTX_SHFL) || ATT_SHFL_LOCAL
#define ATT_SHUFFLES 1
#else
#define ATT_SHUFFLES 0
#endif
// GROUP rounded up to a power of two: the shuffle reduction halves its values at every step.
#define ATT_GP (GROUP <= 1 ? 1 : GROUP <= 2 ? 2 : GROUP <= 4 ? 4 : GROUP <= 8 ? 8 : GROUP <= 16 ? 16 : GROUP <= 32 ? 32 : \
                GROUP <= 64 ? 64 : GROUP <= 128 ? 128 : 256)
#if GROUP > 256
#error "attention.cl: GROUP above 256"
#endif
#if ATT_TEAM != 8 && ATT_TEAM != 16 && ATT_TEAM != 32
#error "attention.cl: ATT_TEAM must be 8, 16 or 32"
#endif
#ifndef ATT_KPT
// At most 64 partial sums a lane with shuffles (registers); with local memory, at most 4096 floats
// of the round's partial sums in `red`.
#if ATT_SHUFFLES
#define ATT_KPT_ROOM (64 / ATT_GP)
#else
#define ATT_KPT_ROOM (4096 / (GROUP * WG))
#endif
#define ATT_KPT (ATT_KPT_ROOM >= 8 ? 8 : ATT_KPT_ROOM >= 4 ? 4 : ATT_KPT_ROOM >= 2 ? 2 : 1)
#endif
#if ATT_KPT != 1 && ATT_KPT != 2 && ATT_KPT != 4 && ATT_KPT != 8
#error "attention.cl: ATT_KPT must be 1, 2, 4 or 8"
#endif
#if ATT_SHUFFLES
#define ATT_PARTS (ATT_KPT * ATT_GP)  // a lane's partial sums, index u·ATT_GP + g (g ≥ GROUP: zero)
#define ATT_RED (GROUP * WG)
#define ATT_LEFT (ATT_PARTS > ATT_TEAM ? ATT_PARTS / ATT_TEAM : 1)  // values a lane ends the reduction with
#define ATT_SPAN (ATT_TEAM * ATT_LEFT / ATT_PARTS)                 // lanes that end with the same ones
#else
#define ATT_PARTS (ATT_KPT * GROUP)  // index u·GROUP + g
#define ATT_RED (ATT_KPT * GROUP * WG)  // red holds a round's partial sums of every lane
#endif

// att_shfl_xor(v, m): the v of lane ^ m. att_halve(a, b, upper, m): a lane that is `upper` sends a
// and keeps b, the other sends b and keeps a; returns what it keeps plus what lane ^ m sent. Both
// are called by every lane of the warp (every work-item of the group) with the same m.
#ifdef SLUICE_PTX_SHFL
inline float att_shfl_xor(float v, int m, __local float* scratch) {
  int o;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_int(v)), "r"(m));
  return as_float(o);
}
// The choice is made inside the asm: written in C, `upper ? part[x] : part[x + h]` became a load from
// a selected address, which kept the partial sums in local memory instead of registers.
inline float att_halve(float a, float b, bool upper, int m, __local float* scratch) {
  int keep, got;
  asm volatile(
      "{\n\t.reg .pred att_up;\n\t.reg .b32 att_send;\n\t"
      "setp.ne.u32 att_up, %4, 0;\n\t"
      "selp.b32 att_send, %2, %3, att_up;\n\t"
      "selp.b32 %0, %3, %2, att_up;\n\t"
      "shfl.sync.bfly.b32 %1, att_send, %5, 0x1f, 0xffffffff;\n\t}"
      : "=r"(keep), "=r"(got)
      : "r"(as_int(a)), "r"(as_int(b)), "r"((uint)upper), "r"(m));
  return as_float(keep) + as_float(got);
}
#elif ATT_SHFL_LOCAL
// The same exchanges through local memory: the shuffle path's reduction, checkable where PTX does
// not run (the backend option tune.att_shfl_local=1 on PoCL).
inline float att_shfl_xor(float v, int m, __local float* scratch) {
  const uint lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  const float o = scratch[lid ^ (uint)m];
  barrier(CLK_LOCAL_MEM_FENCE);
  return o;
}
inline float att_halve(float a, float b, bool upper, int m, __local float* scratch) {
  const float send = upper ? a : b, keep = upper ? b : a;
  return keep + att_shfl_xor(send, m, scratch);
}
#endif

// Stores the team's score of key `key` (of the tile at `tile`) for head g: scaled, or -INFINITY past hi.
inline void att_put_score(__local float* p, uint g, uint key, int tile, int hi, float dot, float scale, float softcap) {
  p[g * WG + key] = tile + (int)key <= hi ? att_scaled(dot, scale, softcap) : -INFINITY;
}

// The team's sums of the round's partial sums (keys r .. r + ATT_KPT - 1 of each team's share of the
// tile) into p.
// With shuffles: recursive halving — at each step a lane keeps half of its values, sends the other
// half to lane ^ m and adds what comes back, so 8 keys × 4 heads take 31 shuffles rather than
// 32 × 5; once one value is left the rest is a plain butterfly. Lane bits, highest first, then
// name the value a lane ends with: index (lane / SPAN)·LEFT + i, i < LEFT.
// Without: every lane's partial sums through local memory (red), a work-item summing each value.
inline void att_team_scores(float* part, __local float* p, __local float* red, uint r, int tile, int hi, float scale,
                            float softcap) {
  const uint lid = get_local_id(0), lane = lid % ATT_TEAM, team = lid / ATT_TEAM;
#if ATT_SHUFFLES
  // Constant trip counts everywhere, so that the loops unroll and part stays in registers.
#pragma unroll
  for (uint step = 1; step <= ATT_LOG_TEAM; ++step) {
    const uint m = ATT_TEAM >> step, h = ATT_PARTS >> step;  // h: values a lane keeps (0: one, summed plainly)
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (uint x = 0; x < ATT_PARTS / 2; ++x) {
      if (x < h) part[x] = att_halve(part[x], part[x + h], upper, (int)m, red);
    }
    if (h == 0) part[0] += att_shfl_xor(part[0], (int)m, red);
  }
  if (lane % ATT_SPAN == 0) {
#pragma unroll
    for (uint i = 0; i < ATT_LEFT; ++i) {
      const uint x = (lane / ATT_SPAN) * ATT_LEFT + i, u = x / ATT_GP, g = x % ATT_GP;
      if (g < GROUP) att_put_score(p, g, team * ATT_TEAM + r + u, tile, hi, part[i], scale, softcap);
    }
  }
#else
  for (uint x = 0; x < ATT_PARTS; ++x) red[x * WG + lid] = part[x];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint v = lid; v < ATT_TEAMS * ATT_PARTS; v += WG) {
    const uint tm = v / ATT_PARTS, x = v % ATT_PARTS;
    __local const float* row = red + x * WG + tm * ATT_TEAM;
    float sum = 0.0f;
    for (uint i = 0; i < ATT_TEAM; ++i) sum += row[i];
    att_put_score(p, x % GROUP, tm * ATT_TEAM + r + x / GROUP, tile, hi, sum, scale, softcap);
  }
  barrier(CLK_LOCAL_MEM_FENCE);  // red is read before the next round writes it
#endif
}

// One work-group per (KV head, token, key split): the GROUP query heads that share the KV head attend
// over keys [lo, pos] (or this split's share of them) in tiles of WG keys with an online softmax:
// teams of ATT_TEAM work-items score the tile's keys (above; the team's first lane notes where each
// key's value row is), work-item j takes key j's scores into the softmax, then each work-item
// accumulates the weighted values of its dims, ATT_VU_GENERIC keys' loads in flight at a time. With
// n_splits > 1 each group writes its unnormalised partial (m, l, acc) for attention_merge.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void attention(__global const float* q, __global float* out, __global const uchar* layer, ulong page_bytes,
               uint page_tokens, uint n_kv_heads, uint k_row_bytes, uint v_row_bytes, __global const int* positions,
               __global const int* seq_slots, __global const int* page_table, uint max_pages, float scale,
               uint window, float softcap, __global const float* sinks, uint has_sinks, uint n_splits,
               __global float* partial, __global const half* recent_layer, __global const int* recent_table,
               uint recent_window, __global uchar* oq, __global float2* oblocks, uint q15) {
  __local float p[GROUP * WG];  // the tile's scores, then its softmax weights
  __local float red[ATT_RED];
  __local ulong v_at[WG];  // the tile's value rows (byte offsets in layer)
  const uint kvh = get_group_id(0), t = get_group_id(1), split = get_group_id(2), lid = get_local_id(0);
  const uint team = lid / ATT_TEAM, lane = lid % ATT_TEAM;
  const uint n_heads = n_kv_heads * GROUP;
  const int pos = positions[t];
  int lo_all, lo, hi;
  att_split_range(pos, window, n_splits, split, &lo_all, &lo, &hi);
  __global const int* table = page_table + (ulong)seq_slots[t] * max_pages;
  __global const int* recent = recent_table + (ulong)seq_slots[t] * max_pages;
  const int exact = att_exact_from(recent, recent_window, page_tokens, pos, lo_all);
  const ulong v_region = (ulong)n_kv_heads * page_tokens * k_row_bytes;

  // This lane's dims of the GROUP queries, in registers for the whole kernel.
  float qr[GROUP][ATT_DPL];
  for (uint g = 0; g < GROUP; ++g)
    for (uint i = 0; i < ATT_DPL; ++i) {
      const uint d = lane + i * ATT_TEAM;
      qr[g][i] = ATT_DIM_OK(d) ? q[((ulong)t * n_heads + kvh * GROUP + g) * HEAD_DIM + d] : 0.0f;
    }

  float m[GROUP], l[GROUP], acc[GROUP][DIMS_PER_ITEM];
  for (uint g = 0; g < GROUP; ++g) {
    // A sink joins the softmax as one extra logit with no value: start from it (first split only).
    const bool sink = has_sinks && split == 0;
    m[g] = sink ? sinks[kvh * GROUP + g] : -INFINITY;
    l[g] = sink ? 1.0f : 0.0f;
    for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc[g][d] = 0.0f;
  }

  for (int tile = lo; tile <= hi; tile += WG) {
    // Every work-item runs every round (the reduction's barriers or shuffles); keys past hi load nothing.
    for (uint r = 0; r < ATT_TEAM; r += ATT_KPT) {
      const uint k0 = team * ATT_TEAM + r;  // this round's keys of the tile: k0 .. k0 + ATT_KPT - 1
      float kv[ATT_KPT][ATT_DPL];
#pragma unroll
      for (uint u = 0; u < ATT_KPT; ++u) {
        const int j = tile + (int)(k0 + u);
        for (uint i = 0; i < ATT_DPL; ++i) kv[u][i] = 0.0f;
        if (j > hi) continue;
        if (j >= exact) {
          __global const half* kx = att_recent_row(recent_layer, recent[j / (int)page_tokens], 0u, n_kv_heads, kvh, page_tokens, (uint)j);
          for (uint i = 0; i < ATT_DPL; ++i) {
            const uint d = lane + i * ATT_TEAM;
            if (ATT_DIM_OK(d)) kv[u][i] = vload_half(d, kx);
          }
        } else {
          const ulong page = kv_page_of(table, (uint)j, page_tokens);
          const ulong slot_row = (ulong)kvh * page_tokens + (uint)j % page_tokens;
          __global const uchar* krow = layer + page * page_bytes + slot_row * k_row_bytes;
          if (lane == 0) v_at[k0 + u] = page * page_bytes + v_region + slot_row * v_row_bytes;
          for (uint i = 0; i < ATT_DPL; ++i) {
            const uint d = lane + i * ATT_TEAM;
            if (ATT_DIM_OK(d)) kv[u][i] = sl_k_load(krow, d);
          }
        }
      }
      float part[ATT_PARTS];
#pragma unroll
      for (uint x = 0; x < ATT_PARTS; ++x) part[x] = 0.0f;
#pragma unroll
      for (uint u = 0; u < ATT_KPT; ++u)
        for (uint g = 0; g < GROUP; ++g)
          for (uint i = 0; i < ATT_DPL; ++i) part[u * (ATT_PARTS / ATT_KPT) + g] += qr[g][i] * kv[u][i];
      att_team_scores(part, p, red, r, tile, hi, scale, softcap);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the tile's scores and value rows are in
    const int j = tile + (int)lid;
    float s[GROUP];
    for (uint g = 0; g < GROUP; ++g) s[g] = p[g * WG + lid];  // -INFINITY past hi
    float corr[GROUP];
    att_online_steps(red, GROUP, s, j <= hi, m, l, p, corr);
    for (uint g = 0; g < GROUP; ++g)
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc[g][d] *= corr[g];
    const int n_keys = min(WG, hi - tile + 1);
    const int n_stored = clamp(exact - tile, 0, n_keys);  // keys [tile, tile + n_stored) read from the pages
    int jj = 0;
    for (; jj + ATT_VU_GENERIC <= n_stored; jj += ATT_VU_GENERIC) {
      float vv[ATT_VU_GENERIC][DIMS_PER_ITEM];
      for (uint u = 0; u < ATT_VU_GENERIC; ++u) {
        __global const uchar* vrow = layer + v_at[jj + u];
        for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
          const uint dim = lid + d * WG;
          vv[u][d] = dim < V_DIM ? sl_v_load(vrow, dim) : 0.0f;
        }
      }
      for (uint u = 0; u < ATT_VU_GENERIC; ++u)
        for (uint g = 0; g < GROUP; ++g)
          for (uint d = 0; d < DIMS_PER_ITEM; ++d) acc[g][d] += p[g * WG + jj + u] * vv[u][d];
    }
    for (; jj < n_keys; ++jj) {
      const uint key = (uint)(tile + jj);
      __global const half* vx =
          jj >= n_stored ? att_recent_row(recent_layer, recent[key / page_tokens], 1u, n_kv_heads, kvh, page_tokens, key) : 0;
      __global const uchar* vrow = layer + v_at[jj];
      for (uint d = 0; d < DIMS_PER_ITEM; ++d) {
        const uint dim = lid + d * WG;
        if (dim < V_DIM) {
          const float vv = vx ? vload_half(dim, vx) : sl_v_load(vrow, dim);
          for (uint g = 0; g < GROUP; ++g) acc[g][d] += p[g * WG + jj] * vv;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (uint g = 0; g < GROUP; ++g) att_write(out, partial, (ulong)t * n_heads + kvh * GROUP + g, n_splits, split, m[g], l[g], acc[g], lid, oq,
                                          oblocks, q15, n_heads * V_DIM);
}

// Combines the splits of each (token, head), one work-group of MERGE_WG per (token, head): the
// splits' maxima and weights are shared through local memory, then work-item (lane, dim) sums dim
// over every MERGE_LANES-th split from `lane` — loads independent of each other, a few per
// work-item — and the lanes' sums meet in local memory. One work-item per output value, walking
// every split's maximum and sum alone, made the merge a chain of dependent loads: 20 µs a launch at
// 132 splits on the H100, as long as the decode matvec of a layer. q15: out's 15-bit form too, as
// att_write's. half_rot > 0 (after attention_short_join, whose splits rotated the query only in
// registers: a split cannot write it back while another may still read it): rotates the head's row
// of q in place, as the deferred rope would have, by the split kernel's own rope_pair.
#define MERGE_WG WIDE_WG  // up to 256, where the device allows (the host's wide_group_size)
#define MERGE_LANES (V_DIM < MERGE_WG ? MERGE_WG / V_DIM : 1)
#define MERGE_MAX_SPLITS 256  // the host splits no further
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1)))
void attention_merge(__global const float* partial, __global float* out, uint n_splits, __global uchar* oq,
                     __global float2* oblocks, uint q15, uint cols, __global float* q, __global const int* positions,
                     __global const float2* rope_table, uint half_rot, uint style) {
  __local float w[MERGE_MAX_SPLITS];
  __local float red[MERGE_WG];
  const uint head = get_group_id(0), lid = get_local_id(0);
#if ATT_SHUFFLES  // attention_short_join exists only with warp exchanges (attention_short.cl)
  for (uint i = lid; i < half_rot; i += MERGE_WG)
    rope_rotate_pair(q + (ulong)head * HEAD_DIM, i, positions[head / (cols / V_DIM)], rope_table, half_rot, style);
#endif
  __global const float* part = partial + (ulong)head * n_splits * (V_DIM + 2);
  float m = -INFINITY;
  for (uint s = lid; s < n_splits; s += MERGE_WG) m = fmax(m, part[s * (V_DIM + 2)]);
  red[lid] = m;
  for (uint h = MERGE_WG / 2; h > 0; h >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < h) red[lid] = fmax(red[lid], red[lid + h]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float top = red[0];
  float l = 0.0f;
  for (uint s = lid; s < n_splits; s += MERGE_WG) {
    __global const float* ps = part + s * (V_DIM + 2);
    const float ws = ps[1] == 0.0f ? 0.0f : exp(ps[0] - top);  // an empty split weighs nothing
    w[s] = ws;
    l += ps[1] * ws;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  red[lid] = l;
  for (uint h = MERGE_WG / 2; h > 0; h >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < h) red[lid] += red[lid + h];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float inv = 1.0f / red[0];
  const uint lane = lid / V_DIM;  // lanes past MERGE_LANES (V_DIM not dividing MERGE_WG) idle
  for (uint d0 = 0; d0 < V_DIM; d0 += MERGE_WG / MERGE_LANES) {
    const uint dim = d0 + lid % V_DIM;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains of sums: loads in flight together
    if (lane < MERGE_LANES && dim < V_DIM) {
      uint s = lane;
      for (; s + 3 * MERGE_LANES < n_splits; s += 4 * MERGE_LANES)
        for (uint k = 0; k < 4; ++k) a[k] += part[(s + k * MERGE_LANES) * (V_DIM + 2) + 2 + dim] * w[s + k * MERGE_LANES];
      for (; s < n_splits; s += MERGE_LANES) a[0] += part[s * (V_DIM + 2) + 2 + dim] * w[s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // red is free again
    red[lid] = (a[0] + a[1]) + (a[2] + a[3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0) {  // whole warps where V_DIM is a multiple of 32 (q15 is set only then)
      float sum = 0.0f;
      if (dim < V_DIM) {
        sum = red[lid];
        for (uint k = 1; k < MERGE_LANES; ++k) sum += red[lid + k * V_DIM];
        out[(ulong)head * V_DIM + dim] = sum * inv;
      }
#ifdef SLUICE_PTX_SHFL
      if (q15) int15_store_rows(sum * inv, (ulong)head * V_DIM + dim, dim < V_DIM, cols, oq, oblocks);  // as att_write's
#endif
    }
  }
}

// Keys and values [k_lo, k_lo + n_keys) of one sequence as f16 rows for attention_mma (prefill runs
// on tensor cores, cl_attention.cpp): out_k and out_v as [KV head][key][HEAD_DIM], keys n_keys..n_pad
// zero — the mma kernel reads whole 64-key tiles, and a zero row under a zero weight stays zero
// where stale bits could be NaN. Decoded through the codecs' load, so any codec with OpenCL source
// serves; for the f16 codec the copy is exact. One work-item per (dim, key, KV head).
__kernel void kv_gather_f16(__global const uchar* layer, ulong page_bytes, uint page_tokens, uint n_kv_heads,
                            uint k_row_bytes, uint v_row_bytes, __global const int* page_table, uint table_offset,
                            int k_lo, uint n_keys, uint n_pad, __global half* out_k, __global half* out_v) {
  const uint d = get_global_id(0), i = get_global_id(1), kvh = get_global_id(2);
  const ulong at = ((ulong)kvh * n_pad + i) * HEAD_DIM + d;
  float kv = 0.0f, vv = 0.0f;
  if (i < n_keys) {
    const uint j = (uint)k_lo + i, slot = j % page_tokens;
    const ulong page = kv_page_of(page_table + table_offset, j, page_tokens);
    __global const uchar* base = layer + page * page_bytes;
    kv = sl_k_load(base + ((ulong)kvh * page_tokens + slot) * k_row_bytes, d);
    vv = sl_v_load(base + (ulong)n_kv_heads * page_tokens * k_row_bytes + ((ulong)kvh * page_tokens + slot) * v_row_bytes, d);
  }
  vstore_half_rte(kv, at, out_k);
  vstore_half_rte(vv, at, out_v);
}

#if K_DECODE_GROUP || V_DECODE_GROUP
// kv_gather_f16 for codecs that decode whole rows together (SL_KV_FN(decode_rows_group)): turbo's
// element load is O(block) — each element a full row of its Walsh–Hadamard transform, 58 ms of a
// pp512 at depth 8192 on the H100 — where its rows' transforms across a work-group are O(log n) an
// element. One work-group per (`rows` positions aligned to `rows`, a divisor of page_tokens up to
// 16: one page's rows of the head, contiguous; KV head). A role whose codec decodes element by
// element takes its loads. Chunks past the last key (padding) decode the last key's page and store
// zeros: the barriers of the decoder stay outside any branch (PoCL's work-group compiler).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void kv_gather_f16_rows(__global const uchar* layer, ulong page_bytes, uint page_tokens, uint n_kv_heads,
                        uint k_row_bytes, uint v_row_bytes, __global const int* page_table, uint table_offset,
                        int k_lo, uint n_keys, uint n_pad, __global half* out_k, __global half* out_v, uint rows) {
  __local float dec[16 * HEAD_DIM];
  const uint lid = get_local_id(0), kvh = get_group_id(1);
  const int j0 = k_lo / (int)rows * (int)rows + (int)(get_group_id(0) * rows);
  const int j_page = min(j0, k_lo + (int)n_keys - 1);  // a position whose page exists
  __global const uchar* page = layer + kv_page_of(page_table + table_offset, (uint)j_page, page_tokens) * page_bytes;
  const uint slot0 = (uint)j0 % page_tokens;
  __global const uchar* k_rows = page + ((ulong)kvh * page_tokens + slot0) * k_row_bytes;
  __global const uchar* v_rows = page + (ulong)n_kv_heads * page_tokens * k_row_bytes + ((ulong)kvh * page_tokens + slot0) * v_row_bytes;
#if K_DECODE_GROUP
  sl_k_decode_rows_group(k_rows, k_row_bytes, rows, dec, lid, WG);
#endif
  for (uint e = lid; e < rows * HEAD_DIM; e += WG) {
    const int i = j0 + (int)(e / HEAD_DIM) - k_lo;
#if K_DECODE_GROUP
    const float x = dec[e];
#else
    const float x = sl_k_load(k_rows + (ulong)(e / HEAD_DIM) * k_row_bytes, e % HEAD_DIM);
#endif
    if (i >= 0 && i < (int)n_pad) vstore_half_rte(i < (int)n_keys ? x : 0.0f, ((ulong)kvh * n_pad + i) * HEAD_DIM + e % HEAD_DIM, out_k);
  }
#if V_DECODE_GROUP
  sl_v_decode_rows_group(v_rows, v_row_bytes, rows, dec, lid, WG);  // begins with a barrier: dec's K reads are done
#endif
  for (uint e = lid; e < rows * HEAD_DIM; e += WG) {
    const int i = j0 + (int)(e / HEAD_DIM) - k_lo;
#if V_DECODE_GROUP
    const float x = dec[e];
#else
    const float x = sl_v_load(v_rows + (ulong)(e / HEAD_DIM) * v_row_bytes, e % HEAD_DIM);
#endif
    if (i >= 0 && i < (int)n_pad) vstore_half_rte(i < (int)n_keys ? x : 0.0f, ((ulong)kvh * n_pad + i) * HEAD_DIM + e % HEAD_DIM, out_v);
  }
}
#endif

// The exact keys of a prefill run's queries where the cache keeps a recent window, beside
// attention_mma over the run's gathered codec rows (which leaves those keys out): keys
// [att_exact_from, pos] of each (run row, query head) from the recent pages, in f32, as one more
// partial — m and l in base 2 (scores times log2 e), then HEAD_DIM sums — at index `split` of
// attention_mma's partial layout, for attention_mma_merge. One work-group of HEAD_DIM work-items per
// (run row, head): a pass scores HEAD_DIM / 8 keys, eight work-items a key (a contiguous eighth of
// its row each), then each work-item sums its dim of the values.
__kernel void attention_recent_partial(__global const float* q, __global const half* recent_layer,
                                       __global const int* recent_table, uint max_pages, uint seq, uint recent_window,
                                       uint page_tokens, uint n_kv_heads, uint first_token, int first_pos, uint n_heads,
                                       uint group, float scale, uint window, float softcap, uint split,
                                       uint partial_stride, __global float* partial) {
  __local float qs[HEAD_DIM], eighths[HEAD_DIM], w[HEAD_DIM / 8];
  const uint d = get_local_id(0), r = get_group_id(0), h = get_group_id(1), kvh = h / group;
  const uint per_pass = HEAD_DIM / 8, key_of = d / 8, eighth = d % 8;
  const int pos = first_pos + (int)r;
  const int lo = window ? max(0, pos - (int)window + 1) : 0;
  __global const int* recent = recent_table + (ulong)seq * max_pages;
  const int from = att_exact_from(recent, recent_window, page_tokens, pos, lo);
  qs[d] = q[((ulong)(first_token + r) * n_heads + h) * HEAD_DIM + d];
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (int j0 = from; j0 <= pos; j0 += (int)per_pass) {  // the same count on every work-item
    barrier(CLK_LOCAL_MEM_FENCE);
    const int j = j0 + (int)key_of;
    float dot = 0.0f;
    if (j <= pos) {
      __global const half* k = att_recent_row(recent_layer, recent[j / (int)page_tokens], 0u, n_kv_heads, kvh, page_tokens, (uint)j);
      for (uint e = eighth * (HEAD_DIM / 8); e < (eighth + 1) * (HEAD_DIM / 8); ++e) dot += qs[e] * vload_half(e, k);
    }
    eighths[d] = dot;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (eighth == 0) {
      float s = -INFINITY;
      if (j <= pos) {
        s = 0.0f;
        for (uint e = 0; e < 8; ++e) s += eighths[d + e];
        s *= scale;
        if (softcap > 0.0f) s = tanh(s / softcap) * softcap;
        s *= 1.4426950408889634f;
      }
      w[key_of] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n = min((int)per_pass, pos - j0 + 1);
    float mx = m;
    for (int i = 0; i < n; ++i) mx = fmax(mx, w[i]);
    const float corr = m == -INFINITY ? 0.0f : exp2(m - mx);
    l *= corr;
    acc *= corr;
    for (int i = 0; i < n; ++i) {
      const float p = exp2(w[i] - mx);
      const int key = j0 + i;
      l += p;
      acc += p * vload_half(d, att_recent_row(recent_layer, recent[key / (int)page_tokens], 1u, n_kv_heads, kvh, page_tokens, (uint)key));
    }
    m = mx;
  }
  __global float* part = partial + ((ulong)(r * n_heads + h) * partial_stride + split) * (HEAD_DIM + 2);
  if (d == 0) {
    part[0] = m;
    part[1] = l;
  }
  part[2 + d] = acc;
}
