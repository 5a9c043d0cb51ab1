#pragma once
// A KV cache layout for tests that attend on an OpenCL backend: the builtin f16 codec for keys and
// values (made here, destroyed with this object) and one layer of the given shape. The caller adds
// what else it needs (a recent window) and passes `layout` to kv_create.
#include <gtest/gtest.h>

#include "plugin/builtin_codecs.h"
#include "sluice/backend.h"

namespace sluice::test {

struct F16KvLayout {
  const sl_kvcodec_api* codec = builtin_f16_codec();
  sl_kvcodec *k = nullptr, *v = nullptr;
  sl_kv_layout layout{};

  F16KvLayout(uint32_t n_kv_heads, uint32_t head_dim, uint32_t page_tokens, uint32_t n_pages) {
    sl_error err{};
    EXPECT_EQ(codec->create(head_dim, SL_KV_KEYS, "", &k, &err), SL_OK) << err.message;
    EXPECT_EQ(codec->create(head_dim, SL_KV_VALUES, "", &v, &err), SL_OK) << err.message;
    layout.struct_size = sizeof(layout);
    layout.n_layers = 1;
    layout.n_kv_heads = n_kv_heads;
    layout.head_dim = head_dim;
    layout.page_tokens = page_tokens;
    layout.n_pages = n_pages;
    layout.k_api = codec;
    layout.k_codec = k;
    layout.v_api = codec;
    layout.v_codec = v;
  }
  ~F16KvLayout() {
    if (k) codec->destroy(k);
    if (v) codec->destroy(v);
  }
  F16KvLayout(const F16KvLayout&) = delete;
  F16KvLayout& operator=(const F16KvLayout&) = delete;
};

}  // namespace sluice::test
