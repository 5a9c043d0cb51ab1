#pragma once
// The KV cache as the host sees it: the codecs for K and V (chosen by --kv-codec), the backend's
// paged storage, and a page allocator. Sequences own lists of pages (their page tables).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/page_pool.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"
#include "sluice/backend.h"
#include "util/result.h"

namespace sluice {

struct ModelConfig;

// A --kv-codec value: "f16", "q8", "k=turbo4,v=turbo3". Names may carry options after ':'.
struct KvCodecChoice {
  std::string k_name, k_options, v_name, v_options;
  static Result<KvCodecChoice> parse(const std::string& spec);
  std::string describe() const;  // "f16" or "k=turbo4,v=turbo3"
};

// One created codec (a K or V instance) with the table it came from.
class KvCodec {
 public:
  static Result<std::unique_ptr<KvCodec>> create(const PluginRegistry& registry, const std::string& name,
                                                 const std::string& options, uint32_t head_dim, sl_kv_role role);
  ~KvCodec();
  const sl_kvcodec_api* api() const { return api_; }
  const sl_kvcodec* codec() const { return codec_; }
  const sl_kv_format& format() const { return format_; }
  const std::string& name() const { return name_; }

 private:
  KvCodec() = default;
  const sl_kvcodec_api* api_ = nullptr;
  sl_kvcodec* codec_ = nullptr;
  sl_kv_format format_{};
  std::string name_;
};

class KvCache {
 public:
  static constexpr uint32_t kPageTokens = 16;

  static Result<std::unique_ptr<KvCache>> create(const BackendHandle& backend, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens);
  ~KvCache();

  sl_kv_cache* raw() const { return cache_; }
  uint32_t page_tokens() const { return kPageTokens; }
  uint32_t n_pages() const { return n_pages_; }
  PagePool& pages() { return *pool_; }
  const PagePool& pages() const { return *pool_; }
  // Bytes of K and V for one token across all layers.
  double bytes_per_token() const { return bytes_per_token_; }
  uint64_t capacity_bytes() const { return static_cast<uint64_t>(bytes_per_token_ * n_pages_ * kPageTokens); }
  std::string codec_description() const;

 private:
  KvCache(const BackendHandle& backend) : backend_(backend) {}
  const BackendHandle& backend_;
  std::unique_ptr<KvCodec> k_, v_;
  sl_kv_cache* cache_ = nullptr;
  uint32_t n_pages_ = 0;
  double bytes_per_token_ = 0;
  std::unique_ptr<PagePool> pool_;
};

}  // namespace sluice
