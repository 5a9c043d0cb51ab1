// Example KV codec "example-i8": each head vector stored as a float32 scale (max |x| / 127) and
// head_dim int8 values — 8 + 32/head_dim bits per value. encode/decode are all a codec must have;
// opencl_source (optional) lets the OpenCL backend keep the cache and attend on the device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "sluice/kvcodec.h"

struct sl_kvcodec {
  uint32_t head_dim;
};

namespace {

sl_status fail(sl_error* err, sl_status s, const char* message) {
  std::strncpy(err->message, message, SL_ERROR_MESSAGE_SIZE - 1);
  err->message[SL_ERROR_MESSAGE_SIZE - 1] = '\0';
  return s;
}

sl_status create(uint32_t head_dim, sl_kv_role, const char* options, sl_kvcodec** out, sl_error* err) {
  if (head_dim == 0) return fail(err, SL_ERR_INVALID_ARGUMENT, "head_dim must be positive");
  if (options && *options) return fail(err, SL_ERR_INVALID_ARGUMENT, "example-i8 takes no options");
  *out = new (std::nothrow) sl_kvcodec{head_dim};
  return *out ? SL_OK : fail(err, SL_ERR_OUT_OF_MEMORY, "out of memory");
}

void destroy(sl_kvcodec* c) { delete c; }

void get_format(const sl_kvcodec* c, sl_kv_format* f) {
  f->struct_size = sizeof(sl_kv_format);
  f->abi_version = SL_ABI_VERSION;
  f->head_dim = c->head_dim;
  f->values_per_block = c->head_dim;
  f->bytes_per_block = 4 + c->head_dim;
  f->row_bytes = 4 + c->head_dim;
  f->bits_per_value = static_cast<float>(f->row_bytes * 8) / static_cast<float>(c->head_dim);
  f->domain_dim = c->head_dim;
}

sl_status encode(const sl_kvcodec* c, const float* src, uint32_t n, void* dst, sl_error*) {
  auto* out = static_cast<unsigned char*>(dst);
  for (uint32_t r = 0; r < n; ++r, src += c->head_dim, out += 4 + c->head_dim) {
    float m = 0.0f;
    for (uint32_t i = 0; i < c->head_dim; ++i) m = std::max(m, std::abs(src[i]));
    const float scale = m / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
    std::memcpy(out, &scale, 4);
    for (uint32_t i = 0; i < c->head_dim; ++i)
      out[4 + i] = static_cast<unsigned char>(static_cast<signed char>(std::lround(src[i] * inv)));
  }
  return SL_OK;
}

sl_status decode(const sl_kvcodec* c, const void* src, uint32_t n, float* dst, sl_error*) {
  const auto* in = static_cast<const unsigned char*>(src);
  for (uint32_t r = 0; r < n; ++r, dst += c->head_dim, in += 4 + c->head_dim) {
    float scale;
    std::memcpy(&scale, in, 4);
    for (uint32_t i = 0; i < c->head_dim; ++i) dst[i] = scale * static_cast<signed char>(in[4 + i]);
  }
  return SL_OK;
}

// The device side of encode and decode (contract: docs/PLUGINS.md). Rows start 4-byte aligned.
// rint rounds half to even where lround rounds half away: a tie may differ by one step of the scale.
const char* opencl_source(const sl_kvcodec*) {
  return R"CL(
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n) {
  float m = 0.0f;
  for (uint i = 0; i < n; ++i) m = fmax(m, fabs(src[i]));
  const float scale = m / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  *(__global float*)row = scale;
  for (uint i = 0; i < n; ++i) ((__global char*)(row + 4))[i] = (char)rint(src[i] * inv);
}
float SL_KV_FN(load)(__global const uchar* row, uint i) {
  return *(__global const float*)row * (float)((__global const char*)(row + 4))[i];
}
)CL";
}

const sl_kvcodec_api kApi = {sizeof(sl_kvcodec_api), SL_ABI_VERSION, create, destroy, get_format, encode, decode,
                             nullptr, nullptr, nullptr, nullptr, nullptr,  // no fused CPU hooks
                             opencl_source};

const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "example-i8",
                                          "0.1.0", "Example KV codec: int8 values with one float scale per row",
                                          nullptr, &kApi};

}  // namespace

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &kDescriptor; }
