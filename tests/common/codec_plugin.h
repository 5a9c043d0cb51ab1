#pragma once
// One KV codec instance from the plugins a registry found, named as the tests name codecs ("name" or
// "name:options", codec_spec.h); null (get() == nullptr) where the plugin is missing or refuses.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codec_spec.h"
#include "plugin/plugin_registry.h"
#include "sluice/kvcodec.h"

namespace sluice::test {

class PluginCodec {
 public:
  PluginCodec(const PluginRegistry& reg, const std::string& spec, uint32_t head_dim, sl_kv_role role) {
    const auto [name, options] = split_codec_spec(spec);
    const auto* rec = reg.find(SL_PLUGIN_KVCODEC, name);
    if (!rec) return;
    api_ = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
    sl_error err{};
    if (api_->create(head_dim, role, options.c_str(), &codec_, &err) != SL_OK) codec_ = nullptr;
  }
  ~PluginCodec() {
    if (codec_) api_->destroy(codec_);
  }
  PluginCodec(const PluginCodec&) = delete;
  PluginCodec& operator=(const PluginCodec&) = delete;
  const sl_kvcodec_api* api() const { return api_; }
  sl_kvcodec* get() const { return codec_; }

  // The host codec's reconstruction of rows of head_dim floats (encode, then decode).
  std::vector<float> round_trip(const std::vector<float>& x, uint32_t head_dim) const {
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api_->get_format(codec_, &f);
    const uint32_t rows = static_cast<uint32_t>(x.size() / head_dim);
    std::vector<uint8_t> bytes(std::size_t(rows) * f.row_bytes);
    std::vector<float> y(x.size());
    sl_error err{};
    EXPECT_EQ(api_->encode(codec_, x.data(), rows, bytes.data(), &err), SL_OK) << err.message;
    EXPECT_EQ(api_->decode(codec_, bytes.data(), rows, y.data(), &err), SL_OK) << err.message;
    return y;
  }

 private:
  const sl_kvcodec_api* api_ = nullptr;
  sl_kvcodec* codec_ = nullptr;
};

}  // namespace sluice::test
