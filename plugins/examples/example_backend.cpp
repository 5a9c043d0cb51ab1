// Example backend "example": the whole backend ABI (2.0) in one file, on host memory, single-
// threaded, plain loops, one node at a time (no fusion). Float32 weights only — supports_node says
// so, and the host keeps other forms on another backend. Attention decodes the KV rows through the
// codec (works with every codec). Per-layer caches (2.0): each layer's own K/V widths and codecs,
// sliding-window layers' pages from the window table, recurrent layers' state per slot (copied by
// kv_copy_state, read and written by COPY nodes). It reads only the public headers (sluice/*.h), as
// an out-of-tree plugin would. `sluice conformance --backend build/lib/examples/sluice-example-backend.so` checks it.
#include <algorithm>
#include <cmath>
#include <cstddef>
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
  struct Layer {
    sl_kv_layer d{};           // kind, widths, window, state bytes, codecs
    sl_kv_format kf{}, vf{};
    uint64_t page_bytes = 0;   // K rows of every head, then V rows
    uint32_t n_pages = 0;
    std::vector<unsigned char> data;  // pages, or n_state_slots states
  };
  std::vector<Layer> layers;
};
struct sl_backend {
  std::vector<int32_t> positions, slots, table, window_table, state_slots;
  uint32_t max_pages = 0, n_seqs = 0;
  uint64_t tickets = 0;
};

namespace {

sl_status fail(sl_error* err, sl_status s, const std::string& m) {
  std::strncpy(err->message, m.c_str(), SL_ERROR_MESSAGE_SIZE - 1);
  err->message[SL_ERROR_MESSAGE_SIZE - 1] = '\0';
  return s;
}
bool fits(uint64_t size, uint64_t off, uint64_t n) { return off <= size && n <= size - off; }
const float* W(const sl_weight* w) { return reinterpret_cast<const float*>(w->data->data + w->offset); }
bool f32_weight(const sl_weight* w) { return w && w->data && w->bits == 0 && w->dtype == SL_DTYPE_F32; }

uint32_t device_count() { return 1; }
sl_status device_info(uint32_t i, sl_device_info* out, sl_error* err) {
  if (i != 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "the example backend has one device (0)");
  sl_device_info d{};
  d.struct_size = sizeof(d);
  d.abi_version = SL_ABI_VERSION;
  std::strcpy(d.name, "example host device");
  std::strcpy(d.vendor, "example");
  std::strcpy(d.driver, "0.1.0");
  std::strcpy(d.kind, "cpu");
  d.compute_units = 1;
  // No SL_CAP_KV_RECENT_WINDOW: every key is read through the codec.
  d.caps = SL_CAP_UNIFIED | SL_CAP_KV_LAYERS | SL_CAP_KV_WINDOW_PAGES;
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
// Every node has run when graph_compute returns: a download can be done at once.
sl_status download_begin(sl_backend* be, const sl_buffer* s, uint64_t off, void* dst, uint64_t n, uint64_t* ticket, sl_error* err) {
  if (auto st = download(be, s, off, dst, n, err); st != SL_OK) return st;
  *ticket = ++be->tickets;
  return SL_OK;
}
sl_status download_wait(sl_backend* be, uint64_t ticket, sl_error* err) {
  return ticket == 0 || ticket > be->tickets ? fail(err, SL_ERR_INVALID_ARGUMENT, "download_wait: unknown ticket") : SL_OK;
}
sl_status synchronize(sl_backend*, sl_error*) { return SL_OK; }

unsigned char* row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot, bool v) {
  auto& l = c->layers[layer];
  const uint32_t pt = c->layout.page_tokens;
  return l.data.data() + page * l.page_bytes + (v ? uint64_t(l.d.n_kv_heads) * pt * l.kf.row_bytes : 0) +
         (uint64_t(head) * pt + slot) * (v ? l.vf.row_bytes : l.kf.row_bytes);
}
sl_status kv_create(sl_backend*, const sl_kv_layout* l, sl_kv_cache** out, sl_error* err) {
  if (!l || l->page_tokens == 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_create: incomplete layout");
  const bool per_layer = l->struct_size >= offsetof(sl_kv_layout, n_state_slots) + sizeof(uint32_t) && l->layers;
  try {
    auto c = std::make_unique<sl_kv_cache>();
    std::memcpy(&c->layout, l, std::min<std::size_t>(l->struct_size, sizeof(sl_kv_layout)));
    for (uint32_t i = 0; i < l->n_layers; ++i) {
      sl_kv_cache::Layer y;
      if (per_layer) {
        std::memcpy(&y.d, &l->layers[i], std::min<std::size_t>(l->layers[i].struct_size, sizeof(sl_kv_layer)));
      } else {  // every layer full attention with the layout's geometry
        y.d = sl_kv_layer{sizeof(sl_kv_layer), SL_KV_FULL, l->n_kv_heads, l->head_dim, l->head_dim, 0, 0,
                          l->k_api, l->k_codec, l->v_api, l->v_codec};
      }
      const std::string where = "kv_create: layer " + std::to_string(i) + ": ";
      if (y.d.kind == SL_KV_STATE) {
        if (y.d.state_bytes == 0 || y.d.state_bytes % 4 || c->layout.n_state_slots == 0)
          return fail(err, SL_ERR_INVALID_ARGUMENT, where + "a state of a positive multiple of 4 bytes, in state slots");
        y.data.assign(y.d.state_bytes * c->layout.n_state_slots, 0);
      } else if (y.d.kind == SL_KV_FULL || y.d.kind == SL_KV_WINDOW) {
        if (!y.d.k_api || !y.d.k_codec || !y.d.v_api || !y.d.v_codec || !y.d.n_kv_heads || !y.d.k_head_dim || !y.d.v_head_dim ||
            (y.d.kind == SL_KV_WINDOW && !y.d.window))
          return fail(err, SL_ERR_INVALID_ARGUMENT, where + "incomplete");
        y.kf.struct_size = y.vf.struct_size = sizeof(sl_kv_format);
        y.d.k_api->get_format(y.d.k_codec, &y.kf);
        y.d.v_api->get_format(y.d.v_codec, &y.vf);
        if (y.kf.head_dim != y.d.k_head_dim || y.vf.head_dim != y.d.v_head_dim || !y.kf.row_bytes || !y.vf.row_bytes)
          return fail(err, SL_ERR_INVALID_ARGUMENT, where + "a codec of another width");
        y.page_bytes = uint64_t(y.d.n_kv_heads) * l->page_tokens * (y.kf.row_bytes + y.vf.row_bytes);
        y.n_pages = y.d.kind == SL_KV_FULL ? l->n_pages : c->layout.n_window_pages;
        y.data.assign(y.page_bytes * y.n_pages, 0);
      } else {
        return fail(err, SL_ERR_INVALID_ARGUMENT, where + "unknown kind");
      }
      c->layers.push_back(std::move(y));
    }
    c->layout.layers = nullptr;  // the host's array is not ours to keep
    *out = c.release();
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return fail(err, SL_ERR_OUT_OF_MEMORY, "kv_create: out of memory");
  }
}
void kv_destroy(sl_backend*, sl_kv_cache* c) { delete c; }
sl_status kv_copy_page(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  for (auto& l : c->layers)
    if (l.d.kind == SL_KV_FULL) std::memmove(l.data.data() + dst * l.page_bytes, l.data.data() + src * l.page_bytes, l.page_bytes);
  return SL_OK;
}
sl_status kv_copy_state(sl_backend*, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_state_slots || dst >= c->layout.n_state_slots) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_state: slot out of range");
  for (auto& l : c->layers)
    if (l.d.kind == SL_KV_STATE) std::memmove(l.data.data() + dst * l.d.state_bytes, l.data.data() + src * l.d.state_bytes, l.d.state_bytes);
  return SL_OK;
}
sl_status kv_clear_state(sl_backend*, sl_kv_cache* c, uint32_t slot, sl_error* err) {
  if (slot >= c->layout.n_state_slots) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_clear_state: slot out of range");
  for (auto& l : c->layers)
    if (l.d.kind == SL_KV_STATE) std::memset(l.data.data() + slot * l.d.state_bytes, 0, l.d.state_bytes);
  return SL_OK;
}
sl_status take_batch(sl_backend* be, const sl_batch* b, sl_error* err) {
  if (!b || b->n_tokens == 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "empty batch");
  const std::size_t table = std::size_t(b->n_seqs) * b->max_pages;
  be->positions.assign(b->positions, b->positions + b->n_tokens);
  be->slots.assign(b->seq_slots, b->seq_slots + b->n_tokens);
  be->table.assign(b->page_table, b->page_table + table);
  const bool newer = b->struct_size >= offsetof(sl_batch, state_slots) + sizeof(void*);  // 2.0's window table and state slots
  if (newer && b->window_table)
    be->window_table.assign(b->window_table, b->window_table + table);
  else
    be->window_table.clear();
  if (newer && b->state_slots)
    be->state_slots.assign(b->state_slots, b->state_slots + b->n_seqs);
  else
    be->state_slots.clear();
  be->max_pages = b->max_pages;
  be->n_seqs = b->n_seqs;
  for (uint32_t i = 0; i < b->n_tokens; ++i)
    if (be->slots[i] < 0 || uint32_t(be->slots[i]) >= b->n_seqs || be->positions[i] < 0)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(i) + " has a bad sequence or position");
  return SL_OK;
}
// The page holding a token's position in a layer (its table: the window table for a WINDOW layer),
// or -1 when the table does not cover it.
int64_t page_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer, std::size_t t, int32_t pos) {
  const auto& l = c->layers[layer];
  const std::vector<int32_t>& table = l.d.kind == SL_KV_WINDOW ? be->window_table : be->table;
  const uint32_t p = uint32_t(pos) / c->layout.page_tokens;
  const std::size_t at = std::size_t(be->slots[t]) * be->max_pages + p;
  if (p >= be->max_pages || at >= table.size()) return -1;
  const int32_t page = table[at];
  return page < 0 || uint32_t(page) >= l.n_pages ? -1 : page;
}
// Sequence `seq`'s state in a STATE layer, or null.
unsigned char* state_of(const sl_backend* be, sl_kv_cache* c, uint32_t layer, uint32_t seq) {
  if (layer >= c->layers.size() || c->layers[layer].d.kind != SL_KV_STATE || seq >= be->state_slots.size()) return nullptr;
  const int32_t slot = be->state_slots[seq];
  if (slot < 0 || uint32_t(slot) >= c->layout.n_state_slots) return nullptr;
  return c->layers[layer].data.data() + uint64_t(slot) * c->layers[layer].d.state_bytes;
}

// ---- the ops, one node at a time ---------------------------------------------------------------
// A tensor's values: BUFFER tensors at their buffer's offset, HOST tensors where the host put them.
float* F(const sl_tensor* t) {
  return t->kind == SL_TENSOR_HOST ? static_cast<float*>(const_cast<void*>(t->host)) : reinterpret_cast<float*>(t->buffer->data + t->offset);
}
int32_t* I(const sl_tensor* t) { return reinterpret_cast<int32_t*>(F(t)); }
uint64_t count(const sl_tensor* t) { return uint64_t(t->rows) * t->cols; }

struct Node {  // a node's tensors, looked up once
  const sl_node* n;
  const sl_tensor* in[SL_NODE_MAX_INPUTS]{};
  const sl_tensor* out[SL_NODE_MAX_OUTPUTS]{};
};

sl_status embed(const Node& n, sl_error* err) {
  const sl_weight* t = n.in[0]->weight;
  const sl_tensor* ids = n.in[1];
  if (!f32_weight(t)) return fail(err, SL_ERR_UNSUPPORTED, "embed: float32 tables only");
  for (uint64_t i = 0; i < count(ids); ++i) {
    const int32_t id = I(ids)[i];
    float* row = F(n.out[0]) + i * t->cols;
    if (id >= 0 && uint32_t(id) < t->rows)
      std::memcpy(row, W(t) + std::size_t(id) * t->cols, t->cols * 4);
    else if (ids->kind == SL_TENSOR_HOST)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "token id " + std::to_string(id) + " outside the vocabulary");
    else
      std::fill(row, row + t->cols, 0.0f);  // ids on the device cannot be refused
  }
  return SL_OK;
}
sl_status rms_norm(const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_norm_params*>(n.n->params);
  const sl_weight* w = n.in[1]->weight;
  const uint32_t rows = n.in[0]->rows, dim = n.in[0]->cols;
  if (!f32_weight(w) || w->cols != dim) return fail(err, SL_ERR_UNSUPPORTED, "rms_norm: float32 weights only");
  for (uint32_t r = 0; r < rows; ++r) {
    const float* xr = F(n.in[0]) + std::size_t(r) * dim;
    float ss = 0;
    for (uint32_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / dim + p->eps);
    float* o = F(n.out[0]) + std::size_t(r) * dim;  // may be x: each value read before it is written
    for (uint32_t i = 0; i < dim; ++i) o[i] = (W(w)[i] + p->weight_offset) * (xr[i] * inv);
  }
  return SL_OK;
}
sl_status matmul(const Node& n, sl_error* err) {
  const sl_weight* w = n.in[1]->weight;
  const sl_weight* bias = n.in[2] ? n.in[2]->weight : nullptr;
  if (!f32_weight(w) || (bias && !f32_weight(bias))) return fail(err, SL_ERR_UNSUPPORTED, "matmul: float32 weights only");
  const float* x = F(n.in[0]);
  float* out = F(n.out[0]);
  for (uint32_t t = 0; t < n.in[0]->rows; ++t)
    for (uint32_t r = 0; r < w->rows; ++r) {
      float s = bias ? W(bias)[r] : 0.0f;
      for (uint32_t c = 0; c < w->cols; ++c) s += x[std::size_t(t) * w->cols + c] * W(w)[std::size_t(r) * w->cols + c];
      out[std::size_t(t) * w->rows + r] = s;
    }
  return SL_OK;
}
// 2.4: per head h, x's head times rows h * head_rows + row_offset ... of w, transposed as matmul's or not.
sl_status head_matmul(const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_head_matmul_params*>(n.n->params);
  const sl_weight* w = n.in[1]->weight;
  if (!f32_weight(w)) return fail(err, SL_ERR_UNSUPPORTED, "head_matmul: float32 weights only");
  const uint32_t in_w = p->transpose ? p->slice_rows : w->cols, out_w = p->transpose ? w->cols : p->slice_rows;
  if (p->n_heads == 0 || p->slice_rows == 0 || uint64_t(p->row_offset) + p->slice_rows > p->head_rows ||
      uint64_t(p->n_heads) * p->head_rows != w->rows || n.in[0]->cols != p->n_heads * in_w || n.out[0]->cols != p->n_heads * out_w ||
      n.out[0]->rows != n.in[0]->rows)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "head_matmul: shapes do not fit");
  for (uint32_t t = 0; t < n.in[0]->rows; ++t)
    for (uint32_t h = 0; h < p->n_heads; ++h) {
      const float* x = F(n.in[0]) + (std::size_t(t) * p->n_heads + h) * in_w;
      float* out = F(n.out[0]) + (std::size_t(t) * p->n_heads + h) * out_w;
      for (uint32_t o = 0; o < out_w; ++o) {
        float s = 0.0f;
        for (uint32_t i = 0; i < in_w; ++i) {
          const uint32_t r = h * p->head_rows + p->row_offset + (p->transpose ? i : o), c = p->transpose ? o : i;
          s += x[i] * W(w)[std::size_t(r) * w->cols + c];
        }
        out[o] = s;
      }
    }
  return SL_OK;
}
sl_status rope(const sl_backend* be, const Node& n, sl_error*) {
  const auto* p = static_cast<const sl_rope_params*>(n.n->params);
  const uint32_t heads = p->n_heads, dim = p->head_dim, rot = p->rotary_dim;
  for (std::size_t t = 0; t < be->positions.size(); ++t)
    for (uint32_t h = 0; h < heads; ++h) {
      float* v = F(n.in[0]) + (t * heads + h) * dim;
      for (uint32_t i = 0; i < rot / 2; ++i) {
        const float angle = float(be->positions[t]) * p->inv_freq[i];
        const float c = std::cos(angle) * p->attention_factor, s = std::sin(angle) * p->attention_factor;
        const uint32_t a = p->style == SL_ROPE_NEOX ? i : 2 * i, b = p->style == SL_ROPE_NEOX ? i + rot / 2 : 2 * i + 1;
        const float va = v[a], vb = v[b];
        v[a] = va * c - vb * s;
        v[b] = vb * c + va * s;
      }
    }
  return SL_OK;
}
sl_status kv_write(const sl_backend* be, sl_kv_cache* c, const Node& n, sl_error* err) {
  const uint32_t layer = static_cast<const sl_kv_params*>(n.n->params)->layer, pt = c->layout.page_tokens;
  if (layer >= c->layers.size() || c->layers[layer].d.kind == SL_KV_STATE)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_write: no K/V layer " + std::to_string(layer));
  const auto& l = c->layers[layer].d;
  if (n.in[0]->cols != l.n_kv_heads * l.k_head_dim || n.in[1]->cols != l.n_kv_heads * l.v_head_dim)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_write: K and V are not the layer's widths");
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const int64_t page = page_of(be, c, layer, t, be->positions[t]);
    if (page < 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "kv_write: position outside the page table");
    const uint32_t slot = uint32_t(be->positions[t]) % pt;
    for (uint32_t h = 0; h < l.n_kv_heads; ++h) {
      const float* k = F(n.in[0]) + (t * l.n_kv_heads + h) * l.k_head_dim;
      const float* v = F(n.in[1]) + (t * l.n_kv_heads + h) * l.v_head_dim;
      if (auto s = l.k_api->encode(l.k_codec, k, 1, row(c, layer, uint32_t(page), h, slot, false), err); s != SL_OK) return s;
      if (auto s = l.v_api->encode(l.v_codec, v, 1, row(c, layer, uint32_t(page), h, slot, true), err); s != SL_OK) return s;
    }
  }
  return SL_OK;
}
sl_status attention(const sl_backend* be, sl_kv_cache* c, const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_attention_params*>(n.n->params);
  const float* sinks = n.in[1] ? F(n.in[1]) : nullptr;
  if (p->layer >= c->layers.size() || c->layers[p->layer].d.kind == SL_KV_STATE)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: no K/V layer " + std::to_string(p->layer));
  const auto& l = c->layers[p->layer].d;
  const bool has_v = p->struct_size >= offsetof(sl_attention_params, v_head_dim) + sizeof(uint32_t) && p->v_head_dim;
  const uint32_t D = p->head_dim, DV = has_v ? p->v_head_dim : D, pt = c->layout.page_tokens;
  if (p->n_kv_heads != l.n_kv_heads || D != l.k_head_dim || DV != l.v_head_dim || p->n_heads % p->n_kv_heads)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: head shape does not match the layer's");
  if (l.kind == SL_KV_WINDOW && (p->window == 0 || p->window > l.window))
    return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: the layer keeps a shorter window than the node reads");
  const uint32_t group = p->n_heads / p->n_kv_heads;
  std::vector<float> k(D), v(DV), scores;
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const int32_t pos = be->positions[t], lo = p->window ? std::max<int32_t>(0, pos - int32_t(p->window) + 1) : 0;
    for (int32_t j = lo; j <= pos; ++j)
      if (page_of(be, c, p->layer, t, j) < 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "attention: position outside the page table");
    for (uint32_t h = 0; h < p->n_heads; ++h) {
      const float* qh = F(n.in[0]) + (t * p->n_heads + h) * D;
      float* o = F(n.out[0]) + (t * p->n_heads + h) * DV;
      scores.assign(std::size_t(pos - lo + 1), 0.0f);
      float m = sinks ? sinks[h] : -INFINITY;
      for (int32_t j = lo; j <= pos; ++j) {
        l.k_api->decode(l.k_codec, row(c, p->layer, uint32_t(page_of(be, c, p->layer, t, j)), h / group, uint32_t(j) % pt, false), 1,
                        k.data(), err);
        float s = std::inner_product(qh, qh + D, k.begin(), 0.0f) * p->scale;
        if (p->softcap > 0) s = std::tanh(s / p->softcap) * p->softcap;
        m = std::max(m, scores[j - lo] = s);
      }
      float sum = sinks ? std::exp(sinks[h] - m) : 0.0f;
      for (auto& s : scores) sum += (s = std::exp(s - m));
      std::fill(o, o + DV, 0.0f);
      for (int32_t j = lo; j <= pos; ++j) {
        l.v_api->decode(l.v_codec, row(c, p->layer, uint32_t(page_of(be, c, p->layer, t, j)), h / group, uint32_t(j) % pt, true), 1,
                        v.data(), err);
        for (uint32_t d = 0; d < DV; ++d) o[d] += scores[j - lo] / sum * v[d];
      }
    }
  }
  return SL_OK;
}
// COPY with a state on one side: a row a sequence of the step, from byte `offset` of its state.
sl_status copy_state(const sl_backend* be, sl_kv_cache* c, const Node& n, sl_error* err) {
  const sl_tensor* x = n.in[0];
  const sl_tensor* o = n.out[0];
  const sl_tensor* st = x->kind == SL_TENSOR_STATE ? x : o;
  if (!c || (x->kind == SL_TENSOR_STATE) == (o->kind == SL_TENSOR_STATE) || st->rows != be->n_seqs || st->dtype != SL_DTYPE_F32)
    return fail(err, SL_ERR_INVALID_ARGUMENT, "copy: one state and one activation, a row a sequence, in a step with a cache");
  const uint64_t bytes = uint64_t(st->cols) * 4;
  for (uint32_t i = 0; i < st->rows; ++i) {
    unsigned char* s = state_of(be, c, st->state_layer, i);
    if (!s || !fits(c->layers[st->state_layer].d.state_bytes, st->offset, bytes))
      return fail(err, SL_ERR_INVALID_ARGUMENT, "copy: no such state (layer, slot or range)");
    if (x->kind == SL_TENSOR_STATE)
      std::memcpy(F(o) + i * st->cols, s + st->offset, bytes);
    else
      std::memcpy(s + st->offset, F(x) + i * st->cols, bytes);
  }
  return SL_OK;
}
// 2.2: the causal convolution, a channel's window of K - 1 inputs in the state, token by token.
sl_status causal_conv(const sl_backend* be, sl_kv_cache* c, const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_conv_params*>(n.n->params);
  const sl_weight* w = n.in[1]->weight;
  const uint32_t C = w->rows, K = w->cols;
  const sl_tensor* win = n.out[1];
  if (!c || !win || win->kind != SL_TENSOR_STATE || win->rows != be->n_seqs || K < 2 || uint64_t(win->cols) != uint64_t(K - 1) * C ||
      n.in[0]->cols != C || n.out[0]->cols != C || n.in[0]->rows != be->positions.size())
    return fail(err, SL_ERR_INVALID_ARGUMENT, "causal_conv: x [tokens, C], w [C, K], a window of (K - 1) * C a sequence");
  for (uint32_t s = 0; s < be->n_seqs; ++s) {
    unsigned char* state = state_of(be, c, win->state_layer, s);
    if (!state || !fits(c->layers[win->state_layer].d.state_bytes, win->offset, uint64_t(win->cols) * 4))
      return fail(err, SL_ERR_INVALID_ARGUMENT, "causal_conv: no such state");
    float* hist = reinterpret_cast<float*>(state + win->offset);  // [K - 1][C], oldest first
    for (uint32_t t = 0; t < be->positions.size(); ++t) {
      if (be->slots[t] != int32_t(s)) continue;
      for (uint32_t ch = 0; ch < C; ++ch) {
        const float x = F(n.in[0])[std::size_t(t) * C + ch];
        float acc = W(w)[std::size_t(ch) * K + K - 1] * x;
        for (uint32_t k = 0; k + 1 < K; ++k) acc += W(w)[std::size_t(ch) * K + k] * hist[std::size_t(k) * C + ch];
        for (uint32_t k = 0; k + 2 < K; ++k) hist[std::size_t(k) * C + ch] = hist[std::size_t(k + 1) * C + ch];
        hist[std::size_t(K - 2) * C + ch] = x;
        F(n.out[0])[std::size_t(t) * C + ch] = p->activation == SL_ACT_SILU ? acc / (1 + std::exp(-acc)) : acc;
      }
    }
  }
  return SL_OK;
}
// 2.2: the gated delta rule, each value head's [k_head_dim, v_head_dim] state in the sequence's state.
sl_status gated_delta(const sl_backend* be, sl_kv_cache* c, const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_gated_delta_params*>(n.n->params);
  const uint32_t NK = p->n_k_heads, NV = p->n_v_heads, DK = p->k_head_dim, DV = p->v_head_dim;
  const sl_tensor* st = n.out[1];
  const uint64_t width = 2ull * NK * DK + uint64_t(NV) * DV;
  if (!c || !st || st->kind != SL_TENSOR_STATE || st->rows != be->n_seqs || NK == 0 || NV % NK || n.in[0]->cols != width ||
      count(n.in[1]) != uint64_t(n.in[0]->rows) * NV || count(n.in[2]) != count(n.in[1]) || count(n.out[0]) != uint64_t(n.in[0]->rows) * NV * DV ||
      n.in[3]->weight->cols != NV || uint64_t(st->cols) != uint64_t(NV) * DK * DV || n.in[0]->rows != be->positions.size())
    return fail(err, SL_ERR_INVALID_ARGUMENT, "gated_delta: shapes do not fit the heads");
  std::vector<float> q(DK), k(DK), kv(DV);
  for (uint32_t s = 0; s < be->n_seqs; ++s) {
    unsigned char* state = state_of(be, c, st->state_layer, s);
    if (!state || !fits(c->layers[st->state_layer].d.state_bytes, st->offset, uint64_t(st->cols) * 4))
      return fail(err, SL_ERR_INVALID_ARGUMENT, "gated_delta: no such state");
    for (uint32_t t = 0; t < be->positions.size(); ++t) {
      if (be->slots[t] != int32_t(s)) continue;
      const float* row = F(n.in[0]) + t * width;
      for (uint32_t h = 0; h < NV; ++h) {
        const uint32_t kh = h / (NV / NK);
        float qq = 0, kk = 0;
        for (uint32_t i = 0; i < DK; ++i) {
          qq += row[kh * DK + i] * row[kh * DK + i];
          kk += row[NK * DK + kh * DK + i] * row[NK * DK + kh * DK + i];
        }
        for (uint32_t i = 0; i < DK; ++i) {
          q[i] = row[kh * DK + i] / std::sqrt(qq + p->l2_eps) * p->scale;
          k[i] = row[NK * DK + kh * DK + i] / std::sqrt(kk + p->l2_eps);
        }
        const float a = F(n.in[1])[std::size_t(t) * NV + h];
        const float softplus = a > 20 ? a : std::log1p(std::exp(a));
        const float decay = std::exp(-std::exp(W(n.in[3]->weight)[h]) * softplus);
        const float beta = 1 / (1 + std::exp(-F(n.in[2])[std::size_t(t) * NV + h]));
        float* S = reinterpret_cast<float*>(state + st->offset) + std::size_t(h) * DK * DV;
        std::fill(kv.begin(), kv.end(), 0.0f);
        for (uint32_t i = 0; i < DK; ++i)
          for (uint32_t j = 0; j < DV; ++j) kv[j] += (S[i * DV + j] *= decay) * k[i];
        float* o = F(n.out[0]) + std::size_t(t) * NV * DV + std::size_t(h) * DV;
        for (uint32_t j = 0; j < DV; ++j) {
          const float delta = (row[2 * NK * DK + h * DV + j] - kv[j]) * beta;
          o[j] = 0;
          for (uint32_t i = 0; i < DK; ++i) o[j] += (S[i * DV + j] += k[i] * delta) * q[i];
        }
      }
    }
  }
  return SL_OK;
}
sl_status glu(const Node& n, sl_error* err) {
  const auto* p = static_cast<const sl_glu_params*>(n.n->params);
  const uint32_t act = p->activation;
  if (act > SL_ACT_SIGMOID) return fail(err, SL_ERR_UNSUPPORTED, "unknown activation " + std::to_string(act));
  const float *g = F(n.in[0]), *u = F(n.in[1]);
  float* out = F(n.out[0]);
  if (act == SL_ACT_SWIGLU_CLAMPED) {  // 2.2: alpha and limit follow activation
    if (p->struct_size < offsetof(sl_glu_params, limit) + sizeof(float))
      return fail(err, SL_ERR_INVALID_ARGUMENT, "the clamped SwiGLU needs alpha and limit");
    for (uint64_t i = 0; i < count(n.out[0]); ++i) {
      const float x = std::min(g[i], p->limit), y = std::clamp(u[i], -p->limit, p->limit);
      out[i] = x / (1 + std::exp(-p->alpha * x)) * (y + 1);
    }
    return SL_OK;
  }
  for (uint64_t i = 0; i < count(n.out[0]); ++i) {
    const float x = g[i];
    const float a = act == SL_ACT_SILU      ? x / (1 + std::exp(-x))
                    : act == SL_ACT_SIGMOID ? 1 / (1 + std::exp(-x))
                    : act == SL_ACT_GELU_TANH ? 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)))
                                              : 0.5f * x * (1 + std::erf(x * 0.7071067812f));
    out[i] = a * u[i];
  }
  return SL_OK;
}
sl_status get_rows(const Node& n, sl_error* err) {
  const uint32_t dim = n.in[0]->cols;
  for (uint64_t i = 0; i < count(n.in[1]); ++i) {
    const int32_t r = I(n.in[1])[i];
    if (r < 0 || uint32_t(r) >= n.in[0]->rows) return fail(err, SL_ERR_INVALID_ARGUMENT, "get_rows: row " + std::to_string(r) + " out of range");
    std::memcpy(F(n.out[0]) + i * dim, F(n.in[0]) + std::size_t(r) * dim, dim * 4);
  }
  return SL_OK;
}
sl_status scatter_add_rows(const Node& n, sl_error* err) {
  const uint32_t dim = n.in[0]->cols;
  for (uint64_t i = 0; i < count(n.in[1]); ++i) {
    const int32_t r = I(n.in[1])[i];
    if (r < 0 || uint32_t(r) >= n.out[0]->rows)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: row " + std::to_string(r) + " out of range");
    for (uint32_t c = 0; c < dim; ++c) F(n.out[0])[std::size_t(r) * dim + c] += F(n.in[2])[i] * F(n.in[0])[i * dim + c];
  }
  return SL_OK;
}
sl_status argmax(const Node& n, sl_error*) {
  const uint32_t dim = n.in[0]->cols;
  for (uint32_t r = 0; r < n.in[0]->rows; ++r) {
    const float* row_v = F(n.in[0]) + std::size_t(r) * dim;
    int32_t best = -1;
    for (uint32_t c = 0; c < dim; ++c)
      if (!std::isnan(row_v[c]) && (best < 0 || row_v[c] > row_v[best])) best = int32_t(c);
    I(n.out[0])[r] = std::max(best, 0);
  }
  return SL_OK;
}

// Ops that read or write sequences' states (STATE tensors): COPY, and 2.2's recurrent ops.
bool takes_states(uint32_t op) { return op == SL_OP_COPY || op == SL_OP_CAUSAL_CONV || op == SL_OP_GATED_DELTA; }

// What a node needs before it runs: its tensors exist, lie inside their buffers, and have the
// shapes its op reads (checked here only as far as this backend's loops depend on them).
sl_status look_up(const sl_graph* g, const sl_node* node, Node& n, sl_error* err) {
  n.n = node;
  auto fetch = [&](uint32_t index, const sl_tensor*& t) -> bool {
    if (index == SL_NO_TENSOR) return true;
    if (index >= g->n_tensors) return false;
    t = &g->tensors[index];
    if (t->kind == SL_TENSOR_BUFFER)
      return t->buffer && fits(t->buffer->bytes, t->offset, count(t) * (t->dtype == SL_DTYPE_F16 || t->dtype == SL_DTYPE_BF16 ? 2 : 4));
    if (t->kind == SL_TENSOR_WEIGHT) return t->weight != nullptr;
    if (t->kind == SL_TENSOR_STATE) return t->struct_size >= offsetof(sl_tensor, state_layer) + sizeof(uint32_t);
    return t->host != nullptr;
  };
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i)
    if (!fetch(node->inputs[i], n.in[i])) return fail(err, SL_ERR_INVALID_ARGUMENT, "a node's input lies outside the graph or its buffer");
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i)
    if (!fetch(node->outputs[i], n.out[i])) return fail(err, SL_ERR_INVALID_ARGUMENT, "a node's output lies outside the graph or its buffer");
  const bool needs_out = node->op != SL_OP_KV_WRITE;
  if (!n.in[0] || (needs_out && !n.out[0])) return fail(err, SL_ERR_INVALID_ARGUMENT, "a node lacks its tensors");
  switch (node->op) {
    case SL_OP_EMBED:
    case SL_OP_RMS_NORM:
    case SL_OP_MATMUL:
    case SL_OP_HEAD_MATMUL:
    case SL_OP_KV_WRITE:
    case SL_OP_GLU:
    case SL_OP_ADD:
    case SL_OP_GET_ROWS:
      if (!n.in[1]) return fail(err, SL_ERR_INVALID_ARGUMENT, "a node lacks its second input");
      break;
    case SL_OP_SCATTER_ADD_ROWS:
      if (!n.in[1] || !n.in[2]) return fail(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows lacks rows or weights");
      break;
    case SL_OP_CAUSAL_CONV:
      if (!n.in[1] || n.in[1]->kind != SL_TENSOR_WEIGHT || !n.out[1]) return fail(err, SL_ERR_INVALID_ARGUMENT, "causal_conv lacks its taps or window");
      break;
    case SL_OP_GATED_DELTA:
      if (!n.in[1] || !n.in[2] || !n.in[3] || n.in[3]->kind != SL_TENSOR_WEIGHT || !n.out[1])
        return fail(err, SL_ERR_INVALID_ARGUMENT, "gated_delta lacks a, b, A_log or its state");
      break;
    default:
      break;
  }
  const bool has_params = node->op == SL_OP_RMS_NORM || node->op == SL_OP_ROPE || node->op == SL_OP_KV_WRITE ||
                          node->op == SL_OP_ATTENTION || node->op == SL_OP_GLU || node->op == SL_OP_SCALE ||
                          node->op == SL_OP_CAUSAL_CONV || node->op == SL_OP_GATED_DELTA || node->op == SL_OP_COPY_COLUMNS ||
                          node->op == SL_OP_HEAD_MATMUL;
  if (has_params && !node->params) return fail(err, SL_ERR_INVALID_ARGUMENT, "a node lacks its parameters");
  if (node->op == SL_OP_MATMUL &&
      (n.in[0]->cols != n.in[1]->weight->cols || n.out[0]->cols != n.in[1]->weight->rows || n.out[0]->rows != n.in[0]->rows))
    return fail(err, SL_ERR_INVALID_ARGUMENT, "matmul: shapes do not fit");
  if ((node->op == SL_OP_ADD || node->op == SL_OP_GLU || node->op == SL_OP_COPY || node->op == SL_OP_SCALE) && count(n.out[0]) > count(n.in[0]))
    return fail(err, SL_ERR_INVALID_ARGUMENT, "elementwise op: output larger than its input");
  if (node->op == SL_OP_COPY_COLUMNS) {
    const auto* p = static_cast<const sl_copy_columns_params*>(node->params);
    if (p->repeat == 0 || uint64_t(n.in[0]->rows) * p->repeat != n.out[0]->rows || uint64_t(p->src_col) + p->width > n.in[0]->cols ||
        uint64_t(p->dst_col) + p->width > n.out[0]->cols)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "copy_columns: columns or rows do not fit");
  }
  for (const sl_tensor* t : {n.in[0], n.in[1], n.in[2], n.in[3], n.out[0], n.out[1]})
    if (t && t->kind == SL_TENSOR_STATE && !takes_states(node->op)) return fail(err, SL_ERR_UNSUPPORTED, "a state read by an op that reads none");
  return SL_OK;
}

int supports_node(const sl_backend*, const sl_node_query* q) {
  if (!q || !q->node || q->node->op == SL_OP_NONE || q->node->op > SL_OP_HEAD_MATMUL) return 0;
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i) {
    const uint32_t index = q->node->inputs[i];
    if (index == SL_NO_TENSOR || !q->tensors || index >= q->n_tensors) continue;
    const sl_tensor& t = q->tensors[index];
    if (t.kind == SL_TENSOR_WEIGHT && (!t.weight || t.weight->bits != 0 || t.weight->dtype != SL_DTYPE_F32)) return 0;
    if (t.kind != SL_TENSOR_WEIGHT && t.dtype != SL_DTYPE_F32 && t.dtype != SL_DTYPE_I32) return 0;
    if (t.kind == SL_TENSOR_STATE && !takes_states(q->node->op)) return 0;
  }
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i) {
    const uint32_t index = q->node->outputs[i];
    if (index != SL_NO_TENSOR && q->tensors && index < q->n_tensors && q->tensors[index].kind == SL_TENSOR_STATE && !takes_states(q->node->op))
      return 0;
  }
  if (q->node->op == SL_OP_GLU && (!q->node->params || static_cast<const sl_glu_params*>(q->node->params)->activation > SL_ACT_SIGMOID))
    return 0;
  return 1;
}

sl_status graph_compute(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  if (!g || !step) return fail(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: no graph or step");
  if (auto s = take_batch(be, step->batch, err); s != SL_OK) return s;
  for (uint32_t i = 0; i < g->n_nodes; ++i) {
    Node n;
    if (auto s = look_up(g, &g->nodes[i], n, err); s != SL_OK) return s;
    const uint32_t op = g->nodes[i].op;
    if ((op == SL_OP_KV_WRITE || op == SL_OP_ATTENTION) && !step->cache)
      return fail(err, SL_ERR_INVALID_ARGUMENT, "a KV node in a step without a cache");
    sl_status s = SL_OK;
    switch (op) {
      case SL_OP_EMBED: s = embed(n, err); break;
      case SL_OP_RMS_NORM: s = rms_norm(n, err); break;
      case SL_OP_MATMUL: s = matmul(n, err); break;
      case SL_OP_HEAD_MATMUL: s = head_matmul(n, err); break;  // 2.4
      case SL_OP_ROPE: s = rope(be, n, err); break;
      case SL_OP_KV_WRITE: s = kv_write(be, step->cache, n, err); break;
      case SL_OP_ATTENTION: s = attention(be, step->cache, n, err); break;
      case SL_OP_GLU: s = glu(n, err); break;
      case SL_OP_ADD:
        for (uint64_t k = 0; k < count(n.out[0]); ++k) F(n.out[0])[k] = F(n.in[0])[k] + F(n.in[1])[k];
        break;
      case SL_OP_COPY:
        if (n.in[0]->kind == SL_TENSOR_STATE || n.out[0]->kind == SL_TENSOR_STATE)
          s = copy_state(be, step->cache, n, err);
        else
          std::memmove(F(n.out[0]), F(n.in[0]), count(n.out[0]) * 4);
        break;
      case SL_OP_GET_ROWS: s = get_rows(n, err); break;
      case SL_OP_SCATTER_ADD_ROWS: s = scatter_add_rows(n, err); break;
      case SL_OP_ARGMAX: s = argmax(n, err); break;
      case SL_OP_CAUSAL_CONV: s = causal_conv(be, step->cache, n, err); break;  // 2.2
      case SL_OP_GATED_DELTA: s = gated_delta(be, step->cache, n, err); break;  // 2.2
      case SL_OP_SCALE: {  // 2.1
        const auto* p = static_cast<const sl_scale_params*>(g->nodes[i].params);
        for (uint64_t k = 0; k < count(n.out[0]); ++k) {
          const float v = F(n.in[0])[k] * p->scale;
          F(n.out[0])[k] = p->softcap > 0 ? std::tanh(v / p->softcap) * p->softcap : v;
        }
        break;
      }
      case SL_OP_COPY_COLUMNS: {  // 2.2
        const auto* p = static_cast<const sl_copy_columns_params*>(g->nodes[i].params);
        for (uint32_t r = 0; r < n.out[0]->rows; ++r)
          for (uint32_t c = 0; c < p->width; ++c)
            F(n.out[0])[uint64_t(r) * n.out[0]->cols + p->dst_col + c] = F(n.in[0])[uint64_t(r / p->repeat) * n.in[0]->cols + p->src_col + c];
        break;
      }
      default: s = fail(err, SL_ERR_UNSUPPORTED, "op " + std::to_string(op) + " is not known to the example backend");
    }
    if (s != SL_OK) return s;
  }
  return SL_OK;
}

const sl_backend_api kApi = {sizeof(sl_backend_api), SL_ABI_VERSION, device_count, device_info, create, destroy, get_device_info,
                             alloc, wrap_host, free_buffer, upload, download, download_begin, download_wait, synchronize,
                             kv_create, kv_destroy, kv_copy_page, supports_node, graph_compute,
                             nullptr, nullptr, nullptr /* plans: optional; nothing to record for plain loops */,
                             kv_copy_state, kv_clear_state};

const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_BACKEND, "example", "0.1.0",
                                          "Example backend: the whole ABI in plain loops on host memory", nullptr, &kApi};

}  // namespace

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &kDescriptor; }
