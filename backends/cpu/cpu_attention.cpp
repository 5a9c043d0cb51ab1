// The paged KV cache and attention over it on the CPU.
//
// Storage (cpu_backend.h): per layer, its pages — a FULL layer's n_pages, a WINDOW layer's
// n_window_pages — each holding page_tokens positions: first the K rows of every KV head
// ([head][slot] so that one head's keys are contiguous), then the V rows, in the layer's codecs and
// widths (K and V rows may differ: MLA's latent K). A sequence's page table (the window table for a
// WINDOW layer) maps position / page_tokens to a page. A STATE layer has no pages: a state per slot.
//
// Attention uses the codec's fused hooks when it has them (scores straight from stored rows, values
// accumulated in the codec's domain) and otherwise decodes each run of rows into scratch first.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cpu_backend.h"
#include "float_products.h"
#include "util/batch_pages.h"
#include "util/kv_shape.h"
#include "util/recent_window.h"
#include "util/vec.h"

namespace sluice::cpu {
namespace {

bool has_fused_keys(const sl_kvcodec_api* api) {
  return api->struct_size >= offsetof(sl_kvcodec_api, score_keys) + sizeof(void*) && api->query_state_bytes &&
         api->prepare_query && api->score_keys;
}
bool has_fused_values(const sl_kvcodec_api* api) {
  return api->struct_size >= offsetof(sl_kvcodec_api, finish_values) + sizeof(void*) && api->accumulate_values &&
         api->finish_values;
}

std::byte* k_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  return c->storage.data() + c->offset[layer] + page * Ly.page_bytes +
         (static_cast<uint64_t>(head) * c->layout.page_tokens + slot) * Ly.k_format.row_bytes;
}
std::byte* v_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  const uint64_t pt = c->layout.page_tokens;
  return c->storage.data() + c->offset[layer] + page * Ly.page_bytes + uint64_t(Ly.n_kv_heads) * pt * Ly.k_format.row_bytes +
         (static_cast<uint64_t>(head) * pt + slot) * Ly.v_format.row_bytes;
}

// The recent window's exact row (f16) of a position held in recent page `rpage`; kv 0 = K, 1 = V.
uint16_t* recent_row(sl_kv_cache* c, uint32_t layer, int32_t rpage, int kv, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  const std::size_t pt = c->layout.page_tokens;
  uint16_t* page = c->recent.data() + c->recent_offset[layer] + static_cast<std::size_t>(rpage) * Ly.recent_values;
  if (kv == 0) return page + (head * pt + slot) * Ly.k_dim;
  return page + std::size_t(Ly.n_kv_heads) * pt * Ly.k_dim + (head * pt + slot) * Ly.v_dim;
}

bool keeps_recent(const sl_backend* be, const sl_kv_cache* c) { return c->layout.recent_window > 0 && !be->recent_table.empty(); }

// The table of a layer's pages in this batch: the window table for a WINDOW layer.
const std::vector<int32_t>& table_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer) {
  return c->layers[layer].kind == SL_KV_WINDOW ? be->window_table : be->page_table;
}

// The first key a query at `pos` reads exactly: the window's keys back from pos while their pages
// have recent pages (the host keeps them contiguous at the sequence's end). pos + 1 when none.
int32_t exact_from(const sl_backend* be, const sl_kv_cache* c, int32_t seq, int32_t pos, int32_t lo) {
  if (!keeps_recent(be, c)) return pos + 1;
  return recent_exact_from(be->recent_table.data() + static_cast<std::size_t>(seq) * be->max_pages, c->layout.recent_window,
                           c->layout.page_tokens, pos, lo);
}

// Checks that every position the batch touches in the layer has a page (and a recent page, if any) in range.
sl_status check_pages(const sl_backend* be, const sl_kv_cache* c, uint32_t layer, sl_error* err) {
  return check_batch_pages(be->positions, be->seq_slots, table_of(be, c, layer), be->recent_table, be->max_pages, c->layout,
                           c->layers[layer], keeps_recent(be, c), err);
}


// Prefill: many queries of one sequence at consecutive positions. Decoding each key once per query
// would dominate, so K and V of the range are decoded once per KV head and attention runs as two
// products per query head and block of queries: S = Q Kᵀ, then O = softmax(S) V
// (float_products.h).
struct QueryRun {
  uint32_t first_token, n_tokens;  // batch rows [first, first + n)
  int32_t first_pos;               // their positions are first_pos, first_pos + 1, ...
  int32_t seq;
};

constexpr uint32_t kMinBlockedRun = 8;      // shorter runs take the per-query path
constexpr uint32_t kQueryBlock = 128;       // query rows per product (bounds the score matrix)

// Splits the batch into runs of consecutive positions of one sequence.
std::vector<QueryRun> query_runs(const sl_backend* be) {
  std::vector<QueryRun> runs;
  for (uint32_t t = 0; t < be->positions.size(); ++t) {
    if (!runs.empty()) {
      auto& r = runs.back();
      if (r.seq == be->seq_slots[t] && r.first_token + r.n_tokens == t && r.first_pos + static_cast<int32_t>(r.n_tokens) == be->positions[t]) {
        ++r.n_tokens;
        continue;
      }
    }
    runs.push_back({t, 1, be->positions[t], be->seq_slots[t]});
  }
  return runs;
}

void decode_range(sl_kv_cache* c, uint32_t layer, const int32_t* table, uint32_t head, int32_t lo, int32_t hi, bool values,
                  float* dst) {
  const KvLayerShape& Ly = c->layers[layer];
  const uint32_t pt = c->layout.page_tokens, dim = values ? Ly.v_dim : Ly.k_dim;
  const sl_kvcodec_api* api = values ? Ly.v_api : Ly.k_api;
  const sl_kvcodec* codec = values ? Ly.v_codec : Ly.k_codec;
  for (int32_t at = lo; at <= hi;) {
    const uint32_t page = static_cast<uint32_t>(table[at / pt]), slot = at % pt;
    const uint32_t run = std::min<uint32_t>(pt - slot, static_cast<uint32_t>(hi - at + 1));
    const std::byte* rows = values ? v_row(c, layer, page, head, slot) : k_row(c, layer, page, head, slot);
    sl_error ignored{};  // decode of rows we encoded cannot fail for a well-behaved codec
    api->decode(codec, rows, run, dst + static_cast<std::size_t>(at - lo) * dim, &ignored);
    at += static_cast<int32_t>(run);
  }
}

// The window of a query at pos: its first key (0 without one).
int32_t window_start(const sl_attention_params* p, int32_t pos) {
  return p->window ? std::max<int32_t>(0, pos - static_cast<int32_t>(p->window) + 1) : 0;
}

void attend_run(sl_backend* be, sl_kv_cache* c, uint32_t layer, const float* q, const sl_attention_params* p, uint32_t DV,
                const float* sinks, float* out, const QueryRun& run) {
  const uint32_t D = p->head_dim, group = p->n_heads / p->n_kv_heads, pt = c->layout.page_tokens;
  const int32_t last_pos = run.first_pos + static_cast<int32_t>(run.n_tokens) - 1;
  const int32_t k_lo = window_start(p, run.first_pos);
  const std::size_t nk = static_cast<std::size_t>(last_pos - k_lo + 1);
  const int32_t* table = table_of(be, c, layer).data() + static_cast<std::size_t>(run.seq) * be->max_pages;
  const std::size_t q_stride = static_cast<std::size_t>(p->n_heads) * D, o_stride = static_cast<std::size_t>(p->n_heads) * DV;

  // The recent window: where each query's exact keys start, and the lowest of them.
  std::vector<int32_t> exact_lo(run.n_tokens);
  int32_t exact_min = last_pos + 1;
  for (uint32_t i = 0; i < run.n_tokens; ++i) {
    const int32_t pos = run.first_pos + static_cast<int32_t>(i);
    exact_lo[i] = exact_from(be, c, run.seq, pos, window_start(p, pos));
    if (exact_lo[i] <= pos) exact_min = std::min(exact_min, exact_lo[i]);  // pos + 1: none for this query
  }
  const bool recent = exact_min <= last_pos;
  const int32_t* recent_table = recent ? be->recent_table.data() + static_cast<std::size_t>(run.seq) * be->max_pages : nullptr;

  // One work item per query head; each decodes its KV head's rows (cheap next to the products).
  be->pool->parallel_for(p->n_heads, 1, [&](std::size_t hb, std::size_t he, unsigned) {
    std::vector<float> kf(nk * D), vf(nk * DV), scores(static_cast<std::size_t>(std::min(run.n_tokens, kQueryBlock)) * nk);
    std::vector<float> exact_k, exact_v;
    PackedRows packed_keys;
    uint32_t decoded_kvh = UINT32_MAX;
    for (uint32_t h = static_cast<uint32_t>(hb); h < he; ++h) {
      const uint32_t kvh = h / group;
      if (kvh != decoded_kvh) {
        decode_range(c, layer, table, kvh, k_lo, last_pos, false, kf.data());
        decode_range(c, layer, table, kvh, k_lo, last_pos, true, vf.data());
        pack_rows(kf.data(), nk, D, packed_keys);
        if (recent) {
          const std::size_t n_exact = static_cast<std::size_t>(last_pos - exact_min + 1);
          exact_k.resize(n_exact * D);
          exact_v.resize(n_exact * DV);
          for (int32_t j = exact_min; j <= last_pos; ++j) {
            const int32_t rpage = recent_table[j / static_cast<int32_t>(pt)];
            if (rpage < 0) continue;  // below every query's exact range
            const uint32_t slot = static_cast<uint32_t>(j) % pt;
            f16_row_to_f32(recent_row(c, layer, rpage, 0, kvh, slot), exact_k.data() + static_cast<std::size_t>(j - exact_min) * D, D);
            f16_row_to_f32(recent_row(c, layer, rpage, 1, kvh, slot), exact_v.data() + static_cast<std::size_t>(j - exact_min) * DV, DV);
          }
        }
        decoded_kvh = kvh;
      }
      for (uint32_t q0 = 0; q0 < run.n_tokens; q0 += kQueryBlock) {
        const uint32_t nq = std::min(kQueryBlock, run.n_tokens - q0);
        // Keys past the block's last query are masked for every row of it: leave them out.
        const std::size_t nk_used = static_cast<std::size_t>(run.first_pos + static_cast<int32_t>(q0 + nq) - 1 - k_lo) + 1;
        const float* qb = q + (static_cast<std::size_t>(run.first_token + q0)) * q_stride + h * D;
        // Row i of the block sees key_count + i keys (its own position's included).
        const std::size_t key_count = nk_used - nq + 1;
        times_packed_rows(qb, q_stride, nq, packed_keys, key_count, p->scale, scores.data(), nk);
        // The recent window: each query's newest keys scored from their exact rows instead.
        for (std::size_t i = 0; recent && i < nq; ++i) {
          const int32_t pos = run.first_pos + static_cast<int32_t>(q0 + i);
          for (int32_t j = exact_lo[q0 + i]; j <= pos; ++j)
            scores[i * nk + static_cast<std::size_t>(j - k_lo)] =
                p->scale * dot_f32(qb + i * q_stride, exact_k.data() + static_cast<std::size_t>(j - exact_min) * D, D);
        }
        for (std::size_t i = 0; i < nq; ++i) {
          const int32_t pos = run.first_pos + static_cast<int32_t>(q0 + i);
          const int32_t lo = window_start(p, pos);
          float* s = scores.data() + i * nk;
          const std::size_t from = static_cast<std::size_t>(lo - k_lo), to = static_cast<std::size_t>(pos - k_lo) + 1;
          float m = sinks ? sinks[h] : -INFINITY;
          for (std::size_t j = from; j < to; ++j) {
            if (p->softcap > 0) s[j] = std::tanh(s[j] / p->softcap) * p->softcap;
            m = std::max(m, s[j]);
          }
          float sum = sinks ? std::exp(sinks[h] - m) : 0.0f;
          sum += exp_shifted_sum(s + from, to - from, m);
          const float inv = 1.0f / sum;
          std::fill(s, s + from, 0.0f);
          for (std::size_t j = from; j < to; ++j) s[j] *= inv;
          std::fill(s + to, s + nk_used, 0.0f);
        }
        float* ob = out + (static_cast<std::size_t>(run.first_token + q0)) * o_stride + h * DV;
        times_rows(scores.data(), nk, nq, vf.data(), nk_used, DV, key_count, ob, o_stride);
        // ... and their values: the product took the decoded rows; add weight × (exact − decoded).
        for (std::size_t i = 0; recent && i < nq; ++i) {
          const int32_t pos = run.first_pos + static_cast<int32_t>(q0 + i);
          for (int32_t j = exact_lo[q0 + i]; j <= pos; ++j) {
            const float w = scores[i * nk + static_cast<std::size_t>(j - k_lo)];
            const float* ve = exact_v.data() + static_cast<std::size_t>(j - exact_min) * DV;
            const float* vd = vf.data() + static_cast<std::size_t>(j - k_lo) * DV;
            float* o = ob + i * o_stride;
            for (uint32_t d = 0; d < DV; ++d) o[d] += w * (ve[d] - vd[d]);
          }
        }
      }
    }
  });
}

}  // namespace

sl_status kv_create(sl_backend*, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err) {
  KvShape shape;
  if (auto s = read_kv_layout(layout, shape, err); s != SL_OK) return s;
  try {
    auto c = std::make_unique<sl_kv_cache>();
    c->layout = shape.layout;
    c->layers = std::move(shape.layers);
    uint64_t bytes = 0, halves = 0, state = 0;
    const bool recent = c->layout.recent_window > 0;
    for (const KvLayerShape& l : c->layers) {
      c->offset.push_back(bytes);
      c->recent_offset.push_back(halves);
      c->state_offset.push_back(state);
      if (l.has_kv()) {
        bytes += l.bytes();
        if (recent) halves += l.recent_values * c->layout.n_recent_pages;
      } else {
        state += l.state_bytes * c->layout.n_state_slots;
        c->has_state = true;
      }
    }
    c->storage.resize(bytes);
    c->recent.resize(halves);
    c->state.resize(state);
    *out = c.release();
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "kv_create: cannot allocate the KV cache");
  } catch (const std::length_error&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "kv_create: the KV cache is larger than this host can address");
  }
}

void kv_destroy(sl_backend*, sl_kv_cache* cache) { delete cache; }

sl_status kv_copy_page(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
    const KvLayerShape& Ly = c->layers[l];
    if (Ly.kind != SL_KV_FULL) continue;
    std::byte* base = c->storage.data() + c->offset[l];
    std::memcpy(base + dst * Ly.page_bytes, base + src * Ly.page_bytes, Ly.page_bytes);
  }
  return SL_OK;
}

sl_status kv_copy_state(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (!c->has_state) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_state: the cache has no recurrent layer");
  if (src >= c->layout.n_state_slots || dst >= c->layout.n_state_slots)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_state: slot out of range");
  if (src == dst) return SL_OK;
  for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
    const KvLayerShape& Ly = c->layers[l];
    if (Ly.kind != SL_KV_STATE) continue;
    std::byte* base = c->state.data() + c->state_offset[l];
    std::memcpy(base + dst * Ly.state_bytes, base + src * Ly.state_bytes, Ly.state_bytes);
  }
  return SL_OK;
}

sl_status kv_clear_state(sl_backend*, sl_kv_cache* c, uint32_t slot, sl_error* err) {
  if (!c->has_state) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_clear_state: the cache has no recurrent layer");
  if (slot >= c->layout.n_state_slots) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_clear_state: slot out of range");
  for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
    const KvLayerShape& Ly = c->layers[l];
    if (Ly.kind == SL_KV_STATE) std::memset(c->state.data() + c->state_offset[l] + slot * Ly.state_bytes, 0, Ly.state_bytes);
  }
  return SL_OK;
}

std::byte* state_of(sl_backend* be, sl_kv_cache* c, uint32_t layer, uint32_t seq, sl_error* err) {
  if (layer >= c->layout.n_layers || c->layers[layer].kind != SL_KV_STATE) {
    set_error(err, SL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) + " of the cache keeps no state");
    return nullptr;
  }
  if (check_state_slots(be->state_slots, be->n_seqs, c->layout, err) != SL_OK) return nullptr;
  const KvLayerShape& Ly = c->layers[layer];
  return c->state.data() + c->state_offset[layer] + static_cast<uint64_t>(be->state_slots[seq]) * Ly.state_bytes;
}

sl_status kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err) {
  if (layer >= c->layout.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer out of range");
  const KvLayerShape& Ly = c->layers[layer];
  if (!Ly.has_kv()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer " + std::to_string(layer) + " keeps no K/V");
  const uint64_t n = be->positions.size(), pt = c->layout.page_tokens;
  if (k->bytes != n * Ly.n_kv_heads * Ly.k_dim * 4 || v->bytes != n * Ly.n_kv_heads * Ly.v_dim * 4)
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "kv_write: K and V are not [tokens, " + std::to_string(Ly.n_kv_heads) + " x " + std::to_string(Ly.k_dim) + "] and [tokens, " +
                         std::to_string(Ly.n_kv_heads) + " x " + std::to_string(Ly.v_dim) + "] (layer " + std::to_string(layer) + ")");
  if (auto s = check_pages(be, c, layer, err); s != SL_OK) return s;
  const std::vector<int32_t>& table = table_of(be, c, layer);
  for (std::size_t t = 0; t < n; ++t) {
    const uint32_t pos = static_cast<uint32_t>(be->positions[t]);
    const std::size_t entry = static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + pos / pt;
    const uint32_t page = static_cast<uint32_t>(table[entry]);
    const uint32_t slot = pos % pt;
    for (uint32_t h = 0; h < Ly.n_kv_heads; ++h) {
      const float* ks = f32(k) + (t * Ly.n_kv_heads + h) * Ly.k_dim;
      const float* vs = f32(v) + (t * Ly.n_kv_heads + h) * Ly.v_dim;
      if (auto s = Ly.k_api->encode(Ly.k_codec, ks, 1, k_row(c, layer, page, h, slot), err); s != SL_OK) return s;
      if (auto s = Ly.v_api->encode(Ly.v_codec, vs, 1, v_row(c, layer, page, h, slot), err); s != SL_OK) return s;
    }
    const int32_t rpage = keeps_recent(be, c) ? be->recent_table[entry] : -1;
    for (uint32_t h = 0; rpage >= 0 && h < Ly.n_kv_heads; ++h) {
      const float* ks = f32(k) + (t * Ly.n_kv_heads + h) * Ly.k_dim;
      const float* vs = f32(v) + (t * Ly.n_kv_heads + h) * Ly.v_dim;
      uint16_t* kd = recent_row(c, layer, rpage, 0, h, slot);
      uint16_t* vd = recent_row(c, layer, rpage, 1, h, slot);
      for (uint32_t d = 0; d < Ly.k_dim; ++d) kd[d] = f32_to_f16(ks[d]);
      for (uint32_t d = 0; d < Ly.v_dim; ++d) vd[d] = f32_to_f16(vs[d]);
    }
  }
  return SL_OK;
}

sl_status attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                    const float* sinks, sl_buffer* out, sl_error* err) {
  if (layer >= c->layout.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer out of range");
  const KvLayerShape& Ly = c->layers[layer];
  const uint32_t head_dim = p->head_dim, v_dim = p->v_head_dim ? p->v_head_dim : p->head_dim;
  if (!Ly.has_kv()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer " + std::to_string(layer) + " keeps no K/V");
  if (p->n_kv_heads != Ly.n_kv_heads || head_dim != Ly.k_dim || v_dim != Ly.v_dim || p->n_heads % p->n_kv_heads)
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "attention: heads " + std::to_string(p->n_heads) + "/" + std::to_string(p->n_kv_heads) + ", K " +
                         std::to_string(head_dim) + ", V " + std::to_string(v_dim) + " do not match layer " + std::to_string(layer) +
                         " of the KV cache (" + std::to_string(Ly.n_kv_heads) + " KV heads, K " + std::to_string(Ly.k_dim) + ", V " +
                         std::to_string(Ly.v_dim) + ")");
  if (Ly.kind == SL_KV_WINDOW && (p->window == 0 || p->window > Ly.window))
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "attention: layer " + std::to_string(layer) + " keeps a window of " + std::to_string(Ly.window) +
                         " positions; the node's window is " + std::to_string(p->window));
  if (q->bytes != be->positions.size() * p->n_heads * head_dim * 4 || out->bytes != be->positions.size() * p->n_heads * v_dim * 4)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: q or the output is not the batch's size");
  if (auto s = check_pages(be, c, layer, err); s != SL_OK) return s;

  const uint32_t group = p->n_heads / p->n_kv_heads, pt = c->layout.page_tokens;
  const bool fused_k = has_fused_keys(Ly.k_api), fused_v = has_fused_values(Ly.v_api);
  const uint32_t qstate_bytes = fused_k ? Ly.k_api->query_state_bytes(Ly.k_codec) : 0;
  const uint32_t v_domain = fused_v ? std::max(Ly.v_format.domain_dim, v_dim) : v_dim;
  const std::vector<int32_t>& pages = table_of(be, c, layer);

  // Long runs of one sequence (prefill chunks) go through the blocked path; the rest (decode
  // tokens, short runs) through the per-query path below, which uses the codec's fused hooks.
  std::vector<uint32_t> single;  // batch rows for the per-query path
  try {
    for (const auto& run : query_runs(be)) {
      if (run.n_tokens >= kMinBlockedRun) {
        attend_run(be, c, layer, f32(q), p, v_dim, sinks, f32(out), run);
      } else {
        for (uint32_t i = 0; i < run.n_tokens; ++i) single.push_back(run.first_token + i);
      }
    }
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "attention: out of memory for scratch");
  }
  const std::size_t n_items = single.size() * p->n_heads;

  be->pool->parallel_for(n_items, 1, [&](std::size_t begin, std::size_t end, unsigned) {
    std::vector<float> scores, rows_f32, acc(v_domain), acc_exact(v_dim), row_exact(v_dim);
    std::vector<std::byte> qstate(qstate_bytes);
    sl_error ignored{};  // the ABI never passes a null error
    for (std::size_t item = begin; item < end; ++item) {
      const std::size_t t = single[item / p->n_heads];
      const uint32_t h = static_cast<uint32_t>(item % p->n_heads), kvh = h / group;
      const int32_t pos = be->positions[t];
      const int32_t lo = window_start(p, pos);
      const std::size_t n = static_cast<std::size_t>(pos - lo + 1);
      const int32_t* table = pages.data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
      const float* qv = f32(q) + (t * p->n_heads + h) * head_dim;
      scores.resize(n);
      // Keys [lo, exact) come from the codec's rows, [exact, pos] from the recent window's.
      const int32_t exact = exact_from(be, c, be->seq_slots[t], pos, lo);
      const int32_t* recent = exact <= pos ? be->recent_table.data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages : nullptr;

      // Scores, one run of contiguous slots (within a page) at a time.
      if (fused_k) Ly.k_api->prepare_query(Ly.k_codec, qv, qstate.data());
      for (int32_t j = exact; j <= pos; ++j)
        scores[static_cast<std::size_t>(j - lo)] = dot_f16(recent_row(c, layer, recent[j / pt], 0, kvh, j % pt), qv, head_dim);
      for (int32_t at = lo; at < exact;) {
        const uint32_t page = static_cast<uint32_t>(table[at / pt]), slot = at % pt;
        const uint32_t run = std::min<uint32_t>(pt - slot, static_cast<uint32_t>(exact - at));
        const std::byte* rows = k_row(c, layer, page, kvh, slot);
        float* s = scores.data() + (at - lo);
        if (fused_k) {
          Ly.k_api->score_keys(Ly.k_codec, qstate.data(), rows, Ly.k_format.row_bytes, run, s);
        } else {
          rows_f32.resize(static_cast<std::size_t>(run) * head_dim);
          Ly.k_api->decode(Ly.k_codec, rows, run, rows_f32.data(), &ignored);
          for (uint32_t i = 0; i < run; ++i) s[i] = dot_f32(qv, rows_f32.data() + i * head_dim, head_dim);
        }
        at += static_cast<int32_t>(run);
      }

      float m = -INFINITY;
      for (auto& s : scores) {
        s *= p->scale;
        if (p->softcap > 0) s = std::tanh(s / p->softcap) * p->softcap;
        m = std::max(m, s);
      }
      if (sinks) m = std::max(m, sinks[h]);
      float sum = sinks ? std::exp(sinks[h] - m) : 0.0f;
      sum += exp_shifted_sum(scores.data(), scores.size(), m);
      const float inv = 1.0f / sum;
      for (auto& s : scores) s *= inv;

      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(acc_exact.begin(), acc_exact.end(), 0.0f);
      for (int32_t j = exact; j <= pos; ++j) {
        f16_row_to_f32(recent_row(c, layer, recent[j / pt], 1, kvh, j % pt), row_exact.data(), v_dim);
        axpy(scores[static_cast<std::size_t>(j - lo)], row_exact.data(), acc_exact.data(), v_dim);
      }
      for (int32_t at = lo; at < exact;) {
        const uint32_t page = static_cast<uint32_t>(table[at / pt]), slot = at % pt;
        const uint32_t run = std::min<uint32_t>(pt - slot, static_cast<uint32_t>(exact - at));
        const std::byte* rows = v_row(c, layer, page, kvh, slot);
        const float* w = scores.data() + (at - lo);
        if (fused_v) {
          Ly.v_api->accumulate_values(Ly.v_codec, rows, Ly.v_format.row_bytes, run, w, acc.data());
        } else {
          rows_f32.resize(static_cast<std::size_t>(run) * v_dim);
          Ly.v_api->decode(Ly.v_codec, rows, run, rows_f32.data(), &ignored);
          for (uint32_t i = 0; i < run; ++i) axpy(w[i], rows_f32.data() + i * v_dim, acc.data(), v_dim);
        }
        at += static_cast<int32_t>(run);
      }
      float* o = f32(out) + (t * p->n_heads + h) * v_dim;
      if (fused_v)
        Ly.v_api->finish_values(Ly.v_codec, acc.data(), o);
      else
        std::copy_n(acc.begin(), v_dim, o);
      if (recent)
        for (uint32_t d = 0; d < v_dim; ++d) o[d] += acc_exact[d];
    }
  });
  return SL_OK;
}

}  // namespace sluice::cpu
