// Elementwise, normalisation, rotary, softmax, routing and embedding ops of the CPU backend.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu_backend.h"
#include "mxfp4_kernels.h"
#include "quant_kernels.h"
#include "util/vec.h"

namespace sluice::cpu {

bool weight_dtype_supported(const sl_weight* w) {
  return w && w->data && w->bits == 0 &&
         (w->dtype == SL_DTYPE_F32 || w->dtype == SL_DTYPE_F16 || w->dtype == SL_DTYPE_BF16);
}

void weight_row_to_f32(const sl_weight* w, uint32_t r, float* dst) {
  if (mxfp4::is_mxfp4(*w)) {  // checked by the op that calls (MATMUL only)
    const Mxfp4Row row = mxfp4_row(w, r);
    return mxfp4::decode_row(row.codes, row.scales, w->cols, dst);
  }
  if (w->bits) return quant_row_to_f32(quant_view(w), r, dst);  // checked by the op that calls
  const std::byte* base = weight_data(w);
  const std::size_t cols = w->cols;
  switch (w->dtype) {
    case SL_DTYPE_F32:
      std::memcpy(dst, base + static_cast<std::size_t>(r) * cols * 4, cols * 4);
      break;
    case SL_DTYPE_F16:
      f16_row_to_f32(reinterpret_cast<const uint16_t*>(base) + static_cast<std::size_t>(r) * cols, dst, cols);
      break;
    case SL_DTYPE_BF16:
      bf16_row_to_f32(reinterpret_cast<const uint16_t*>(base) + static_cast<std::size_t>(r) * cols, dst, cols);
      break;
    default:
      std::fill(dst, dst + cols, 0.0f);
  }
}

namespace {
sl_status bad_weight(sl_error* err, const char* op) {
  return set_error(err, SL_ERR_UNSUPPORTED, std::string(op) + ": unsupported weight form on the CPU backend");
}
}  // namespace

namespace {
sl_status check_table(const sl_weight* table, const char* what, sl_error* err) {
  if (table && table->bits) {
    if (const char* why = quant_weight_problem(table); *why) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(what) + ": " + why);
  } else if (!weight_dtype_supported(table)) {
    return bad_weight(err, what);
  }
  return SL_OK;
}
}  // namespace

sl_status embed(sl_backend*, const sl_weight* table, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err) {
  if (sl_status s = check_table(table, "embed", err); s != SL_OK) return s;
  for (uint32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= table->rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "token id " + std::to_string(ids[i]) + " outside the vocabulary of " + std::to_string(table->rows));
    weight_row_to_f32(table, static_cast<uint32_t>(ids[i]), f32(out) + static_cast<std::size_t>(i) * table->cols);
  }
  return SL_OK;
}

sl_status embed_device(sl_backend*, const sl_weight* table, const sl_buffer* ids, uint64_t ids_offset, uint32_t n, sl_buffer* out,
                       sl_error* err) {
  if (!ids || !fits(ids->bytes / 4, ids_offset, n)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "embed_device: ids past the buffer's end");
  if (sl_status s = check_table(table, "embed_device", err); s != SL_OK) return s;
  if (!out || out->bytes / 4 / std::max<uint32_t>(1, table->cols) < n) return set_error(err, SL_ERR_INVALID_ARGUMENT, "embed_device: output too small");
  const int32_t* id = reinterpret_cast<const int32_t*>(ids->data) + ids_offset;
  for (uint32_t i = 0; i < n; ++i) {
    float* row = f32(out) + std::size_t(i) * table->cols;
    if (id[i] >= 0 && static_cast<uint32_t>(id[i]) < table->rows)
      weight_row_to_f32(table, static_cast<uint32_t>(id[i]), row);
    else
      std::fill(row, row + table->cols, 0.0f);  // as on a device, which cannot refuse the id
  }
  return SL_OK;
}

sl_status argmax(sl_backend*, const sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_buffer* ids, uint64_t ids_offset, sl_error* err) {
  if (!x || dim == 0 || x->bytes / 4 / dim < n_rows) return set_error(err, SL_ERR_INVALID_ARGUMENT, "argmax: input too small");
  if (!ids || !fits(ids->bytes / 4, ids_offset, n_rows)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "argmax: ids past the buffer's end");
  int32_t* to = reinterpret_cast<int32_t*>(ids->data) + ids_offset;
  for (uint32_t r = 0; r < n_rows; ++r) {
    const float* row = f32(x) + std::size_t(r) * dim;
    int32_t best = -1;
    for (uint32_t c = 0; c < dim; ++c)
      if (!std::isnan(row[c]) && (best < 0 || row[c] > row[best])) best = static_cast<int32_t>(c);
    to[r] = std::max(best, 0);
  }
  return SL_OK;
}

namespace {
// The norm's weight as float32, plus the offset (Gemma's 1 + w).
std::vector<float> norm_weight(const sl_weight* weight, uint32_t dim, float weight_offset) {
  std::vector<float> w(dim);
  weight_row_to_f32(weight, 0, w.data());
  for (auto& v : w) v += weight_offset;
  return w;
}

// y = w · x / rms(x), from the row's sum of squares.
void normalise_row(const float* xr, float ss, const float* w, float* yr, uint32_t dim, float eps) {
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (uint32_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
}
}  // namespace

sl_status rms_norm(sl_backend* be, const sl_buffer* x, const sl_weight* weight, float weight_offset, sl_buffer* out,
                   uint32_t n_rows, uint32_t dim, float eps, sl_error* err) {
  if (!weight_dtype_supported(weight) || weight->cols != dim) return bad_weight(err, "rms_norm");
  const std::vector<float> w = norm_weight(weight, dim, weight_offset);
  be->pool->parallel_for(n_rows, 64, [&](std::size_t b, std::size_t e, unsigned) {
    for (std::size_t r = b; r < e; ++r) {
      const float* xr = f32(x) + r * dim;
      normalise_row(xr, dot_f32(xr, xr, dim), w.data(), f32(out) + r * dim, dim, eps);
    }
  });
  return SL_OK;
}

// add then rms_norm, a row at a time while it is in L1: the add, then the sum of squares by the same
// dot_f32 as rms_norm, then the normalisation — the same values as the two ops. (A single loop adding
// and squaring gave other bits where a row has a scalar tail: the compiler contracts dot_f32's tail to
// FMAs but not that loop's.)
sl_status add_rms_norm(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                       sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, sl_error* err) {
  if (!weight_dtype_supported(weight) || weight->cols != dim) return bad_weight(err, "add_rms_norm");
  const uint64_t n = static_cast<uint64_t>(n_rows) * dim;
  if (!x || !delta || !out || !fits(x->bytes / 4, 0, n) || !fits(delta->bytes / 4, 0, n) || !fits(out->bytes / 4, 0, n))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "add_rms_norm: buffers too small for the shapes");
  const std::vector<float> w = norm_weight(weight, dim, weight_offset);
  be->pool->parallel_for(n_rows, 64, [&](std::size_t b, std::size_t e, unsigned) {
    for (std::size_t r = b; r < e; ++r) {
      float* xr = f32(x) + r * dim;
      const float* dr = f32(delta) + r * dim;
      for (uint32_t i = 0; i < dim; ++i) xr[i] += dr[i];
      normalise_row(xr, dot_f32(xr, xr, dim), w.data(), f32(out) + r * dim, dim, eps);
    }
  });
  return SL_OK;
}

sl_status rope(sl_backend* be, sl_buffer* x, uint32_t n_heads, uint32_t head_dim, uint32_t rotary_dim,
               const float* inv_freq, float attention_factor, uint32_t style, sl_error* err) {
  if (rotary_dim > head_dim || rotary_dim % 2) return set_error(err, SL_ERR_INVALID_ARGUMENT, "rope: bad rotary_dim");
  const uint32_t half = rotary_dim / 2;
  const std::size_t n_tokens = be->positions.size();
  be->pool->parallel_for(n_tokens, 4, [&](std::size_t b, std::size_t e, unsigned) {
    std::vector<float> cos_v(half), sin_v(half);
    for (std::size_t t = b; t < e; ++t) {
      // As the reference computes it: the angle in float32, then cos/sin.
      const float pos = static_cast<float>(be->positions[t]);
      for (uint32_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[i] = std::cos(angle) * attention_factor;
        sin_v[i] = std::sin(angle) * attention_factor;
      }
      for (uint32_t h = 0; h < n_heads; ++h) {
        float* v = f32(x) + (t * n_heads + h) * head_dim;
        if (style == SL_ROPE_NEOX) {
          for (uint32_t i = 0; i < half; ++i) {
            const float a = v[i], c = v[i + half];
            v[i] = a * cos_v[i] - c * sin_v[i];
            v[i + half] = c * cos_v[i] + a * sin_v[i];
          }
        } else {
          for (uint32_t i = 0; i < half; ++i) {
            const float a = v[2 * i], c = v[2 * i + 1];
            v[2 * i] = a * cos_v[i] - c * sin_v[i];
            v[2 * i + 1] = c * cos_v[i] + a * sin_v[i];
          }
        }
      }
    }
  });
  return SL_OK;
}

sl_status gated_activation(sl_backend* be, const sl_glu_params* params, const sl_buffer* gate, const sl_buffer* up,
                           sl_buffer* out, uint64_t n, sl_error* err) {
  const float* g = f32(gate);
  const float* u = f32(up);
  float* o = f32(out);
  switch (params->activation) {
    case SL_ACT_SILU:
      be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
        silu_mul(g + b, u + b, o + b, e - b);
      });
      return SL_OK;
    case SL_ACT_GELU_TANH:
      be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
        constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
        for (std::size_t i = b; i < e; ++i) {
          const float x = g[i];
          o[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * u[i];
        }
      });
      return SL_OK;
    case SL_ACT_GELU:
      be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t i = b; i < e; ++i) o[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * 0.7071067811865476f)) * u[i];
      });
      return SL_OK;
    case SL_ACT_SWIGLU_CLAMPED: {
      if (params->struct_size < offsetof(sl_glu_params, limit) + sizeof(float))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "the clamped SwiGLU needs alpha and limit (ABI 2.2)");
      const float alpha = params->alpha, limit = params->limit;
      be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t i = b; i < e; ++i) {
          const float x = std::min(g[i], limit), y = std::clamp(u[i], -limit, limit);
          o[i] = x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
        }
      });
      return SL_OK;
    }
    case SL_ACT_SIGMOID:  // 2.2
      be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t i = b; i < e; ++i) o[i] = u[i] / (1.0f + std::exp(-g[i]));
      });
      return SL_OK;
    default:
      return set_error(err, SL_ERR_UNSUPPORTED, "unknown activation " + std::to_string(params->activation));
  }
}

sl_status add(sl_backend*, const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error*) {
  const float* x = f32(a);
  const float* y = f32(b);
  float* o = f32(out);
  for (uint64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  return SL_OK;
}

sl_status scale(sl_backend* be, const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error*) {
  const float* in = f32(x);
  float* o = f32(out);
  be->pool->parallel_for(n, 4096, [&](std::size_t b, std::size_t e, unsigned) {
    if (softcap > 0)
      for (std::size_t i = b; i < e; ++i) o[i] = std::tanh(in[i] * scale / softcap) * softcap;
    else
      for (std::size_t i = b; i < e; ++i) o[i] = in[i] * scale;
  });
  return SL_OK;
}

sl_status copy_columns(sl_backend* be, const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                       const sl_copy_columns_params& p, sl_error* err) {
  const uint64_t x_rows = p.repeat ? out_rows / p.repeat : 0;
  if (p.repeat == 0 || uint64_t(p.src_col) + p.width > x_cols || uint64_t(p.dst_col) + p.width > out_cols ||
      x->bytes / 4 < x_rows * x_cols || out->bytes / 4 < uint64_t(out_rows) * out_cols)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy_columns: columns or rows past a buffer");
  const float* in = f32(x);
  float* o = f32(out);
  be->pool->parallel_for(out_rows, 64, [&](std::size_t b, std::size_t e, unsigned) {
    for (std::size_t r = b; r < e; ++r)
      std::memcpy(o + r * out_cols + p.dst_col, in + (r / p.repeat) * x_cols + p.src_col, std::size_t(p.width) * 4);
  });
  return SL_OK;
}

sl_status copy(sl_backend*, const sl_buffer* src, uint64_t src_offset, sl_buffer* dst, uint64_t dst_offset, uint64_t n,
               sl_error* err) {
  if (!fits(src->bytes / 4, src_offset, n) || !fits(dst->bytes / 4, dst_offset, n))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy past a buffer's end");
  std::memmove(f32(dst) + dst_offset, f32(src) + src_offset, n * 4);
  return SL_OK;
}

}  // namespace sluice::cpu
