// Elementwise, normalisation, rotary, softmax, routing and embedding ops of the OpenCL backend.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cl_backend.h"

namespace sluice::ocl {

bool weight_form_supported(uint32_t dtype, uint32_t bits) {
  if (bits == 0) return dtype == SL_DTYPE_F32 || dtype == SL_DTYPE_F16 || dtype == SL_DTYPE_BF16;
  return dtype == SL_DTYPE_U32 && bits >= 1 && bits <= 8;
}

uint64_t weight_bytes(const sl_weight* w) {
  const uint64_t n = static_cast<uint64_t>(w->rows) * w->cols;
  if (w->bits) return n * w->bits / 8;
  return n * (w->dtype == SL_DTYPE_F32 ? 4 : 2);
}

DevPtr vector_weight(sl_backend* be, const sl_weight* w, uint64_t n) {
  const uint64_t bytes = n * (w->dtype == SL_DTYPE_F32 ? 4 : 2);
  return read_range(be, w->data, w->offset, bytes, w->dtype == SL_DTYPE_F32 ? 4 : 2);
}

namespace {

constexpr size_t kLocal = 64;

sl_status bad_weight(sl_error* err, const char* op) {
  return set_error(err, SL_ERR_UNSUPPORTED, std::string(op) + ": unsupported weight form on the OpenCL backend");
}

bool float_buffer_ok(const sl_buffer* b, uint64_t n) { return b && n <= b->bytes / 4; }

sl_status too_small(sl_error* err, const char* op) {
  return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": buffer too small for n values");
}

}  // namespace

namespace {
// The embedding lookup of n ids read from the device (ids from element ids_off): embed's and
// embed_device's launch.
sl_status embed_launch(sl_backend* be, const sl_weight* table, const cl::Buffer& ids, uint64_t ids_off, uint32_t n, sl_buffer* out,
                       sl_error* err) {
  cl::Kernel* k = nullptr;
  cl_uint a = 0;
  if (table->bits == 0) {
    const DevPtr t = read_range(be, table->data, table->offset, weight_bytes(table), table->dtype == SL_DTYPE_F32 ? 4 : 2);
    k = &kernel(be, "ops", "embed_rows");
    k->setArg(a++, t.buffer);
    k->setArg(a++, static_cast<cl_ulong>(t.offset));
    k->setArg(a++, static_cast<cl_uint>(table->dtype));
  } else {
    if (table->group_size == 0 || table->cols % table->group_size || (uint64_t(table->cols) * table->bits) % 32)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "embed: quantized rows must be whole groups and words");
    const uint64_t groups = uint64_t(table->rows) * (table->cols / table->group_size);
    const uint64_t sb = table->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
    const DevPtr words = read_range(be, table->data, table->offset, weight_bytes(table), 4);
    const DevPtr scales = read_range(be, table->scales, table->scales_offset, groups * sb, sb);
    const DevPtr biases = read_range(be, table->biases, table->biases_offset, groups * sb, sb);
    k = &kernel(be, "ops", "embed_rows_quant");
    k->setArg(a++, words.buffer);
    k->setArg(a++, static_cast<cl_ulong>(words.offset));
    k->setArg(a++, static_cast<cl_ulong>(uint64_t(table->cols) * table->bits / 32));  // words a row
    k->setArg(a++, static_cast<cl_uint>(table->bits));
    k->setArg(a++, scales.buffer);
    k->setArg(a++, static_cast<cl_ulong>(scales.offset));
    k->setArg(a++, biases.buffer);
    k->setArg(a++, static_cast<cl_ulong>(biases.offset));
    k->setArg(a++, static_cast<cl_uint>(table->scale_dtype));
    k->setArg(a++, static_cast<cl_uint>(table->group_size));
  }
  // Both kernels end alike: the row's length, the table's rows (an id outside gives zeros), the ids.
  k->setArg(a++, static_cast<cl_uint>(table->cols));
  k->setArg(a++, static_cast<cl_uint>(table->rows));
  k->setArg(a++, ids);
  k->setArg(a++, static_cast<cl_ulong>(ids_off));
  k->setArg(a++, single(out));
  launch(be, *k, cl::NDRange(round_up(table->cols, kLocal), n), cl::NDRange(kLocal, 1));
  return SL_OK;
}

}  // namespace

sl_status embed(sl_backend* be, const sl_weight* table, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err) {
  if (!table || !table->data || !weight_form_supported(table->dtype, table->bits)) return bad_weight(err, "embed");
  for (uint32_t i = 0; i < n; ++i)
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= table->rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "token id " + std::to_string(ids[i]) + " outside the vocabulary of " + std::to_string(table->rows));
  if (!float_buffer_ok(out, static_cast<uint64_t>(n) * table->cols)) return too_small(err, "embed");
  if (n == 0) return SL_OK;
  return guarded(err, "embed", [&] {
    wait_uploads(be->ids_uploads);  // be->ids may still feed the previous copy
    be->ids.assign(ids, ids + n);
    upload_batch_vector(be, be->d_ids, be->d_ids_cap, be->ids, be->ids_uploads);
    return embed_launch(be, table, be->d_ids, 0, n, out, err);
  });
}

sl_status embed_device(sl_backend* be, const sl_weight* table, const sl_buffer* ids, uint64_t ids_offset, uint32_t n, sl_buffer* out,
                       sl_error* err) {
  if (!table || !table->data || !weight_form_supported(table->dtype, table->bits)) return bad_weight(err, "embed_device");
  if (!ids || ids_offset > ids->bytes / 4 || n > ids->bytes / 4 - ids_offset)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "embed_device: ids past the buffer's end");
  if (!float_buffer_ok(out, static_cast<uint64_t>(n) * table->cols)) return too_small(err, "embed_device");
  if (n == 0) return SL_OK;
  return guarded(err, "embed_device", [&] { return embed_launch(be, table, single(ids), ids_offset, n, out, err); });
}

// The embedding of a decode step's token launched with the norm's step of the residual products
// (embed_norm_blocks: the row, the form of (w + w_offset) ⊙ row, the blocks' Σ x²), the norm itself
// left to the product that reads it (kEmbedNorm, cl_fusion.h).
bool embed_norm_join(sl_backend* be, const sl_weight* t, const sl_tensor& ids, sl_buffer* e, const sl_weight* norm_weight,
                     float weight_offset, float eps, sl_buffer* h, Forms& forms, NormStep* left) {
  const uint32_t dim = t->cols;
  cl::Buffer *xq = nullptr, *blocks = nullptr;
  if (ids.rows * ids.cols != 1 || dim % 32 || e->chunks.size() != 1 || h->chunks.size() != 1 || !int15_scratch(be, 1, dim, xq, blocks) ||
      !t->data || !weight_form_supported(t->dtype, t->bits) || (t->bits && (t->group_size == 0 || t->cols % t->group_size)))
    return false;
  if (ids.kind == SL_TENSOR_HOST) {
    const int32_t id = *static_cast<const int32_t*>(ids.host);
    if (id < 0 || static_cast<uint32_t>(id) >= t->rows) return false;  // embed's error message, through the node alone
    wait_uploads(be->ids_uploads);  // be->ids may still feed the previous copy
    be->ids.assign(1, id);
    upload_batch_vector(be, be->d_ids, be->d_ids_cap, be->ids, be->ids_uploads);
  } else if (!ids.buffer || ids.buffer->chunks.size() != 1) {
    return false;
  }
  const cl::Buffer& id_buffer = ids.kind == SL_TENSOR_HOST ? be->d_ids : single(ids.buffer);
  const uint64_t id_offset = ids.kind == SL_TENSOR_HOST ? 0 : ids.offset / 4;
  const uint64_t sb = t->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
  const uint64_t groups = t->bits ? uint64_t(t->rows) * (t->cols / t->group_size) : 0;
  const DevPtr words = read_range(be, t->data, t->offset, weight_bytes(t), t->bits ? 4 : (t->dtype == SL_DTYPE_F32 ? 4 : 2));
  const DevPtr scales = t->bits ? read_range(be, t->scales, t->scales_offset, groups * sb, sb) : words;
  const DevPtr biases = t->bits ? read_range(be, t->biases, t->biases_offset, groups * sb, sb) : words;
  auto& k = kernel(be, "ops", "embed_norm_blocks");
  cl_uint a = 0;
  k.setArg(a++, words.buffer);
  k.setArg(a++, static_cast<cl_ulong>(words.offset));
  k.setArg(a++, static_cast<cl_uint>(t->dtype));
  k.setArg(a++, static_cast<cl_uint>(t->bits));
  k.setArg(a++, static_cast<cl_ulong>(t->bits ? uint64_t(t->cols) * t->bits / 32 : 0));
  k.setArg(a++, scales.buffer);
  k.setArg(a++, static_cast<cl_ulong>(scales.offset));
  k.setArg(a++, biases.buffer);
  k.setArg(a++, static_cast<cl_ulong>(biases.offset));
  k.setArg(a++, static_cast<cl_uint>(t->scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(t->bits ? t->group_size : 1));
  k.setArg(a++, static_cast<cl_uint>(t->rows));
  k.setArg(a++, id_buffer);
  k.setArg(a++, static_cast<cl_ulong>(id_offset));
  k.setArg(a++, single(e));
  k.setArg(a++, static_cast<cl_uint>(dim));
  set_norm_step_args(be, k, a, norm_weight, weight_offset, 0, dim);
  launch(be, k, cl::NDRange(dim), cl::NDRange(dim % 128 == 0 ? 128 : 32));
  forms.clobbered(0);
  *left = NormStep{e, norm_weight, weight_offset, eps, h, dim, 0};
  return true;
}

sl_status argmax(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_buffer* ids, uint64_t ids_offset, sl_error* err) {
  if (dim == 0 || !float_buffer_ok(x, uint64_t(n_rows) * dim)) return too_small(err, "argmax");
  if (!ids || ids_offset > ids->bytes / 4 || n_rows > ids->bytes / 4 - ids_offset)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "argmax: ids past the buffer's end");
  if (n_rows == 0) return SL_OK;
  return guarded(err, "argmax", [&] {
    // A row's parts: a work-item reads ~8 values (a 128k vocabulary: 63 work-groups), at most two
    // work-groups a compute unit.
    constexpr uint64_t kArgmaxWg = 256;  // ARGMAX_WG in kernels_cl/elementwise.cl
    const uint32_t parts = static_cast<uint32_t>(
        std::clamp<uint64_t>((dim + kArgmaxWg * 8 - 1) / (kArgmaxWg * 8), 1, uint64_t(std::max<uint32_t>(be->caps.compute_units, 1)) * 2));
    cl::Buffer& part_v = be->argmax_values.at_least(be->context, uint64_t(n_rows) * parts * 4);
    cl::Buffer& part_i = be->argmax_indices.at_least(be->context, uint64_t(n_rows) * parts * 4);
    if (be->use_ptx && be->caps.sm >= 70) {  // one launch: the last part of a row to finish folds the row
      if (be->argmax_done.bytes < uint64_t(n_rows) * 4) {
        cl::Buffer& done = be->argmax_done.at_least(be->context, uint64_t(n_rows) * 4);
        be->queue.enqueueFillBuffer(done, cl_uint(0), 0, uint64_t(n_rows) * 4);  // counts start at zero, end there
      }
      auto& k = kernel(be, "ops", "argmax_parts_last");
      cl_uint a = 0;
      k.setArg(a++, single(x));
      k.setArg(a++, static_cast<cl_uint>(dim));
      k.setArg(a++, part_v);
      k.setArg(a++, part_i);
      k.setArg(a++, be->argmax_done.buffer);
      k.setArg(a++, single(ids));
      k.setArg(a++, static_cast<cl_ulong>(ids_offset));
      launch(be, k, cl::NDRange(size_t(parts) * kArgmaxWg, n_rows), cl::NDRange(kArgmaxWg, 1));
      return SL_OK;
    }
    auto& kp = kernel(be, "ops", "argmax_parts");
    kp.setArg(0, single(x));
    kp.setArg(1, static_cast<cl_uint>(dim));
    kp.setArg(2, part_v);
    kp.setArg(3, part_i);
    launch(be, kp, cl::NDRange(size_t(parts) * kArgmaxWg, n_rows), cl::NDRange(kArgmaxWg, 1));
    auto& kr = kernel(be, "ops", "argmax_rows");
    kr.setArg(0, part_v);
    kr.setArg(1, part_i);
    kr.setArg(2, static_cast<cl_uint>(parts));
    kr.setArg(3, single(ids));
    kr.setArg(4, static_cast<cl_ulong>(ids_offset));
    launch(be, kr, cl::NDRange(size_t(n_rows) * kArgmaxWg), cl::NDRange(kArgmaxWg));
    return SL_OK;
  });
}

// rms_norm and add_rms_norm: x (+ delta, written back to x) normalised into out, and on NVIDIA in
// decode the output's 15-bit form for the dp4a product that reads it next.
void rms_norm_run(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                  sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, Forms& forms) {
  const DevPtr w = vector_weight(be, weight, dim);
  const ProducedForms form = produced_forms(be, n_rows, dim);
  auto& k = kernel(be, "ops", delta ? "add_rms_norm" : "rms_norm");
  cl_uint a = 0;
  k.setArg(a++, single(x));
  if (delta) k.setArg(a++, single(delta));
  k.setArg(a++, w.buffer);
  k.setArg(a++, static_cast<cl_ulong>(w.offset));
  k.setArg(a++, static_cast<cl_uint>(weight->dtype));
  k.setArg(a++, weight_offset);
  k.setArg(a++, single(out));
  k.setArg(a++, static_cast<cl_uint>(dim));
  k.setArg(a++, eps);
  k.setArg(a++, form ? *form.xq : single(out));  // unread without a form
  k.setArg(a++, form ? *form.blocks : single(out));
  k.setArg(a++, static_cast<cl_uint>(bool(form)));
  constexpr size_t kNormWg = 256;  // NORM_WG in kernels_cl/norms.cl
  launch(be, k, cl::NDRange(size_t(n_rows) * kNormWg), cl::NDRange(kNormWg));
  form.made(forms, out);
}

namespace {

sl_status rms_norm_checked(sl_backend* be, const char* op, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight,
                           float weight_offset, sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, Forms& forms, sl_error* err) {
  if (!weight || !weight->data || weight->bits || !weight_form_supported(weight->dtype, 0) || weight->cols != dim)
    return bad_weight(err, op);
  const uint64_t n = uint64_t(n_rows) * dim;
  if (!float_buffer_ok(x, n) || !float_buffer_ok(out, n) || (delta && !float_buffer_ok(delta, n))) return too_small(err, op);
  if (delta && (out == x || out == delta)) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": out aliases x or delta");
  if (n_rows == 0) return SL_OK;
  return guarded(err, op, [&] {
    rms_norm_run(be, x, delta, weight, weight_offset, out, n_rows, dim, eps, forms);
    return SL_OK;
  });
}

}  // namespace

sl_status rms_norm(sl_backend* be, const sl_buffer* x, const sl_weight* weight, float weight_offset, sl_buffer* out,
                   uint32_t n_rows, uint32_t dim, float eps, Forms& forms, sl_error* err) {
  return rms_norm_checked(be, "rms_norm", const_cast<sl_buffer*>(x), nullptr, weight, weight_offset, out, n_rows, dim, eps, forms, err);
}

sl_status add_rms_norm(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                       sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, Forms& forms, sl_error* err) {
  if (!delta) return set_error(err, SL_ERR_INVALID_ARGUMENT, "add_rms_norm: no delta");
  return rms_norm_checked(be, "add_rms_norm", x, delta, weight, weight_offset, out, n_rows, dim, eps, forms, err);
}

namespace {

}  // namespace

void launch_rope(sl_backend* be, const RopeLaunch& r) {
  sl_buffer* x2 = r.x2;
  const uint32_t n_heads2 = r.n_heads2;
  auto& k = kernel(be, "ops", "rope");
  k.setArg(0, single(r.x));
  k.setArg(1, be->d_positions);
  k.setArg(2, r.table);
  k.setArg(3, static_cast<cl_uint>(r.n_heads));
  k.setArg(4, static_cast<cl_uint>(r.head_dim));
  k.setArg(5, static_cast<cl_uint>(r.half));
  k.setArg(6, static_cast<cl_uint>(r.style));
  k.setArg(7, single(x2 ? x2 : r.x));
  k.setArg(8, static_cast<cl_uint>(x2 ? n_heads2 : 0));
  launch(be, k, cl::NDRange(r.half, r.n_heads + (x2 ? n_heads2 : 0), be->positions.size()));
}

namespace {

// The (cos, sin) table of these frequencies and factor, covering positions [0, n_positions): found
// among the backend's tables or made, and grown (doubling, from 4096 positions) by rope_table_fill
// for the positions it lacks — into a new buffer, so a prepared rope keeps the one it was given.
// A fifth frequency set replaces the least recently used table.
const cl::Buffer& rope_table(sl_backend* be, const float* inv_freq, uint32_t half, float factor, uint32_t n_positions) {
  auto& tables = be->rope_tables;
  auto it = std::find_if(tables.begin(), tables.end(), [&](const sl_backend::RopeTable& t) {
    return t.factor == factor && t.inv_freq.size() == half && std::memcmp(t.inv_freq.data(), inv_freq, half * 4) == 0;
  });
  if (it == tables.end()) {
    if (tables.size() >= 4) tables.erase(tables.begin());
    sl_backend::RopeTable t;
    t.inv_freq.assign(inv_freq, inv_freq + half);
    t.factor = factor;
    t.d_inv_freq = cl::Buffer(be->context, CL_MEM_READ_ONLY, half * 4);
    be->queue.enqueueWriteBuffer(t.d_inv_freq, CL_TRUE, 0, half * 4, inv_freq);
    tables.push_back(std::move(t));
    it = tables.end() - 1;
  } else if (it != tables.end() - 1) {
    std::rotate(it, it + 1, tables.end());  // the most recently used last
    it = tables.end() - 1;
  }
  sl_backend::RopeTable& t = *it;
  if (n_positions > t.positions) {
    uint32_t grown = std::max<uint32_t>(t.positions, 4096);
    while (grown < n_positions) grown = grown > UINT32_MAX / 2 ? n_positions : grown * 2;
    cl::Buffer table(be->context, CL_MEM_READ_WRITE, uint64_t(grown) * half * 8);
    if (t.positions) be->queue.enqueueCopyBuffer(t.table, table, 0, 0, uint64_t(t.positions) * half * 8);
    auto& k = kernel(be, "ops", "rope_table_fill");
    k.setArg(0, table);
    k.setArg(1, t.d_inv_freq);
    k.setArg(2, static_cast<cl_uint>(half));
    k.setArg(3, factor);
    k.setArg(4, static_cast<cl_uint>(t.positions));
    k.setArg(5, static_cast<cl_uint>(grown));
    launch(be, k, cl::NDRange(half, grown - t.positions));
    t.table = table;
    t.positions = grown;
  }
  return t.table;
}

}  // namespace

sl_status rope_prepare(sl_backend* be, sl_buffer* x, uint32_t n_heads, uint32_t head_dim, uint32_t rotary_dim, const float* inv_freq,
                       float attention_factor, uint32_t style, RopeLaunch& out, sl_error* err) {
  if (rotary_dim > head_dim || rotary_dim % 2) return set_error(err, SL_ERR_INVALID_ARGUMENT, "rope: bad rotary_dim");
  const uint32_t half = rotary_dim / 2;
  const size_t n_tokens = be->positions.size();
  out = RopeLaunch{};
  if (half == 0 || n_tokens == 0) return SL_OK;  // nothing to rotate: out.x stays null
  if (!float_buffer_ok(x, uint64_t(n_tokens) * n_heads * head_dim)) return too_small(err, "rope");
  int32_t last = -1;
  for (int32_t pos : be->positions) {
    if (pos < 0) return set_error(err, SL_ERR_INVALID_ARGUMENT, "rope: negative position " + std::to_string(pos));
    last = std::max(last, pos);
  }
  return guarded(err, "rope", [&] {
    out = RopeLaunch{x, n_heads, head_dim, half, style, rope_table(be, inv_freq, half, attention_factor, static_cast<uint32_t>(last) + 1)};
    return SL_OK;
  });
}

sl_status gated_activation(sl_backend* be, const sl_glu_params* params, const sl_buffer* gate, const sl_buffer* up,
                           sl_buffer* out, uint64_t n, Forms& forms, sl_error* err) {
  const uint32_t activation = params->activation;
  if (activation > SL_ACT_SIGMOID) return set_error(err, SL_ERR_UNSUPPORTED, "unknown activation " + std::to_string(activation));
  if (!float_buffer_ok(gate, n) || !float_buffer_ok(up, n) || !float_buffer_ok(out, n)) return too_small(err, "gated_activation");
  if (n == 0) return SL_OK;
  if (activation == SL_ACT_SWIGLU_CLAMPED) {
    if (params->struct_size < offsetof(sl_glu_params, limit) + sizeof(float))
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "the clamped SwiGLU needs alpha and limit (ABI 2.2)");
    return guarded(err, "gated_activation", [&] {
      auto& k = kernel(be, "ops", "swiglu_clamped");
      k.setArg(0, single(gate));
      k.setArg(1, single(up));
      k.setArg(2, single(out));
      k.setArg(3, static_cast<cl_ulong>(n));
      k.setArg(4, params->alpha);
      k.setArg(5, params->limit);
      launch(be, k, cl::NDRange(round_up(n, kLocal)), cl::NDRange(kLocal));
      return SL_OK;
    });
  }
  return guarded(err, "gated_activation", [&] {
    // The activation's rows: the batch's tokens (MoE's slots of a token make one longer row).
    const uint64_t n_rows = std::max<std::size_t>(1, be->positions.size());
    const uint64_t row_len = n % n_rows == 0 ? n / n_rows : 0;
    const ProducedForms form = row_len ? produced_forms(be, n_rows, row_len) : ProducedForms{};
    auto& k = kernel(be, "ops", form ? "gated_activation_int15" : "gated_activation");
    k.setArg(0, single(gate));
    k.setArg(1, single(up));
    k.setArg(2, single(out));
    k.setArg(3, static_cast<cl_ulong>(n));
    k.setArg(4, static_cast<cl_uint>(activation));
    if (form) {
      k.setArg(5, *form.xq);
      k.setArg(6, *form.blocks);
      k.setArg(7, static_cast<cl_uint>(row_len));
    }
    launch(be, k, cl::NDRange(round_up(n, kLocal)), cl::NDRange(kLocal));
    form.made(forms, out);
    return SL_OK;
  });
}

namespace {
sl_status binary(sl_backend* be, const char* name, const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n,
                 sl_error* err) {
  if (!float_buffer_ok(a, n) || !float_buffer_ok(b, n) || !float_buffer_ok(out, n)) return too_small(err, name);
  if (n == 0) return SL_OK;
  return guarded(err, name, [&] {
    auto& k = kernel(be, "ops", name);
    k.setArg(0, single(a));
    k.setArg(1, single(b));
    k.setArg(2, single(out));
    k.setArg(3, static_cast<cl_ulong>(n));
    launch(be, k, cl::NDRange(round_up(n, kLocal)), cl::NDRange(kLocal));
    return SL_OK;
  });
}
}  // namespace

sl_status add(sl_backend* be, const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error* err) {
  return binary(be, "add_f32", a, b, out, n, err);
}

sl_status scale(sl_backend* be, const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error* err) {
  if (!float_buffer_ok(x, n) || !float_buffer_ok(out, n)) return too_small(err, "scale");
  if (n == 0) return SL_OK;
  return guarded(err, "scale", [&] {
    auto& k = kernel(be, "ops", "scale_f32");
    k.setArg(0, single(x));
    k.setArg(1, single(out));
    k.setArg(2, static_cast<cl_ulong>(n));
    k.setArg(3, scale);
    k.setArg(4, softcap);
    launch(be, k, cl::NDRange(round_up(n, kLocal)), cl::NDRange(kLocal));
    return SL_OK;
  });
}

sl_status copy_columns(sl_backend* be, const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                       const sl_copy_columns_params& p, sl_error* err) {
  const uint64_t x_rows = p.repeat ? out_rows / p.repeat : 0;
  if (p.repeat == 0 || uint64_t(p.src_col) + p.width > x_cols || uint64_t(p.dst_col) + p.width > out_cols ||
      !float_buffer_ok(x, x_rows * x_cols) || !float_buffer_ok(out, uint64_t(out_rows) * out_cols))
    return too_small(err, "copy_columns");
  const uint64_t n = uint64_t(out_rows) * p.width;
  if (n == 0) return SL_OK;
  return guarded(err, "copy_columns", [&] {
    auto& k = kernel(be, "ops", "copy_columns_f32");
    k.setArg(0, single(x));
    k.setArg(1, x_cols);
    k.setArg(2, single(out));
    k.setArg(3, out_cols);
    k.setArg(4, out_rows);
    k.setArg(5, p.src_col);
    k.setArg(6, p.dst_col);
    k.setArg(7, p.width);
    k.setArg(8, p.repeat);
    launch(be, k, cl::NDRange(round_up(n, kLocal)), cl::NDRange(kLocal));
    return SL_OK;
  });
}

sl_status copy(sl_backend* be, const sl_buffer* src, uint64_t src_offset, sl_buffer* dst, uint64_t dst_offset, uint64_t n,
               sl_error* err) {
  if (!fits(src->bytes / 4, src_offset, n) || !fits(dst->bytes / 4, dst_offset, n))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy past a buffer's end");
  if (n == 0) return SL_OK;
  return guarded(err, "copy", [&] {
    const DevPtr s = read_range(be, const_cast<sl_buffer*>(src), src_offset * 4, n * 4);
    const DevPtr d = write_range(dst, dst_offset * 4, n * 4);
    const bool overlap = s.buffer() == d.buffer() && s.offset < d.offset + n * 4 && d.offset < s.offset + n * 4;
    if (overlap) {  // memmove semantics through a temporary
      cl::Buffer tmp(be->context, CL_MEM_READ_WRITE, n * 4);
      be->queue.enqueueCopyBuffer(s.buffer, tmp, s.offset, 0, n * 4);
      be->queue.enqueueCopyBuffer(tmp, d.buffer, 0, d.offset, n * 4);
    } else {
      be->queue.enqueueCopyBuffer(s.buffer, d.buffer, s.offset, d.offset, n * 4);
    }
    return SL_OK;
  });
}

namespace {

// A host array (the caller's lives only for the call) to the device without waiting: copied into
// memory the backend keeps until its upload has run. A blocking write waits for the queue to drain —
// every routed expert's gather and scatter did, twice an expert a layer, and the device idled while
// the host caught up (perf/results/model_families_gpu.md). The queue runs in order, so the next
// write into dst lands after the kernels that read this one.
void upload_host_array(sl_backend* be, cl::Buffer& dst, const void* src, uint64_t bytes) {
  auto& staged = be->staged_host_arrays;
  while (!staged.empty() && staged.front().done.getInfo<CL_EVENT_COMMAND_EXECUTION_STATUS>() == CL_COMPLETE) staged.pop_front();
  auto& s = staged.emplace_back();
  s.bytes.assign(static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
  be->queue.enqueueWriteBuffer(dst, CL_FALSE, 0, bytes, s.bytes.data(), nullptr, &s.done);
}

// The row indices of a row move, each checked against `limit` rows, on the device.
sl_status row_indices(sl_backend* be, const char* op, const int32_t* rows, uint32_t n, uint64_t limit, sl_error* err) {
  for (uint32_t i = 0; i < n; ++i)
    if (rows[i] < 0 || static_cast<uint64_t>(rows[i]) >= limit)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": row " + std::to_string(rows[i]) + " out of range");
  upload_host_array(be, be->moe_rows.at_least(be->context, uint64_t(n) * 4), rows, uint64_t(n) * 4);
  return SL_OK;
}

}  // namespace

sl_status gather_rows(sl_backend* be, const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim, sl_buffer* dst,
                      sl_error* err) {
  if (!src || !dst || (n && !rows)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: missing buffers or rows");
  if (n == 0 || dim == 0) return SL_OK;
  if (!float_buffer_ok(dst, uint64_t(n) * dim)) return too_small(err, "gather_rows");
  if (src == dst) return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: source and destination alias");
  return guarded(err, "gather_rows", [&] {
    if (auto s = row_indices(be, "gather_rows", rows, n, src->bytes / 4 / dim, err); s != SL_OK) return s;
    auto& k = kernel(be, "ops", "gather_rows_f32");
    k.setArg(0, single(src));
    k.setArg(1, be->moe_rows.buffer);
    k.setArg(2, static_cast<cl_uint>(dim));
    k.setArg(3, single(dst));
    launch(be, k, cl::NDRange(round_up(dim, kLocal), n), cl::NDRange(kLocal, 1));
    return SL_OK;
  });
}

sl_status scatter_add_rows(sl_backend* be, const sl_buffer* src, const int32_t* rows, const float* weights, uint32_t n,
                           uint32_t dim, sl_buffer* dst, sl_error* err) {
  if (!src || !dst || (n && (!rows || !weights)))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: missing buffers, rows or weights");
  if (n == 0 || dim == 0) return SL_OK;
  if (!float_buffer_ok(src, uint64_t(n) * dim)) return too_small(err, "scatter_add_rows");
  if (src == dst) return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: source and destination alias");
  return guarded(err, "scatter_add_rows", [&] {
    if (auto s = row_indices(be, "scatter_add_rows", rows, n, dst->bytes / 4 / dim, err); s != SL_OK) return s;
    upload_host_array(be, be->moe_weights.at_least(be->context, uint64_t(n) * 4), weights, uint64_t(n) * 4);
    auto& k = kernel(be, "ops", "scatter_add_rows_f32");
    k.setArg(0, single(src));
    k.setArg(1, be->moe_rows.buffer);
    k.setArg(2, be->moe_weights.buffer);
    k.setArg(3, static_cast<cl_uint>(n));
    k.setArg(4, static_cast<cl_uint>(dim));
    k.setArg(5, single(dst));
    launch(be, k, cl::NDRange(round_up(dim, kLocal)), cl::NDRange(kLocal));
    return SL_OK;
  });
}

}  // namespace sluice::ocl
