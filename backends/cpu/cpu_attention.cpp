// The paged KV cache and attention over it on the CPU.
//
// Storage: for each layer, n_pages pages; a page holds page_tokens positions: first the K rows of
// every KV head ([head][slot] so that one head's keys are contiguous), then the V rows. Rows are in
// the codec's format. A sequence's page table maps position / page_tokens to a page.
//
// Attention uses the codec's fused hooks when it has them (scores straight from stored rows, values
// accumulated in the codec's domain) and otherwise decodes each run of rows into scratch first.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu_backend.h"
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
  const auto& L = c->layout;
  return c->storage.data() + layer * c->layer_bytes + page * c->page_bytes +
         (static_cast<uint64_t>(head) * L.page_tokens + slot) * c->k_format.row_bytes;
}
std::byte* v_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const auto& L = c->layout;
  return c->storage.data() + layer * c->layer_bytes + page * c->page_bytes +
         static_cast<uint64_t>(L.n_kv_heads) * L.page_tokens * c->k_format.row_bytes +
         (static_cast<uint64_t>(head) * L.page_tokens + slot) * c->v_format.row_bytes;
}

// Checks that every position the batch touches has a page in range.
sl_status check_pages(const sl_backend* be, const sl_kv_cache* c, sl_error* err) {
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const uint32_t last_page = static_cast<uint32_t>(be->positions[t]) / c->layout.page_tokens;
    if (last_page >= be->max_pages)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "position " + std::to_string(be->positions[t]) + " beyond the page table");
    const int32_t* table = be->page_table.data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
    for (uint32_t p = 0; p <= last_page; ++p)
      if (table[p] < 0 || static_cast<uint32_t>(table[p]) >= c->layout.n_pages)
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "page table entry " + std::to_string(table[p]) + " out of range");
  }
  return SL_OK;
}

}  // namespace

sl_status kv_create(sl_backend*, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err) {
  if (!layout || !layout->k_api || !layout->v_api || !layout->k_codec || !layout->v_codec || layout->page_tokens == 0)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_create: incomplete layout");
  try {
    auto c = std::make_unique<sl_kv_cache>();
    c->layout = *layout;
    c->k_format.struct_size = sizeof(sl_kv_format);
    c->v_format.struct_size = sizeof(sl_kv_format);
    layout->k_api->get_format(layout->k_codec, &c->k_format);
    layout->v_api->get_format(layout->v_codec, &c->v_format);
    c->page_bytes = static_cast<uint64_t>(layout->n_kv_heads) * layout->page_tokens *
                    (c->k_format.row_bytes + c->v_format.row_bytes);
    c->layer_bytes = c->page_bytes * layout->n_pages;
    c->storage.resize(c->layer_bytes * layout->n_layers);
    *out = c.release();
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "kv_create: cannot allocate the KV cache");
  }
}

void kv_destroy(sl_backend*, sl_kv_cache* cache) { delete cache; }

sl_status kv_copy_page(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
    std::byte* base = c->storage.data() + l * c->layer_bytes;
    std::memcpy(base + dst * c->page_bytes, base + src * c->page_bytes, c->page_bytes);
  }
  return SL_OK;
}

sl_status kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer out of range");
  if (auto s = check_pages(be, c, err); s != SL_OK) return s;
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const uint32_t pos = static_cast<uint32_t>(be->positions[t]);
    const uint32_t page = static_cast<uint32_t>(be->page_table[static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + pos / L.page_tokens]);
    const uint32_t slot = pos % L.page_tokens;
    for (uint32_t h = 0; h < L.n_kv_heads; ++h) {
      const std::size_t src = (t * L.n_kv_heads + h) * L.head_dim;
      if (auto s = L.k_api->encode(L.k_codec, f32(k) + src, 1, k_row(c, layer, page, h, slot), err); s != SL_OK) return s;
      if (auto s = L.v_api->encode(L.v_codec, f32(v) + src, 1, v_row(c, layer, page, h, slot), err); s != SL_OK) return s;
    }
  }
  return SL_OK;
}

sl_status attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                    sl_buffer* out, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer out of range");
  if (p->n_kv_heads != L.n_kv_heads || p->head_dim != L.head_dim || p->n_heads % p->n_kv_heads)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: head shape does not match the KV cache");
  if (auto s = check_pages(be, c, err); s != SL_OK) return s;

  const uint32_t head_dim = p->head_dim, group = p->n_heads / p->n_kv_heads;
  const bool fused_k = has_fused_keys(L.k_api), fused_v = has_fused_values(L.v_api);
  const uint32_t qstate_bytes = fused_k ? L.k_api->query_state_bytes(L.k_codec) : 0;
  const uint32_t v_domain = fused_v ? std::max(c->v_format.domain_dim, head_dim) : head_dim;
  const float* sinks = p->sinks ? f32(p->sinks) : nullptr;
  const std::size_t n_items = be->positions.size() * p->n_heads;

  be->pool->parallel_for(n_items, 1, [&](std::size_t begin, std::size_t end, unsigned) {
    std::vector<float> scores, rows_f32, acc(v_domain);
    std::vector<std::byte> qstate(qstate_bytes);
    for (std::size_t item = begin; item < end; ++item) {
      const std::size_t t = item / p->n_heads;
      const uint32_t h = static_cast<uint32_t>(item % p->n_heads), kvh = h / group;
      const int32_t pos = be->positions[t];
      const int32_t lo = p->window ? std::max<int32_t>(0, pos - static_cast<int32_t>(p->window) + 1) : 0;
      const std::size_t n = static_cast<std::size_t>(pos - lo + 1);
      const int32_t* table = be->page_table.data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
      const float* qv = f32(q) + item * head_dim;
      scores.resize(n);

      // Scores, one run of contiguous slots (within a page) at a time.
      if (fused_k) L.k_api->prepare_query(L.k_codec, qv, qstate.data());
      for (int32_t at = lo; at <= pos;) {
        const uint32_t page = static_cast<uint32_t>(table[at / L.page_tokens]), slot = at % L.page_tokens;
        const uint32_t run = std::min<uint32_t>(L.page_tokens - slot, static_cast<uint32_t>(pos - at + 1));
        const std::byte* rows = k_row(c, layer, page, kvh, slot);
        float* s = scores.data() + (at - lo);
        if (fused_k) {
          L.k_api->score_keys(L.k_codec, qstate.data(), rows, c->k_format.row_bytes, run, s);
        } else {
          rows_f32.resize(static_cast<std::size_t>(run) * head_dim);
          L.k_api->decode(L.k_codec, rows, run, rows_f32.data(), nullptr);
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
      for (auto& s : scores) sum += (s = std::exp(s - m));
      const float inv = 1.0f / sum;
      for (auto& s : scores) s *= inv;

      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t at = lo; at <= pos;) {
        const uint32_t page = static_cast<uint32_t>(table[at / L.page_tokens]), slot = at % L.page_tokens;
        const uint32_t run = std::min<uint32_t>(L.page_tokens - slot, static_cast<uint32_t>(pos - at + 1));
        const std::byte* rows = v_row(c, layer, page, kvh, slot);
        const float* w = scores.data() + (at - lo);
        if (fused_v) {
          L.v_api->accumulate_values(L.v_codec, rows, c->v_format.row_bytes, run, w, acc.data());
        } else {
          rows_f32.resize(static_cast<std::size_t>(run) * head_dim);
          L.v_api->decode(L.v_codec, rows, run, rows_f32.data(), nullptr);
          for (uint32_t i = 0; i < run; ++i) axpy(w[i], rows_f32.data() + i * head_dim, acc.data(), head_dim);
        }
        at += static_cast<int32_t>(run);
      }
      float* o = f32(out) + item * head_dim;
      if (fused_v)
        L.v_api->finish_values(L.v_codec, acc.data(), o);
      else
        std::copy_n(acc.begin(), head_dim, o);
    }
  });
  return SL_OK;
}

}  // namespace sluice::cpu
