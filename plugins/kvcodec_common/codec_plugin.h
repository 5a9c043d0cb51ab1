#pragma once
// A KV codec plugin written as a C++ class, exposed through the C table of sluice/kvcodec.h.
//
// A codec family implements `Codec` and a factory; make_kvcodec_api<Factory>() builds the table.
// Exceptions never cross the boundary: create/encode/decode catch and report through sl_error; the
// fused hooks (no error channel) must not throw, so implementations do no allocation there.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/kvcodec.h"

namespace sluice::kvcodec {

// The options after "name:" in --kv-codec: "key=value" items separated by ':' or ';'
// (',' separates the k= and v= parts of the flag, so it cannot appear here).
class Options {
 public:
  explicit Options(std::string_view text);  // throws std::invalid_argument on a malformed item
  // The value of `key`, or `fallback`; marks the key as used.
  std::string get(const std::string& key, const std::string& fallback);
  int get_int(const std::string& key, int fallback, int lo, int hi);
  uint64_t get_u64(const std::string& key, uint64_t fallback);
  // Throws std::invalid_argument naming any key no get() asked for (a typo must not pass silently).
  void reject_unused() const;

 private:
  std::vector<std::pair<std::string, std::string>> items_;
  std::vector<bool> used_;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual sl_kv_format format() const = 0;
  virtual void encode(const float* src, uint32_t n_rows, std::byte* dst) const = 0;
  virtual void decode(const std::byte* src, uint32_t n_rows, float* dst) const = 0;
  // Fused hooks (see kvcodec.h). A codec that has none for a role returns 0 state bytes and the host
  // table still points at the adapters; every codec here implements them.
  virtual uint32_t query_state_bytes() const = 0;
  virtual void prepare_query(const float* q, void* state) const = 0;
  virtual void score_keys(const void* state, const std::byte* rows, std::size_t stride, uint32_t n, float* scores) const = 0;
  virtual void accumulate_values(const std::byte* rows, std::size_t stride, uint32_t n, const float* w, float* acc) const = 0;
  virtual void finish_values(const float* acc, float* out) const = 0;
  // OpenCL C source of the device functions for this instance (docs/PLUGINS-kvcodec.md), or "".
  virtual const std::string& opencl_source() const = 0;
};

// Makes a codec: throws std::invalid_argument (bad head_dim, role or options) or std::bad_alloc.
using Factory = std::unique_ptr<Codec> (*)(uint32_t head_dim, sl_kv_role role, Options& options);

void write_error(sl_error* err, const char* message);

}  // namespace sluice::kvcodec

// The opaque handle of the C ABI: one per created codec.
struct sl_kvcodec {
  std::unique_ptr<sluice::kvcodec::Codec> impl;
};

namespace sluice::kvcodec {

template <Factory F>
sl_status create_adapter(uint32_t head_dim, sl_kv_role role, const char* options, sl_kvcodec** out, sl_error* err) {
  try {
    Options opts(options ? options : "");
    auto impl = F(head_dim, role, opts);
    opts.reject_unused();
    *out = new sl_kvcodec{std::move(impl)};
    return SL_OK;
  } catch (const std::invalid_argument& e) {
    write_error(err, e.what());
    return SL_ERR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    write_error(err, "out of memory");
    return SL_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(err, e.what());
    return SL_ERR_INTERNAL;
  }
}

inline void destroy_adapter(sl_kvcodec* c) { delete c; }
inline void get_format_adapter(const sl_kvcodec* c, sl_kv_format* out) {
  const uint32_t size = out->struct_size;  // the host's struct: fill what it has room for
  sl_kv_format f = c->impl->format();
  f.struct_size = static_cast<uint32_t>(sizeof(sl_kv_format));
  f.abi_version = SL_ABI_VERSION;
  std::memcpy(out, &f, size && size < sizeof f ? size : sizeof f);
  out->struct_size = size && size < sizeof f ? size : static_cast<uint32_t>(sizeof f);
}
inline sl_status encode_adapter(const sl_kvcodec* c, const float* src, uint32_t n, void* dst, sl_error*) {
  c->impl->encode(src, n, static_cast<std::byte*>(dst));
  return SL_OK;
}
inline sl_status decode_adapter(const sl_kvcodec* c, const void* src, uint32_t n, float* dst, sl_error*) {
  c->impl->decode(static_cast<const std::byte*>(src), n, dst);
  return SL_OK;
}
inline uint32_t query_state_bytes_adapter(const sl_kvcodec* c) { return c->impl->query_state_bytes(); }
inline void prepare_query_adapter(const sl_kvcodec* c, const float* q, void* state) { c->impl->prepare_query(q, state); }
inline void score_keys_adapter(const sl_kvcodec* c, const void* state, const void* rows, size_t stride, uint32_t n,
                               float* scores) {
  c->impl->score_keys(state, static_cast<const std::byte*>(rows), stride, n, scores);
}
inline void accumulate_values_adapter(const sl_kvcodec* c, const void* rows, size_t stride, uint32_t n, const float* w,
                                      float* acc) {
  c->impl->accumulate_values(static_cast<const std::byte*>(rows), stride, n, w, acc);
}
inline void finish_values_adapter(const sl_kvcodec* c, const float* acc, float* out) { c->impl->finish_values(acc, out); }
inline const char* opencl_source_adapter(const sl_kvcodec* c) {
  const std::string& s = c->impl->opencl_source();
  return s.empty() ? nullptr : s.c_str();
}

template <Factory F>
constexpr sl_kvcodec_api make_kvcodec_api() {
  return sl_kvcodec_api{sizeof(sl_kvcodec_api), SL_ABI_VERSION, create_adapter<F>, destroy_adapter, get_format_adapter,
                        encode_adapter, decode_adapter, query_state_bytes_adapter, prepare_query_adapter,
                        score_keys_adapter, accumulate_values_adapter, finish_values_adapter, opencl_source_adapter};
}

}  // namespace sluice::kvcodec
