// Example backend "example": the whole backend ABI in one file, on host memory, single-threaded,
// plain loops. Float32 weights only — supports_op says so, and the host keeps other forms on
// another backend. Attention decodes the KV rows through the codec (works with every codec).
// `sluice conformance --backend build/lib/examples/sluice-example-backend.so` checks it.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "sluice/backend.h"

struct sl_buffer {
  std::vector<unsigned char> owned;
  unsigned char* data = nullptr;
  uint64_t bytes = 0;
};
struct sl_kv_cache {
  sl_kv_layout layout{};
  sl_kv_format kf{}, vf{};
  uint64_t page_bytes = 0;
  std::vector<std::vector<unsigned char>> layers;
};
struct sl_backend {
  std::vector<int32_t> positions, slots, table;
  uint32_t max_pages = 0;
};

namespace {

sl_status fail(sl_error* err, sl_status s, const std::string& m) {
  std::strncpy(err->message, m.c_str(), SL_ERROR_MESSAGE_SIZE - 1);
  err->message[SL_ERROR_MESSAGE_SIZE - 1] = '\0';
  return s;
}
float* F(const sl_buffer* b) { return reinterpret_cast<float*>(b->data); }
bool fits(uint64_t size, uint64_t off, uint64_t n) { return off <= size && n <= size - off; }
const float* W(const sl_weight* w) { return reinterpret_cast<const float*>(w->data->data + w->offset); }
bool f32_weight(const sl_weight* w) { return w && w->data && w->bits == 0 && w->dtype == SL_DTYPE_F32; }

uint32_t device_count() { return 1; }
sl_status device_info(uint32_t i, sl_device_info* out, sl_error* err) {
  if (i != 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "the example backend has one device (0)");
  sl_device_info d{};
  d.struct_size = sizeof(d);
  std::strcpy(d.name, "example host device");
  std::strcpy(d.vendor, "example");
  std::strcpy(d.driver, "0.1.0");
  std::strcpy(d.kind, "cpu");
  d.compute_units = 1;
  d.caps = SL_CAP_UNIFIED;
  const uint32_t size = out->struct_size ? std::min<uint32_t>(out->struct_size, sizeof(d)) : sizeof(d);
  std::memcpy(out, &d, size);
  out->struct_size = size;
  return SL_OK;
}
sl_status create(const sl_backend_config*, sl_backend** out, sl_error* err) {
  *out = new (std::nothrow) sl_backend;
  return *out ? SL_OK : fail(err, SL_ERR_OUT_OF_MEMORY, "out of memory");
}
void destroy(sl_backend* be) { delete be; }
sl_status get_device_info(const sl_backend*, sl_device_info* out, sl_error* err) { return device_info(0, out, err); }
int supports_op(const sl_backend*, const sl_op_query* q) {
  if (!q || q->op >= SL_OP_COUNT) return 0;
  if (q->op == SL_OP_KV_RECENT_WINDOW) return 0;  // every key is read through the codec
  if (q->op == SL_OP_MATMUL || q->op == SL_OP_EMBED || q->op == SL_OP_RMS_NORM || q->op == SL_OP_LAYER_NORM)
    return q->weight_bits == 0 && q->weight_dtype == SL_DTYPE_F32;
  return 1;
}

sl_status alloc(sl_backend*, uint64_t bytes, sl_buffer** out, sl_error* err) {
  try {
    auto b = std::make_unique<sl_buffer>();
    b->owned.assign(bytes + 4, 0);  // + 4: never a null data pointer
    b->data = b->owned.data();
    b->bytes = bytes;
    *out = b.release();
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return fail(err, SL_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
  }
}
sl_status wrap_host(sl_backend*, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err) {
  auto* b = new (std::nothrow) sl_buffer;
  if (!b) return fail(err, SL_ERR_OUT_OF_MEMORY, "out of memory");
  b->data = const_cast<unsigned char*>(static_cast<const unsigned char*>(host));
  b->bytes = bytes;
  *out = b;
  return SL_OK;
}
void free_buffer(sl_backend*, sl_buffer* b) { delete b; }
sl_status upload(sl_backend*, sl_buffer* d, uint64_t off, const void* src, uint64_t n, sl_error* err) {
  if (!fits(d->bytes, off, n)) return fail(err, SL_ERR_INVALID_ARGUMENT, "upload past the buffer's end");
  std::memcpy(d->data + off, src, n);
  return SL_OK;
}
sl_status download(sl_backend*, const sl_buffer* s, uint64_t off, void* dst, uint64_t n, sl_error* err) {
  if (!fits(s->bytes, off, n)) return fail(err, SL_ERR_INVALID_ARGUMENT, "download past the buffer's end");
  std::memcpy(dst, s->data + off, n);
  return SL_OK;
}
sl_status synchronize(sl_backend*, sl_error*) { return SL_OK; }

unsigned char* row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot, bool v) {
  const auto& L = c->layout;
  return c->layers[layer].data() + page * c->page_bytes + (v ? uint64_t(L.n_kv_heads) * L.page_tokens * c->kf.row_bytes : 0) +
         (uint64_t(head) * L.page_tokens + slot) * (v ? c->vf.row_bytes : c->kf.row_bytes);
}
sl_status kv_create(sl_backend*, const sl_kv_layout* l, sl_kv_cache** out, sl_error* err) {
  if (!l || !l->k_api || !l->v_api || !l->k_codec || !l->v_codec || l->page_tokens == 0)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_create: incomplete layout");
  auto c = std::make_unique<sl_kv_cache>();
  c->layout = *l;
  c->kf.struct_size = c->vf.struct_size = sizeof(sl_kv_format);
  l->k_api->get_format(l->k_codec, &c->kf);
  l->v_api->get_format(l->v_codec, &c->vf);
  c->page_bytes = uint64_t(l->n_kv_heads) * l->page_tokens * (c->kf.row_bytes + c->vf.row_bytes);
  c->layers.assign(l->n_layers, std::vector<unsigned char>(c->page_bytes * l->n_pages));
  *out = c.release();
  return SL_OK;
}
void kv_destroy(sl_backend*, sl_kv_cache* c) { delete c; }
sl_status kv_copy_page(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  for (auto& l : c->layers) std::memmove(l.data() + dst * c->page_bytes, l.data() + src * c->page_bytes, c->page_bytes);
  return SL_OK;
}
sl_status begin_batch(sl_backend* be, const sl_batch* b, sl_error* err) {
  if (!b || b->n_tokens == 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "empty batch");
  be->positions.assign(b->positions, b->positions + b->n_tokens);
  be->slots.assign(b->seq_slots, b->seq_slots + b->n_tokens);
  be->table.assign(b->page_table, b->page_table + std::size_t(b->n_seqs) * b->max_pages);
  be->max_pages = b->max_pages;
  for (uint32_t i = 0; i < b->n_tokens; ++i)
    if (be->slots[i] < 0 || uint32_t(be->slots[i]) >= b->n_seqs || be->positions[i] < 0)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(i) + " has a bad sequence or position");
  return SL_OK;
}
// The page holding a token's position, or -1 when the page table does not cover it.
int64_t page_of(const sl_backend* be, const sl_kv_cache* c, std::size_t t, int32_t pos) {
  const uint32_t p = uint32_t(pos) / c->layout.page_tokens;
  if (p >= be->max_pages) return -1;
  const int32_t page = be->table[std::size_t(be->slots[t]) * be->max_pages + p];
  return page < 0 || uint32_t(page) >= c->layout.n_pages ? -1 : page;
}

sl_status embed(sl_backend*, const sl_weight* t, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err) {
  if (!f32_weight(t)) return fail(err, SL_ERR_UNSUPPORTED, "embed: float32 tables only");
  for (uint32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || uint32_t(ids[i]) >= t->rows)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "token id " + std::to_string(ids[i]) + " outside the vocabulary");
    std::memcpy(F(out) + std::size_t(i) * t->cols, W(t) + std::size_t(ids[i]) * t->cols, t->cols * 4);
  }
  return SL_OK;
}
sl_status rms_norm(sl_backend*, const sl_buffer* x, const sl_weight* w, float off, sl_buffer* out, uint32_t rows, uint32_t dim,
                   float eps, sl_error* err) {
  if (!f32_weight(w) || w->cols != dim) return fail(err, SL_ERR_UNSUPPORTED, "rms_norm: float32 weights only");
  for (uint32_t r = 0; r < rows; ++r) {
    const float* xr = F(x) + std::size_t(r) * dim;
    float ss = 0;
    for (uint32_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / dim + eps);
    for (uint32_t i = 0; i < dim; ++i) F(out)[std::size_t(r) * dim + i] = (W(w)[i] + off) * (xr[i] * inv);
  }
  return SL_OK;
}
sl_status layer_norm(sl_backend*, const sl_buffer* x, const sl_weight* w, const sl_weight* b, sl_buffer* out, uint32_t rows,
                     uint32_t dim, float eps, sl_error* err) {
  if (!f32_weight(w) || (b && !f32_weight(b))) return fail(err, SL_ERR_UNSUPPORTED, "layer_norm: float32 weights only");
  for (uint32_t r = 0; r < rows; ++r) {
    const float* xr = F(x) + std::size_t(r) * dim;
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= dim;
    for (uint32_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(var / dim + eps);
    for (uint32_t i = 0; i < dim; ++i)
      F(out)[std::size_t(r) * dim + i] = float((xr[i] - mean) * inv * W(w)[i] + (b ? W(b)[i] : 0.0f));
  }
  return SL_OK;
}
sl_status matmul(sl_backend*, const sl_buffer* x, uint32_t n, const sl_weight* w, const sl_weight* bias, sl_buffer* out,
                 sl_error* err) {
  if (!f32_weight(w)) return fail(err, SL_ERR_UNSUPPORTED, "matmul: float32 weights only");
  if (uint64_t(n) * w->cols * 4 > x->bytes || uint64_t(n) * w->rows * 4 > out->bytes)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "matmul: activation buffers too small for the shapes");
  if (bias && (!f32_weight(bias) || bias->cols != w->rows)) return fail(err, SL_ERR_INVALID_ARGUMENT, "matmul: bad bias");
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t r = 0; r < w->rows; ++r) {
      float s = bias ? W(bias)[r] : 0.0f;
      for (uint32_t c = 0; c < w->cols; ++c) s += F(x)[std::size_t(t) * w->cols + c] * W(w)[std::size_t(r) * w->cols + c];
      F(out)[std::size_t(t) * w->rows + r] = s;
    }
  return SL_OK;
}
sl_status rope(sl_backend* be, sl_buffer* x, uint32_t heads, uint32_t dim, uint32_t rot, const float* inv_freq, float factor,
               uint32_t style, sl_error* err) {
  if (rot > dim || rot % 2) return fail(err, SL_ERR_INVALID_ARGUMENT, "rope: bad rotary_dim");
  for (std::size_t t = 0; t < be->positions.size(); ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      float* v = F(x) + (t * heads + h) * dim;
      for (uint32_t i = 0; i < rot / 2; ++i) {
        const float angle = float(be->positions[t]) * inv_freq[i];
        const float c = std::cos(angle) * factor, s = std::sin(angle) * factor;
        const uint32_t a = style == SL_ROPE_NEOX ? i : 2 * i, b = style == SL_ROPE_NEOX ? i + rot / 2 : 2 * i + 1;
        const float va = v[a], vb = v[b];
        v[a] = va * c - vb * s;
        v[b] = vb * c + va * s;
      }
    }
  return SL_OK;
}
sl_status kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer out of range");
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const int64_t page = page_of(be, c, t, be->positions[t]);
    if (page < 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_write: position outside the page table");
    const uint32_t slot = uint32_t(be->positions[t]) % L.page_tokens;
    for (uint32_t h = 0; h < L.n_kv_heads; ++h) {
      const std::size_t at = (t * L.n_kv_heads + h) * L.head_dim;
      if (auto s = L.k_api->encode(L.k_codec, F(k) + at, 1, row(c, layer, uint32_t(page), h, slot, false), err); s != SL_OK) return s;
      if (auto s = L.v_api->encode(L.v_codec, F(v) + at, 1, row(c, layer, uint32_t(page), h, slot, true), err); s != SL_OK) return s;
    }
  }
  return SL_OK;
}
sl_status attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                    sl_buffer* out, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: layer out of range");
  if (p->n_kv_heads != L.n_kv_heads || p->head_dim != L.head_dim || p->n_heads % p->n_kv_heads)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: head shape does not match the KV cache");
  const uint32_t D = p->head_dim, group = p->n_heads / p->n_kv_heads;
  std::vector<float> k(D), v(D), scores;
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const int32_t pos = be->positions[t], lo = p->window ? std::max<int32_t>(0, pos - int32_t(p->window) + 1) : 0;
    for (int32_t j = lo; j <= pos; ++j)
      if (page_of(be, c, t, j) < 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: position outside the page table");
    for (uint32_t h = 0; h < p->n_heads; ++h) {
      const float* qh = F(q) + (t * p->n_heads + h) * D;
      float* o = F(out) + (t * p->n_heads + h) * D;
      scores.assign(std::size_t(pos - lo + 1), 0.0f);
      float m = p->sinks ? F(p->sinks)[h] : -INFINITY;
      for (int32_t j = lo; j <= pos; ++j) {
        L.k_api->decode(L.k_codec, row(c, layer, uint32_t(page_of(be, c, t, j)), h / group, uint32_t(j) % L.page_tokens, false), 1, k.data(), err);
        float s = std::inner_product(qh, qh + D, k.begin(), 0.0f) * p->scale;
        if (p->softcap > 0) s = std::tanh(s / p->softcap) * p->softcap;
        m = std::max(m, scores[j - lo] = s);
      }
      float sum = p->sinks ? std::exp(F(p->sinks)[h] - m) : 0.0f;
      for (auto& s : scores) sum += (s = std::exp(s - m));
      std::fill(o, o + D, 0.0f);
      for (int32_t j = lo; j <= pos; ++j) {
        L.v_api->decode(L.v_codec, row(c, layer, uint32_t(page_of(be, c, t, j)), h / group, uint32_t(j) % L.page_tokens, true), 1, v.data(), err);
        for (uint32_t d = 0; d < D; ++d) o[d] += scores[j - lo] / sum * v[d];
      }
    }
  }
  return SL_OK;
}
sl_status gated_activation(sl_backend*, uint32_t act, const sl_buffer* g, const sl_buffer* u, sl_buffer* out, uint64_t n,
                           sl_error* err) {
  if (act > SL_ACT_GELU) return fail(err, SL_ERR_UNSUPPORTED, "unknown activation " + std::to_string(act));
  for (uint64_t i = 0; i < n; ++i) {
    const float x = F(g)[i];
    const float a = act == SL_ACT_SILU ? x / (1 + std::exp(-x))
                    : act == SL_ACT_GELU_TANH ? 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)))
                                              : 0.5f * x * (1 + std::erf(x * 0.7071067812f));
    F(out)[i] = a * F(u)[i];
  }
  return SL_OK;
}
sl_status add(sl_backend*, const sl_buffer* a, const sl_buffer* b, sl_buffer* o, uint64_t n, sl_error*) {
  for (uint64_t i = 0; i < n; ++i) F(o)[i] = F(a)[i] + F(b)[i];
  return SL_OK;
}
sl_status mul(sl_backend*, const sl_buffer* a, const sl_buffer* b, sl_buffer* o, uint64_t n, sl_error*) {
  for (uint64_t i = 0; i < n; ++i) F(o)[i] = F(a)[i] * F(b)[i];
  return SL_OK;
}
sl_status scale(sl_backend*, sl_buffer* x, float s, uint64_t n, sl_error*) {
  for (uint64_t i = 0; i < n; ++i) F(x)[i] *= s;
  return SL_OK;
}
sl_status copy(sl_backend*, const sl_buffer* s, uint64_t so, sl_buffer* d, uint64_t dof, uint64_t n, sl_error* err) {
  if (!fits(s->bytes / 4, so, n) || !fits(d->bytes / 4, dof, n)) return fail(err, SL_ERR_INVALID_ARGUMENT, "copy past a buffer's end");
  std::memmove(F(d) + dof, F(s) + so, n * 4);
  return SL_OK;
}
void softmax_row(float* v, uint32_t n) {
  const float m = *std::max_element(v, v + n);
  float sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - m));
  for (uint32_t i = 0; i < n; ++i) v[i] /= sum;
}
sl_status softmax(sl_backend*, sl_buffer* x, uint32_t rows, uint32_t dim, sl_error*) {
  for (uint32_t r = 0; r < rows; ++r) softmax_row(F(x) + std::size_t(r) * dim, dim);
  return SL_OK;
}
sl_status topk(sl_backend*, const sl_buffer* logits, uint32_t rows, uint32_t n_exp, uint32_t k, int softmax_first,
               int normalize, sl_buffer* ids, sl_buffer* weights, sl_error* err) {
  if (k == 0 || k > n_exp) return fail(err, SL_ERR_INVALID_ARGUMENT, "topk: k must be in 1..n_experts");
  std::vector<float> row_v(n_exp);
  std::vector<uint32_t> order(n_exp);
  for (uint32_t r = 0; r < rows; ++r) {
    std::copy_n(F(logits) + std::size_t(r) * n_exp, n_exp, row_v.begin());
    if (softmax_first) softmax_row(row_v.data(), n_exp);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return row_v[a] > row_v[b]; });
    float* w = F(weights) + std::size_t(r) * k;
    for (uint32_t i = 0; i < k; ++i) {
      reinterpret_cast<int32_t*>(ids->data)[std::size_t(r) * k + i] = int32_t(order[i]);
      w[i] = row_v[order[i]];
    }
    if (!softmax_first) softmax_row(w, k);
    if (normalize) {
      const float s = std::accumulate(w, w + k, 0.0f);
      for (uint32_t i = 0; i < k; ++i) w[i] /= s;
    }
  }
  return SL_OK;
}

const sl_backend_api kApi = {sizeof(sl_backend_api), device_count, device_info, create, destroy, get_device_info, supports_op,
                             alloc, wrap_host, free_buffer, upload, download, synchronize, kv_create, kv_destroy,
                             kv_copy_page, begin_batch, embed, rms_norm, layer_norm, matmul, rope, kv_write, attention,
                             gated_activation, add, mul, scale, copy, softmax, topk,
                             nullptr /* gather_rows: optional (ABI 1.1), the host falls back */, nullptr /* scatter_add_rows */,
                             nullptr /* matmul_multi: optional (ABI 1.3), the host falls back */, nullptr /* add_rms_norm */,
                             nullptr /* argmax: optional (ABI 1.4), the host reads logits instead */, nullptr /* embed_device */,
                             nullptr /* download_begin */, nullptr /* download_wait */};

const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_MAJOR, SL_PLUGIN_BACKEND, "example", "0.1.0",
                                          "Example backend: the whole ABI in plain loops on host memory", nullptr, &kApi};

}  // namespace

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &kDescriptor; }
