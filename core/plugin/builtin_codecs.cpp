#include "plugin/builtin_codecs.h"

#include <cstring>
#include <new>
#include <string>

#include "util/plugin_error.h"
#include "util/vec.h"

struct sl_kvcodec {
  uint32_t head_dim;
  bool half;
};

namespace sluice {
namespace {

template <bool Half>
sl_status create(uint32_t head_dim, sl_kv_role, const char* options, sl_kvcodec** out, sl_error* err) {
  if (head_dim == 0) return set_error(err, SL_ERR_INVALID_ARGUMENT, "head_dim must be positive");
  if (options && *options) return set_error(err, SL_ERR_INVALID_ARGUMENT, "the f32/f16 codecs take no options");
  auto* c = new (std::nothrow) sl_kvcodec{head_dim, Half};
  if (!c) return set_error(err, SL_ERR_OUT_OF_MEMORY, "out of memory");
  *out = c;
  return SL_OK;
}

void destroy(sl_kvcodec* c) { delete c; }

void get_format(const sl_kvcodec* c, sl_kv_format* f) {
  const uint32_t bytes = c->half ? 2 : 4;
  f->struct_size = sizeof(sl_kv_format);
  f->abi_version = SL_ABI_VERSION;
  f->head_dim = c->head_dim;
  f->values_per_block = 1;
  f->bytes_per_block = bytes;
  f->row_bytes = c->head_dim * bytes;
  f->bits_per_value = static_cast<float>(bytes * 8);
  f->domain_dim = c->head_dim;
}

sl_status encode(const sl_kvcodec* c, const float* src, uint32_t n, void* dst, sl_error*) {
  const std::size_t count = static_cast<std::size_t>(n) * c->head_dim;
  if (!c->half) {
    std::memcpy(dst, src, count * 4);
  } else {
    auto* h = static_cast<uint16_t*>(dst);
    for (std::size_t i = 0; i < count; ++i) h[i] = cpu::f32_to_f16(src[i]);
  }
  return SL_OK;
}

sl_status decode(const sl_kvcodec* c, const void* src, uint32_t n, float* dst, sl_error*) {
  const std::size_t count = static_cast<std::size_t>(n) * c->head_dim;
  if (!c->half)
    std::memcpy(dst, src, count * 4);
  else
    cpu::f16_row_to_f32(static_cast<const uint16_t*>(src), dst, count);
  return SL_OK;
}

// Fused hooks: the query state is the query itself; scores are dot products on the stored rows.
uint32_t query_state_bytes(const sl_kvcodec* c) { return c->head_dim * 4; }
void prepare_query(const sl_kvcodec* c, const float* q, void* state) { std::memcpy(state, q, c->head_dim * 4); }

void score_keys(const sl_kvcodec* c, const void* state, const void* rows, size_t stride, uint32_t n, float* scores) {
  const auto* q = static_cast<const float*>(state);
  const auto* base = static_cast<const std::byte*>(rows);
  for (uint32_t i = 0; i < n; ++i) {
    const void* row = base + i * stride;
    scores[i] = c->half ? cpu::dot_f16(static_cast<const uint16_t*>(row), q, c->head_dim)
                        : cpu::dot_f32(static_cast<const float*>(row), q, c->head_dim);
  }
}

void accumulate_values(const sl_kvcodec* c, const void* rows, size_t stride, uint32_t n, const float* w, float* acc) {
  const auto* base = static_cast<const std::byte*>(rows);
  float tmp[512];
  for (uint32_t i = 0; i < n; ++i) {
    const void* row = base + i * stride;
    if (!c->half) {
      cpu::axpy(w[i], static_cast<const float*>(row), acc, c->head_dim);
    } else {
      for (uint32_t d0 = 0; d0 < c->head_dim; d0 += 512) {
        const uint32_t len = std::min<uint32_t>(512, c->head_dim - d0);
        cpu::f16_row_to_f32(static_cast<const uint16_t*>(row) + d0, tmp, len);
        cpu::axpy(w[i], tmp, acc + d0, len);
      }
    }
  }
}

void finish_values(const sl_kvcodec* c, const float* acc, float* out) { std::memcpy(out, acc, c->head_dim * 4); }

// OpenCL device functions (docs/PLUGINS.md): encode one row (by one work-item, or by a work-group:
// a row written by one work-item was a chain of 128 dependent stores, 15 µs a kv_write on the H100),
// load one element of a stored row. f16 rounds to nearest even, as f32_to_f16 does on the host.
const char* opencl_source(const sl_kvcodec* c) {
  static const char* const kF32Source = R"CL(
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n) {
  __global float* dst = (__global float*)row;
  for (uint i = 0; i < n; ++i) dst[i] = src[i];
}
void SL_KV_FN(encode_row_group)(__global const float* src, __global uchar* row, uint n, uint lid, uint lsize,
                                __local float* scratch) {
  for (uint i = lid; i < n; i += lsize) ((__global float*)row)[i] = src[i];
}
float SL_KV_FN(load)(__global const uchar* row, uint i) { return ((__global const float*)row)[i]; }
)CL";
  static const char* const kF16Source = R"CL(
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n) {
  for (uint i = 0; i < n; ++i) vstore_half_rte(src[i], i, (__global half*)row);
}
void SL_KV_FN(encode_row_group)(__global const float* src, __global uchar* row, uint n, uint lid, uint lsize,
                                __local float* scratch) {
  for (uint i = lid; i < n; i += lsize) vstore_half_rte(src[i], i, (__global half*)row);
}
float SL_KV_FN(load)(__global const uchar* row, uint i) { return vload_half(i, (__global const half*)row); }
)CL";
  return c->half ? kF16Source : kF32Source;
}

template <bool Half>
constexpr sl_kvcodec_api make_api() {
  return sl_kvcodec_api{sizeof(sl_kvcodec_api), SL_ABI_VERSION, create<Half>, destroy, get_format, encode, decode,
                        query_state_bytes, prepare_query, score_keys, accumulate_values, finish_values, opencl_source};
}

const sl_kvcodec_api kF32 = make_api<false>();
const sl_kvcodec_api kF16 = make_api<true>();

}  // namespace

const sl_kvcodec_api* builtin_f32_codec() { return &kF32; }
const sl_kvcodec_api* builtin_f16_codec() { return &kF16; }

}  // namespace sluice
